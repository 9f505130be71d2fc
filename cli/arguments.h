#ifndef LOOM_CLI_ARGUMENTS_H_
#define LOOM_CLI_ARGUMENTS_H_

// The command lines of Loom's programs: ArgumentSpec, the flags, switches and positional arguments
// one subcommand accepts, with its help text, and ParsedArguments, what Parse found; Subcommand
// and DispatchSubcommand, which run `loomctl NAME ARGUMENTS...`; and the exit codes shared by
// every subcommand. loomctl's subcommands, loomd and loom-gpt parse their arguments with it.

#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace loom::cli {

// Exit codes shared by every subcommand.
inline constexpr int kExitSuccess = 0;
// The command ran and failed (for example the job failed).
inline constexpr int kExitFailure = 1;
// The command was misused: unknown subcommand or flag, bad value, invalid input file.
inline constexpr int kExitUsage = 2;
// The commands that talk to a cluster (submit, status, jobs, cancel, nodes, plan, watch):
// the job ended CANCELLED (submit --watch, watch).
inline constexpr int kExitJobCancelled = 3;
// The daemon answered with an error: it refused the request (INVALID_ARGUMENT naming the op,
// NOT_FOUND, FAILED_PRECONDITION, RESOURCE_EXHAUSTED, ...).
inline constexpr int kExitRequestRefused = 4;
// No daemon answered, the connection broke, or a deadline passed (UNAVAILABLE,
// DEADLINE_EXCEEDED).
inline constexpr int kExitUnreachable = 5;
// A watch or a `cluster up` ended by SIGINT or SIGTERM exits 128 + the signal, as a shell reports
// a command the signal ended (ExitCodeOfSignal, interrupt_signals.h).

class ParsedArguments;

// The arguments one subcommand accepts: flags `--name value` or `--name=value`, switches
// `--name` (or `--name=true|false`), then positional arguments. `--help` (or `-h`) is always
// accepted; `--` ends the flags. Each subcommand owns its own ArgumentSpec: no global flag table.
//
//   ArgumentSpec spec("loomctl run-plan", "Runs a plan on this machine.");
//   spec.AddPositional("PLAN", "the plan file (.pbtxt or .pb)")
//       .AddFlag("trace", "PATH", "", "write a Chrome trace of the run to PATH");
//   absl::StatusOr<ParsedArguments> parsed = spec.Parse(arguments);
class ArgumentSpec {
 public:
  // `command` names the subcommand in messages and help ("loomctl run-plan").
  ArgumentSpec(std::string command, std::string description);

  // A flag with a value; `default_value` is what Value returns when the flag is not given.
  ArgumentSpec& AddFlag(const std::string& name, const std::string& value_name,
                        const std::string& default_value, const std::string& help);
  // A flag that may be given several times (--name A --name B); ParsedArguments::Values returns
  // them in order (none when not given).
  ArgumentSpec& AddRepeatedFlag(const std::string& name, const std::string& value_name,
                                const std::string& help);
  // A flag without a value (false unless given).
  ArgumentSpec& AddSwitch(const std::string& name, const std::string& help);
  // A required positional argument, in order.
  ArgumentSpec& AddPositional(const std::string& name, const std::string& help);
  // An optional positional argument, after every required one; the command checks whether it
  // was given (positionals().size()). Usage shows it as [NAME].
  ArgumentSpec& AddOptionalPositional(const std::string& name, const std::string& help);

  // INVALID_ARGUMENT naming the culprit on an unknown flag, a flag given twice, a missing or
  // malformed value, or a wrong number of positional arguments. With `--help` anywhere, succeeds
  // with help_requested() set and checks nothing else.
  absl::StatusOr<ParsedArguments> Parse(const std::vector<std::string>& arguments) const;

  // "usage: loomctl run-plan PLAN [flags]", the description, the positionals and the flags.
  std::string Help() const;
  // The usage line alone.
  std::string Usage() const;
  const std::string& command() const { return command_; }

 private:
  struct Flag {
    std::string name;
    std::string value_name;  // empty for a switch
    std::string default_value;
    std::string help;
    bool repeated = false;
  };
  struct Positional {
    std::string name;
    std::string help;
    bool optional = false;
  };

  const Flag* FindFlag(const std::string& name) const;
  std::string FlagList() const;

  std::string command_;
  std::string description_;
  std::vector<Flag> flags_;
  std::vector<Positional> positionals_;
};

// What ArgumentSpec::Parse found.
class ParsedArguments {
 public:
  bool help_requested() const { return help_requested_; }
  const std::vector<std::string>& positionals() const { return positionals_; }
  // Whether the flag or switch was given on the command line.
  bool Has(const std::string& name) const { return values_.contains(name); }
  // The flag's value, or its default when not given.
  std::string Value(const std::string& name) const;
  // Whether the switch is on.
  bool Switch(const std::string& name) const;
  // Every value of a repeated flag, in the order given.
  std::vector<std::string> Values(const std::string& name) const;

 private:
  friend class ArgumentSpec;

  bool help_requested_ = false;
  std::vector<std::string> positionals_;
  absl::flat_hash_map<std::string, std::string> values_;    // given flags
  absl::flat_hash_map<std::string, std::string> defaults_;  // every flag's default
  absl::flat_hash_map<std::string, std::vector<std::string>> repeated_values_;
};

// The INVALID_ARGUMENT error of a bad command line: "COMMAND: MESSAGE (see 'COMMAND --help')".
absl::Status UsageError(absl::string_view command, absl::string_view message);

// One loomctl subcommand: `loomctl NAME ARGUMENTS...`. `run` gets the arguments after the
// subcommand's name and returns the process exit code; it writes results to `out` and
// diagnostics to `error`.
struct Subcommand {
  std::string name;
  std::string summary;
  std::function<int(const std::vector<std::string>& arguments, std::ostream& out,
                    std::ostream& error)>
      run;
};

// Dispatches `arguments` (argv without the program name) to one of `subcommands`:
// `--help`, `-h`, `help` or nothing lists them; `help NAME` is `NAME --help`; an unknown
// subcommand is an error (exit code 2).
int DispatchSubcommand(const std::vector<Subcommand>& subcommands,
                       const std::vector<std::string>& arguments, std::ostream& out,
                       std::ostream& error);

// The list of subcommands, for `loomctl --help`.
std::string SubcommandHelp(const std::vector<Subcommand>& subcommands);

}  // namespace loom::cli

#endif  // LOOM_CLI_ARGUMENTS_H_
