#include "tools/loomctl/cluster_up_down_command.h"

#include <filesystem>
#include <memory>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "cli/parse_options_and_run.h"
#include "cli/tls_flags.h"
#include "core/cpu_affinity.h"
#include "tools/loomctl/cluster_state.h"
#include "tools/loomctl/cpu_binding.h"
#include "tools/loomctl/interrupt_signals.h"
#include "tools/loomctl/job_summary.h"
#include "tools/loomctl/local_cluster.h"
#include "tools/loomctl/local_process.h"

namespace loom::loomctl {
namespace {

constexpr char kUpCommand[] = "loomctl cluster up";
constexpr char kDownCommand[] = "loomctl cluster down";

std::string ClusterHelp() {
  return absl::StrCat(
      "usage: loomctl cluster up|down [flags]\n\n"
      "A cluster of loomd processes on this machine, for development and tests.\n\n"
      "commands:\n"
      "  up    start N daemons on free ports and wait until every node is ready\n"
      "  down  stop the daemons 'up' started\n\n"
      "Run 'loomctl cluster up --help' or 'loomctl cluster down --help' for their flags.\n");
}

// The loomd next to this loomctl.
std::string DefaultLoomd() {
  const std::string self = CurrentExecutablePath();
  if (self.empty()) return "loomd";
  return (std::filesystem::path(self).parent_path() / "loomd").string();
}

absl::StatusOr<int> PositiveFlag(const char* command, const cli::ParsedArguments& arguments,
                                 const std::string& flag) {
  int value = 0;
  const std::string text = arguments.Value(flag);
  if (!absl::SimpleAtoi(text, &value) || value < 1) {
    return cli::UsageError(
        command, absl::StrCat("--", flag, " must be a whole number >= 1, not '", text, "'"));
  }
  return value;
}

absl::StatusOr<absl::Duration> TimeoutFlag(const char* command,
                                           const cli::ParsedArguments& arguments) {
  absl::Duration timeout;
  const std::string text = arguments.Value("timeout");
  if (!absl::ParseDuration(text, &timeout) || timeout <= absl::ZeroDuration()) {
    return cli::UsageError(
        command, absl::StrCat("--timeout must be a duration > 0 (e.g. 30s, 2m), not '", text, "'"));
  }
  return timeout;
}

int RunUp(const std::vector<std::string>& arguments, std::ostream& out, std::ostream& error) {
  const cli::ArgumentSpec spec = ClusterUpArgumentSpec();
  int exit_code = cli::kExitSuccess;
  std::optional<cli::ParsedArguments> parsed =
      cli::ParseOrReport(spec, arguments, out, error, &exit_code);
  if (!parsed.has_value()) return exit_code;
  SetLogVerbosity(parsed->Switch("verbose"));
  LocalClusterOptions options;
  for (auto [flag, target] :
       {std::pair<const char*, int*>{"nodes", &options.nodes},
        std::pair<const char*, int*>{"devices-per-node", &options.devices_per_node}}) {
    absl::StatusOr<int> value = PositiveFlag(kUpCommand, *parsed, flag);
    if (!value.ok()) {
      error << value.status().message() << "\n";
      return cli::kExitUsage;
    }
    *target = *value;
  }
  absl::StatusOr<absl::Duration> timeout = TimeoutFlag(kUpCommand, *parsed);
  if (!timeout.ok()) {
    error << timeout.status().message() << "\n";
    return cli::kExitUsage;
  }
  options.timeout = *timeout;
  options.state_directory = parsed->Value("state-dir");
  options.loomd = parsed->Has("loomd") ? parsed->Value("loomd") : DefaultLoomd();
  options.memory_budget_per_device = parsed->Value("memory-budget-per-device");
  options.host = parsed->Value("host");
  if (const std::string binding = parsed->Value("bind-cpus"); binding != "none") {
    absl::StatusOr<std::vector<int>> allowed = AllowedCpus(0);
    if (!allowed.ok()) {
      error << kUpCommand << ": " << allowed.status().message() << "\n";
      return cli::kExitFailure;
    }
    absl::StatusOr<std::vector<std::vector<int>>> node_cpus =
        NodeCpus(binding, options.nodes, *allowed);
    if (!node_cpus.ok()) {
      error << kUpCommand << ": " << node_cpus.status().message() << "\n";
      return cli::kExitUsage;
    }
    options.node_cpus = *std::move(node_cpus);
  }
  // Checked here (a usage error naming the flag and the file); the daemons get the paths.
  absl::StatusOr<std::optional<TlsCredentials>> tls = cli::TlsFromArguments(kUpCommand, *parsed);
  if (!tls.ok()) {
    error << tls.status().message() << "\n";
    return cli::kExitUsage;
  }
  options.tls_credentials = *std::move(tls);
  // Absolute, since the state file keeps them for commands run from other directories.
  auto absolute = [&](const char* flag) {
    const std::string path = parsed->Value(flag);
    return path.empty() ? path : std::filesystem::absolute(path).lexically_normal().string();
  };
  options.tls = {absolute("tls-ca"), absolute("tls-cert"), absolute("tls-key")};
  // The daemons' file roots: absolute (the daemons run elsewhere), the current directory unless
  // given.
  for (auto [flag, target] :
       {std::pair<const char*, std::vector<std::string>*>{"data-root", &options.data_roots},
        std::pair<const char*, std::vector<std::string>*>{"checkpoint-root",
                                                          &options.checkpoint_roots}}) {
    std::vector<std::string> roots = parsed->Values(flag);
    if (roots.empty()) roots.push_back(".");
    for (const std::string& root : roots) {
      std::error_code failed;
      const std::string path = std::filesystem::absolute(root, failed).lexically_normal().string();
      if (failed || !std::filesystem::is_directory(path, failed)) {
        error << kUpCommand << ": --" << flag << " '" << root << "' is not an existing directory\n";
        return cli::kExitUsage;
      }
      target->push_back(path);
    }
  }

  // Ctrl-C while the daemons start stops the ones started, rather than leaving them unrecorded.
  absl::StatusOr<std::unique_ptr<InterruptSignals>> signals = InterruptSignals::Install();
  if (signals.ok()) options.interrupt = signals->get();
  absl::StatusOr<ClusterState> state = StartLocalCluster(options, error);
  if (!state.ok()) {
    error << kUpCommand << ": " << state.status().message() << "\n";
    return options.interrupt != nullptr && options.interrupt->received() != 0
               ? ExitCodeOfSignal(options.interrupt->received())
               : cli::kExitFailure;
  }
  error << "cluster of " << state->nodes.size() << (state->nodes.size() == 1 ? " node" : " nodes")
        << " ready; state in " << ClusterStatePath(options.state_directory)
        << "; stop it with 'loomctl cluster down"
        << (parsed->Has("state-dir") ? absl::StrCat(" --state-dir ", options.state_directory) : "")
        << "'\n";
  // stdout: the coordinator's address alone, for scripts.
  out << state->coordinator << "\n";
  out.flush();
  return cli::kExitSuccess;
}

int RunDown(const std::vector<std::string>& arguments, std::ostream& out, std::ostream& error) {
  const cli::ArgumentSpec spec = ClusterDownArgumentSpec();
  int exit_code = cli::kExitSuccess;
  std::optional<cli::ParsedArguments> parsed =
      cli::ParseOrReport(spec, arguments, out, error, &exit_code);
  if (!parsed.has_value()) return exit_code;
  absl::StatusOr<absl::Duration> timeout = TimeoutFlag(kDownCommand, *parsed);
  if (!timeout.ok()) {
    error << timeout.status().message() << "\n";
    return cli::kExitUsage;
  }
  const std::string directory = parsed->Value("state-dir");
  absl::Status stopped = StopLocalCluster(directory, *timeout, out);
  if (absl::IsNotFound(stopped)) {
    error << kDownCommand << ": " << stopped.message() << "; nothing to stop\n";
    return cli::kExitSuccess;
  }
  if (!stopped.ok()) {
    error << kDownCommand << ": " << stopped.message() << "\n";
    return cli::kExitFailure;
  }
  out << "cluster stopped; removed " << ClusterStatePath(directory) << "\n";
  return cli::kExitSuccess;
}

int RunCluster(const std::vector<std::string>& arguments, std::ostream& out, std::ostream& error) {
  if (arguments.empty()) {
    error << ClusterHelp();
    return cli::kExitUsage;
  }
  const std::vector<std::string> rest(arguments.begin() + 1, arguments.end());
  if (arguments[0] == "up") return RunUp(rest, out, error);
  if (arguments[0] == "down") return RunDown(rest, out, error);
  if (arguments[0] == "--help" || arguments[0] == "-h" || arguments[0] == "help") {
    out << ClusterHelp();
    return cli::kExitSuccess;
  }
  error << "loomctl cluster: unknown command '" << arguments[0]
        << "'; commands are up, down (see 'loomctl cluster --help')\n";
  return cli::kExitUsage;
}

}  // namespace

cli::Subcommand ClusterSubcommand() {
  return cli::Subcommand{"cluster",
                         "start ('cluster up') or stop ('cluster down') loomds on this machine",
                         RunCluster};
}

cli::ArgumentSpec ClusterUpArgumentSpec() {
  cli::ArgumentSpec spec(
      kUpCommand,
      "Starts a cluster of loomd processes on this machine: node 0 is the coordinator\n"
      "(--node-rank 0), nodes 1..N-1 join it (--coordinator ADDRESS --node-rank I). Each listens\n"
      "on a free port of --host, serves Prometheus metrics on another (--metrics-listen), has\n"
      "--devices cpu:K and a log STATE_DIR/nodeI.log. Waits until the coordinator is SERVING and\n"
      "lists every node READY, then writes STATE_DIR/cluster.json (pids, addresses, metrics\n"
      "addresses, logs, CPUs), prints each node's addresses on stderr and the coordinator's\n"
      "address on stdout. The other loomctl commands then default to that coordinator (when\n"
      "STATE_DIR is the default one). Refused while a cluster from the same STATE_DIR runs.\n"
      "On failure, prints the end of the failing daemon's log and stops the others. With\n"
      "--tls-ca/--tls-cert/--tls-key every daemon runs with mutual TLS, and the other loomctl\n"
      "commands then use those files with the recorded coordinator. --bind-cpus binds each\n"
      "daemon to CPUs of its own (several loomds on one host otherwise share cores by chance).\n"
      "Jobs may read files (token files, initial states) only beneath --data-root and write\n"
      "checkpoints only beneath --checkpoint-root: both default to the current directory.\n\n"
      "Exit codes: 0 the cluster is ready; 1 it could not be started; 2 usage error.");
  spec.AddFlag("nodes", "N", "1", "the number of daemons (nodes)")
      .AddFlag("devices-per-node", "K", "1", "CPU devices per node (loomd --devices cpu:K)")
      .AddFlag("state-dir", "DIR", DefaultClusterStateDirectory(),
               "where the state file and the logs go")
      .AddFlag("loomd", "PATH", "", "the loomd binary (default: the loomd next to loomctl)")
      .AddFlag("memory-budget-per-device", "BYTES", "",
               "passed to every loomd (e.g. 4GiB; 0: no limit; default: the cluster's devices "
               "share 3/4 of this host's memory)")
      .AddRepeatedFlag("data-root", "DIR",
                       "every daemon's --data-root: its jobs may read token files, safetensors "
                       "inputs and initial states only beneath DIR (default: the current "
                       "directory)")
      .AddRepeatedFlag("checkpoint-root", "DIR",
                       "every daemon's --checkpoint-root: its jobs may write checkpoints "
                       "(submit --checkpoint) only beneath DIR, and start from initial states "
                       "there (default: the current directory)")
      .AddFlag("host", "HOST", "127.0.0.1", "the address every daemon listens on")
      .AddFlag("bind-cpus", "MODE", "none",
               "none, auto or LIST/LIST/...: bind each daemon to CPUs of its own from its "
               "start; auto splits the CPUs loomctl may use into one group of consecutive CPUs "
               "per node, a LIST per node names them (taskset -c's syntax, e.g. 0-1/2-3)")
      .AddFlag("timeout", "DURATION", "60s",
               "how long the daemons may take to start and report every node ready")
      .AddSwitch("verbose", "log INFO messages (default: warnings and errors only)");
  // Every daemon gets them (its certificate must name --host and carry the node role; one
  // certificate for all works, e.g. scripts/make-certs --role node --role admin DIR local
  // 127.0.0.1), and the other loomctl commands use them with the recorded coordinator unless
  // given TLS flags of their own.
  cli::AddTlsFlags(spec);
  return spec;
}

cli::ArgumentSpec ClusterDownArgumentSpec() {
  cli::ArgumentSpec spec(
      kDownCommand,
      "Stops the cluster 'loomctl cluster up' started from STATE_DIR: SIGTERM to every daemon\n"
      "(each finishes or cancels its running job within its --shutdown-grace), waits up to\n"
      "--timeout, SIGKILL to the ones still running, then removes STATE_DIR/cluster.json. Says\n"
      "what happened to each daemon. No recorded cluster: nothing to do (exit 0).\n\n"
      "Exit codes: 0 stopped (or nothing to stop); 1 a daemon survived SIGKILL or the state\n"
      "could not be removed; 2 usage error.");
  spec.AddFlag("state-dir", "DIR", DefaultClusterStateDirectory(),
               "the state directory 'cluster up' used")
      .AddFlag("timeout", "DURATION", "30s", "how long the daemons get after SIGTERM");
  return spec;
}

}  // namespace loom::loomctl
