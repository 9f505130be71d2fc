#include "tools/loomctl/local_cluster.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "client/cluster_client.h"
#include "core/file_contents.h"
#include "device/host_memory.h"
#include "glog/logging.h"
#include "tools/loomctl/cpu_binding.h"
#include "tools/loomctl/local_process.h"

namespace loom::loomctl {
namespace {

constexpr int kLogTailLines = 30;
constexpr absl::Duration kKillWait = absl::Seconds(5);
constexpr absl::Duration kPollInterval = absl::Milliseconds(50);

// An exclusive lock on STATE_DIR/lock for the time of an `up` or `down`, so that two of them do
// not start or stop the same cluster at once.
class StateDirectoryLock {
 public:
  static absl::StatusOr<std::unique_ptr<StateDirectoryLock>> Acquire(const std::string& directory) {
    const std::string path = (std::filesystem::path(directory) / "lock").string();
    const int descriptor = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (descriptor < 0) {
      return absl::InternalError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
    }
    if (flock(descriptor, LOCK_EX | LOCK_NB) != 0) {
      close(descriptor);
      return absl::FailedPreconditionError(absl::StrCat(
          "another 'loomctl cluster up' or 'down' is using ", directory, " right now"));
    }
    return std::unique_ptr<StateDirectoryLock>(new StateDirectoryLock(descriptor));
  }
  ~StateDirectoryLock() { close(descriptor_); }  // closing releases the lock

 private:
  explicit StateDirectoryLock(int descriptor) : descriptor_(descriptor) {}
  int descriptor_;
};

LocalProcess ProcessOf(const ClusterNodeRecord& node) { return {node.pid, node.start_ticks}; }

// The address in loomd's "loomd: node 'NAME' listening on HOST:PORT (cpu:N)" line, or "".
// The word after `marker` on loomd's first line that has it ("listening on ADDRESS ...",
// "metrics on http://ADDRESS/metrics"); empty while there is none.
std::string AddressAfter(const std::string& log_path, const std::string& marker) {
  std::ifstream log(log_path);
  std::string line;
  while (std::getline(log, line)) {
    const size_t at = line.find(marker);
    if (!absl::StartsWith(line, "loomd:") || at == std::string::npos) continue;
    std::string address = line.substr(at + marker.size());
    address = address.substr(0, address.find(' '));
    return std::string(absl::StripSuffix(address, "/metrics"));
  }
  return "";
}

// `loomd --help`: checks that the binary is a loomd before a cluster of it is started.
absl::StatusOr<std::string> LoomdHelp(const std::string& loomd, const std::string& directory) {
  const std::string path = (std::filesystem::path(directory) / "loomd-help.txt").string();
  absl::StatusOr<LocalProcess> help = StartDetachedProcess(loomd, {"--help"}, path);
  if (!help.ok()) return help.status();
  std::string ending;
  if (!WaitForProcessExit(*help, absl::Now() + absl::Seconds(10), &ending)) {
    kill(static_cast<pid_t>(help->pid), SIGKILL);
    WaitForProcessExit(*help, absl::Now() + kKillWait);
    return absl::DeadlineExceededError(absl::StrCat("'", loomd, " --help' did not end in 10 s"));
  }
  const std::string text = ReadFileContents(path).value_or("");
  std::filesystem::remove(path);
  if (!absl::StrContains(text, "--listen")) {
    return absl::FailedPreconditionError(absl::StrCat(loomd, " does not look like loomd: '--help' ",
                                                      ending, " and printed: ", text));
  }
  return text;
}

// SIGTERM to every process, wait until `deadline`, SIGKILL to the rest. One line per node on
// `progress`. The names of the nodes still running at the end.
std::vector<std::string> StopNodes(const std::vector<ClusterNodeRecord>& nodes, absl::Time deadline,
                                   std::ostream& progress) {
  std::vector<bool> signalled(nodes.size(), false);
  for (size_t i = 0; i < nodes.size(); ++i) {
    signalled[i] = SignalProcess(ProcessOf(nodes[i]), SIGTERM);
  }
  std::vector<std::string> survivors;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const ClusterNodeRecord& node = nodes[i];
    const std::string who = absl::StrCat(node.name, " (pid ", node.pid, ")");
    if (!signalled[i]) {
      progress << who << ": was not running\n";
      continue;
    }
    std::string ending;
    if (WaitForProcessExit(ProcessOf(node), deadline, &ending)) {
      progress << who << ": stopped" << (ending.empty() ? "" : absl::StrCat(", ", ending)) << "\n";
      continue;
    }
    SignalProcess(ProcessOf(node), SIGKILL);
    if (WaitForProcessExit(ProcessOf(node), absl::Now() + kKillWait)) {
      progress << who << ": did not stop after SIGTERM; killed (SIGKILL)\n";
    } else {
      progress << who << ": still running after SIGKILL\n";
      survivors.push_back(who);
    }
  }
  progress.flush();
  return survivors;
}

// Stops what was started and returns `failure` with the tail of `failing`'s log appended.
absl::Status FailStart(const std::vector<ClusterNodeRecord>& started,
                       const ClusterNodeRecord* failing, absl::Status failure,
                       std::ostream& progress) {
  std::string message(failure.message());
  if (failing != nullptr) {
    absl::StrAppend(&message, "\n--- the last lines of ", failing->log, " ---\n",
                    TailOfFile(failing->log, kLogTailLines), "---");
  }
  std::vector<ClusterNodeRecord> running;
  for (const ClusterNodeRecord& node : started) {
    if (IsProcessRunning(ProcessOf(node))) running.push_back(node);
  }
  if (!running.empty()) {
    progress << "stopping the daemons started so far\n";
    StopNodes(running, absl::Now() + absl::Seconds(10), progress);
  }
  return absl::Status(failure.code(), message);
}

// CANCELLED naming the signal once `interrupt` received one.
absl::Status CheckInterrupt(const InterruptSignals* interrupt, const std::string& what) {
  if (interrupt == nullptr || interrupt->received() == 0) return absl::OkStatus();
  return absl::CancelledError(
      absl::StrCat("interrupted by ", SignalName(interrupt->received()), " ", what));
}

// Waits for the daemon's gRPC and metrics addresses (the first two lines it prints; the metrics
// URL's scheme is `metrics_scheme`).
absl::Status AwaitAddresses(ClusterNodeRecord& node, const std::string& metrics_scheme,
                            absl::Time deadline, const InterruptSignals* interrupt) {
  while (true) {
    if (absl::Status interrupted =
            CheckInterrupt(interrupt, absl::StrCat("while ", node.name, " was starting"));
        !interrupted.ok()) {
      return interrupted;
    }
    node.address = AddressAfter(node.log, "listening on ");
    node.metrics = AddressAfter(node.log, absl::StrCat("metrics on ", metrics_scheme, "://"));
    if (!node.address.empty() && !node.metrics.empty()) return absl::OkStatus();
    std::string ending;
    if (!IsProcessRunning(ProcessOf(node), &ending)) {
      return absl::FailedPreconditionError(absl::StrCat(node.name, " (pid ", node.pid, ") ",
                                                        ending.empty() ? "ended" : ending,
                                                        " before it listened"));
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(node.name, " (pid ", node.pid, ") did not print its addresses in time"));
    }
    std::this_thread::sleep_for(absl::ToChronoNanoseconds(kPollInterval));
  }
}

// The first node that no longer runs, or nullptr.
const ClusterNodeRecord* FirstEnded(const std::vector<ClusterNodeRecord>& nodes,
                                    std::string* ending) {
  for (const ClusterNodeRecord& node : nodes) {
    if (!IsProcessRunning(ProcessOf(node), ending)) return &node;
  }
  return nullptr;
}

}  // namespace

absl::StatusOr<ClusterState> StartLocalCluster(const LocalClusterOptions& options,
                                               std::ostream& progress) {
  if (options.nodes < 1 || options.devices_per_node < 1) {
    return absl::InvalidArgumentError("a cluster needs at least one node and one device per node");
  }
  if (!options.node_cpus.empty() && static_cast<int>(options.node_cpus.size()) != options.nodes) {
    return absl::InvalidArgumentError(absl::StrCat("CPU lists for ", options.node_cpus.size(),
                                                   " nodes in a cluster of ", options.nodes));
  }
  const std::filesystem::path directory(options.state_directory);
  std::error_code error_code;
  std::filesystem::create_directories(directory, error_code);
  if (error_code) {
    return absl::InternalError(absl::StrCat("cannot create the state directory ",
                                            directory.string(), ": ", error_code.message()));
  }
  std::filesystem::permissions(directory, std::filesystem::perms::owner_all,
                               std::filesystem::perm_options::replace, error_code);
  absl::StatusOr<std::unique_ptr<StateDirectoryLock>> lock =
      StateDirectoryLock::Acquire(directory.string());
  if (!lock.ok()) return lock.status();

  if (absl::StatusOr<ClusterState> previous = ReadClusterState(directory.string()); previous.ok()) {
    std::vector<std::string> running;
    for (const ClusterNodeRecord& node : previous->nodes) {
      if (IsProcessRunning(ProcessOf(node))) {
        running.push_back(absl::StrCat(node.name, " pid ", node.pid));
      }
    }
    if (!running.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "a cluster started from ", directory.string(), " is still running (",
          absl::StrJoin(running, ", "), ", coordinator ", previous->coordinator,
          "): stop it first with 'loomctl cluster down --state-dir ", directory.string(), "'"));
    }
    progress << "note: replacing the record of a cluster that no longer runs\n";
  }

  if (access(options.loomd.c_str(), X_OK) != 0) {
    return absl::NotFoundError(absl::StrCat("no executable loomd at ", options.loomd,
                                            ": build it (cmake --build build --target loomd) or "
                                            "name it with --loomd PATH"));
  }
  if (absl::StatusOr<std::string> help = LoomdHelp(options.loomd, directory.string()); !help.ok()) {
    return help.status();
  }

  const bool tls = options.tls_credentials.has_value();
  // The daemons share this host: with loomd's `auto` each would budget 3/4 of its memory for its
  // own devices. Unreadable host memory: loomd's auto says why.
  std::string memory_budget = options.memory_budget_per_device;
  if (memory_budget.empty()) {
    absl::StatusOr<HostMemory> host = ReadHostMemory();
    if (host.ok()) {
      memory_budget = absl::StrCat(
          DefaultCpuMemoryBudget(host->bytes, options.nodes * options.devices_per_node));
    }
  }
  const std::string metrics_scheme = tls ? "https" : "http";

  const absl::Time deadline = absl::Now() + options.timeout;
  ClusterState state;
  state.loomd = options.loomd;
  state.tls = options.tls;
  for (int rank = 0; rank < options.nodes; ++rank) {
    ClusterNodeRecord node;
    node.rank = rank;
    node.name = absl::StrCat("node", rank);
    node.log = (directory / absl::StrCat(node.name, ".log")).string();
    // Every daemon of the cluster shares the host: each gets free ports of its own.
    std::vector<std::string> arguments = {
        "--listen",         absl::StrCat(options.host, ":0"),
        "--metrics-listen", absl::StrCat(options.host, ":0"),
        "--node-name",      node.name,
        "--devices",        absl::StrCat("cpu:", options.devices_per_node)};
    if (rank > 0) {
      arguments.insert(arguments.end(),
                       {"--coordinator", state.coordinator, "--node-rank", absl::StrCat(rank)});
    }
    if (!memory_budget.empty()) {
      arguments.insert(arguments.end(), {"--memory-budget-per-device", memory_budget});
    }
    for (const std::string& root : options.data_roots) {
      arguments.insert(arguments.end(), {"--data-root", root});
    }
    for (const std::string& root : options.checkpoint_roots) {
      arguments.insert(arguments.end(), {"--checkpoint-root", root});
    }
    if (tls) {
      arguments.insert(arguments.end(),
                       {"--tls-ca", options.tls.authority_path, "--tls-cert",
                        options.tls.certificate_path, "--tls-key", options.tls.private_key_path});
    }
    LOG(INFO) << "starting " << options.loomd << " " << absl::StrJoin(arguments, " ");
    const std::vector<int> cpus =
        options.node_cpus.empty() ? std::vector<int>() : options.node_cpus[rank];
    node.cpus = FormatCpuList(cpus);
    absl::StatusOr<LocalProcess> process =
        StartDetachedProcess(options.loomd, arguments, node.log, cpus);
    if (!process.ok()) return FailStart(state.nodes, nullptr, process.status(), progress);
    node.pid = process->pid;
    node.start_ticks = process->start_ticks;
    state.nodes.push_back(node);
    if (absl::Status started =
            AwaitAddresses(state.nodes.back(), metrics_scheme, deadline, options.interrupt);
        !started.ok()) {
      const bool interrupted = started.code() == absl::StatusCode::kCancelled;
      return FailStart(state.nodes, interrupted ? nullptr : &state.nodes.back(), started, progress);
    }
    const ClusterNodeRecord& started = state.nodes.back();
    if (rank == 0) state.coordinator = started.address;
    progress << node.name << ": pid " << node.pid << ", listening on " << started.address
             << (rank == 0 ? " (coordinator)" : "") << ", metrics " << metrics_scheme << "://"
             << started.metrics << "/metrics, log " << node.log
             << (node.cpus.empty() ? "" : absl::StrCat(", bound to CPUs ", node.cpus)) << "\n";
    progress.flush();
  }

  ClusterClientOptions client_options;
  client_options.connect_timeout = std::max(deadline - absl::Now(), absl::Milliseconds(1));
  client_options.call_timeout = absl::Seconds(5);
  client_options.tls = options.tls_credentials;
  absl::StatusOr<std::unique_ptr<ClusterClient>> client =
      ClusterClient::Connect(state.coordinator, client_options);
  if (!client.ok()) return FailStart(state.nodes, &state.nodes[0], client.status(), progress);
  progress << "waiting for " << options.nodes << (options.nodes == 1 ? " node" : " nodes")
           << " to be ready\n";
  progress.flush();
  std::string last_report;
  while (true) {
    if (absl::Status interrupted =
            CheckInterrupt(options.interrupt, "before the cluster was ready");
        !interrupted.ok()) {
      return FailStart(state.nodes, nullptr, interrupted, progress);
    }
    absl::Status ready = (*client)->WaitUntilReady(
        options.nodes, std::min(deadline, absl::Now() + absl::Milliseconds(500)));
    if (ready.ok()) break;
    std::string ending;
    if (const ClusterNodeRecord* ended = FirstEnded(state.nodes, &ending); ended != nullptr) {
      return FailStart(state.nodes, ended,
                       absl::FailedPreconditionError(absl::StrCat(
                           ended->name, " (pid ", ended->pid, ") ",
                           ending.empty() ? "ended" : ending, " before the cluster was ready")),
                       progress);
    }
    if (absl::Now() >= deadline) {
      return FailStart(state.nodes, &state.nodes[0],
                       absl::DeadlineExceededError(absl::StrCat(
                           "the cluster was not ready after ",
                           absl::FormatDuration(options.timeout), ": ", ready.message())),
                       progress);
    }
    if (ready.message() != last_report) {
      last_report = std::string(ready.message());
      LOG(INFO) << last_report;
    }
  }
  if (absl::Status interrupted = CheckInterrupt(options.interrupt, "as the cluster became ready");
      !interrupted.ok()) {
    return FailStart(state.nodes, nullptr, interrupted, progress);
  }
  if (absl::Status written = WriteClusterState(directory.string(), state); !written.ok()) {
    return FailStart(state.nodes, nullptr, written, progress);
  }
  return state;
}

absl::Status StopLocalCluster(const std::string& state_directory, absl::Duration timeout,
                              std::ostream& progress) {
  absl::StatusOr<ClusterState> state = ReadClusterState(state_directory);
  if (!state.ok()) return state.status();
  absl::StatusOr<std::unique_ptr<StateDirectoryLock>> lock =
      StateDirectoryLock::Acquire(state_directory);
  if (!lock.ok()) return lock.status();
  std::vector<std::string> survivors = StopNodes(state->nodes, absl::Now() + timeout, progress);
  if (!survivors.empty()) {
    return absl::InternalError(
        absl::StrCat("still running after SIGKILL: ", absl::StrJoin(survivors, ", "), "; ",
                     ClusterStatePath(state_directory), " is kept"));
  }
  std::error_code error_code;
  std::filesystem::remove(ClusterStatePath(state_directory), error_code);
  if (error_code) {
    return absl::InternalError(absl::StrCat("cannot remove ", ClusterStatePath(state_directory),
                                            ": ", error_code.message()));
  }
  return absl::OkStatus();
}

}  // namespace loom::loomctl
