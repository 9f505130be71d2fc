#ifndef LOOM_CLI_PARSE_OPTIONS_AND_RUN_H_
#define LOOM_CLI_PARSE_OPTIONS_AND_RUN_H_

// The shared start of a loomctl subcommand's run: ParseOrReport parses the arguments and answers
// --help and parse errors with the exit code to return, and ParseOptionsAndRun goes on to turn
// the parsed arguments into the subcommand's options and run it.

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cli/arguments.h"

namespace loom::cli {

// Parses `arguments` with `spec`. On --help prints the help to `out` and on a parse error the
// error to `error`; both return nullopt with the exit code to end with in `exit_code`.
inline std::optional<ParsedArguments> ParseOrReport(const ArgumentSpec& spec,
                                                    const std::vector<std::string>& arguments,
                                                    std::ostream& out, std::ostream& error,
                                                    int* exit_code) {
  absl::StatusOr<ParsedArguments> parsed = spec.Parse(arguments);
  if (!parsed.ok()) {
    error << parsed.status().message() << "\n";
    *exit_code = kExitUsage;
    return std::nullopt;
  }
  if (parsed->help_requested()) {
    out << spec.Help();
    *exit_code = kExitSuccess;
    return std::nullopt;
  }
  return *std::move(parsed);
}

// The body of a subcommand's Subcommand::run, shared by the loomctl subcommands: parses
// `arguments` with `spec`, prints the help to `out` when --help is given, turns the parsed
// arguments into the subcommand's options with `options_from` and runs `run` with them. A parse
// or options error is written to `error` and returns kExitUsage; otherwise returns what `run`
// returns.
template <typename Options>
int ParseOptionsAndRun(const ArgumentSpec& spec, const std::vector<std::string>& arguments,
                       absl::StatusOr<Options> (*options_from)(const ParsedArguments&),
                       int (*run)(const Options&, std::ostream&, std::ostream&), std::ostream& out,
                       std::ostream& error) {
  int exit_code = kExitSuccess;
  std::optional<ParsedArguments> parsed = ParseOrReport(spec, arguments, out, error, &exit_code);
  if (!parsed.has_value()) return exit_code;
  absl::StatusOr<Options> options = options_from(*parsed);
  if (!options.ok()) {
    error << options.status().message() << "\n";
    return kExitUsage;
  }
  return run(*options, out, error);
}

}  // namespace loom::cli

#endif  // LOOM_CLI_PARSE_OPTIONS_AND_RUN_H_
