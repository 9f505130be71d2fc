// bench_transfer: a register moving between two processes through Loom's SEND/RECEIVE path, against
// ucx_perftest tag_bw between two processes over the same UCX transport, in one run.
//
// Loom: a whole-job plan with a SOURCE on node0/cpu:0 writing register "data" (4 MiB or 64 MiB of
// float32, 2 slots) and a COMPUTE on node1/cpu:0 reading it; both run "bench_noop" (a kernel that
// does nothing), so all the time goes to moving the register. compiler::SplitByNode turns the
// cross-node read into a SEND on node 0 and a RECEIVE on node 1 (whose 2 slots are the credits), as
// for every job loomd runs; each node's plan runs in a process of its own as a daemon::NodeJob
// (JobRuntime + UCX TransportNetwork, connected through this process, started together). The
// bandwidth is timed on the receiving node, from its event record: the consumer's act starts of
// the measured pieces, (pieces x size) / (start(last) - start(last warm-up piece)). That is the
// steady rate at which registers become readable on node 1, with everything a piece costs: the
// credit (kCredit) to the sender, the tagged UCX transfer, the kSent message, the READY and FREE
// messages, the acts of the SEND, RECEIVE and consumer actors.
//
// ucx_perftest: `ucx_perftest -t tag_bw -s SIZE -n N -w W` (server and client on 127.0.0.1), the
// "average" bandwidth of its final line (MB/s in ucx_perftest is 2^20 bytes per second). This is
// the peer of the RESULT line. Both of its processes busy-poll their UCX worker, i.e. hold a core
// each for the whole run, and its endpoints have no error handling. Loom's endpoints use error
// handling mode PEER (a lost node must fail the job), and Loom's progress thread polls 20 us after
// the last activity and then sleeps on the worker's event file descriptor (transport/README.md).
// For reference the benchmark also runs ucx_perftest with each of the two: `-e` (error handling
// mode PEER, still busy polling: over TCP, UCX 1.13 then gives the rendezvous no zero-copy lane)
// and `-e -I -E sleep` (Loom's settings: error handling, the wake-up feature, sleeping while
// waiting). A failed run of either is printed, not fatal.
//
// Transports, two RESULT lines:
// - `transfer`: UCX_TLS=tcp for both (Loom sets TLS=tcp in its UCX context's configuration, the
//   perftest processes get it in their environment): the path between hosts.
// - `transfer-same-host`: what each does best on one host. Loom's endpoints use UCX's error
//   handling mode PEER (a lost node must fail the job, not hang it), in which UCX 1.13 offers no
//   shared memory (ucx_perftest -e over sm fails; the benchmark shows it), so Loom's data between
//   processes of one host go by its own same-host copy (UCX_TLS=tcp,cma: messages over TCP, the
//   receiver reads the sender's buffer with process_vm_readv). The peer is ucx_perftest over
//   UCX_TLS=sm (shared memory FIFO and CMA, no error handling, busy polling).
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "bench/common/bench_util.h"
#include "bench/common/command.h"
#include "bench/common/node_job_processes.h"
#include "compiler/node_split.h"
#include "runtime/plan_builder.h"

namespace loom::bench {
namespace {

constexpr int kRepetitions = 5;
constexpr double kGoalRatio = 0.9;
constexpr int kPerftestTimeoutSeconds = 60;
// The reference runs of ucx_perftest: error handling mode PEER alone (busy polling), and configured
// as Loom's transport is (error handling, the wake-up feature, sleeping while it waits).
constexpr char kErrorHandlingPerftestFlags[] = "-e";
constexpr char kLoomLikePerftestFlags[] = "-e -I -E sleep";

struct Size {
  int64_t bytes;
  std::string label;
  int warmup;
  int measured;
};

const std::vector<Size>& Sizes() {
  static const std::vector<Size> sizes = {
      {int64_t{4} << 20, "4mib", 10, 100},
      {int64_t{64} << 20, "64mib", 2, 16},
  };
  return sizes;
}

// Source on node 0, consumer on node 1; the whole job's plan, before the node split.
plan::Plan TransferPlan(const Size& size) {
  PlanBuilder builder("transfer");
  builder.AddCpuDevices(2);
  plan::Plan& plan = builder.mutable_plan();
  builder.AddRegister("data", {size.bytes / 4}, plan::FLOAT32, 2);
  builder.AddRegister("unread", {1}, plan::FLOAT32, 1);
  builder.AddTask("source", plan::SOURCE, 0, {}, {"data"}, "bench_noop")
      .set_num_pieces(size.warmup + size.measured);
  builder.AddTask("consumer", plan::COMPUTE, 1, {"data"}, {"unread"}, "bench_noop");
  // PlanBuilder's cpu:0 and cpu:1 of node 0 become cpu:0 of nodes 0 and 1.
  for (int node = 0; node < 2; ++node) {
    *plan.mutable_devices(node)->mutable_device() = NodeDevice(node);
    *plan.mutable_tasks(node)->mutable_stream()->mutable_device() = NodeDevice(node);
  }
  return plan;
}

double MebibytesPerSecond(int64_t bytes, int64_t nanoseconds) {
  return static_cast<double>(bytes) / (1 << 20) / (nanoseconds / 1e9);
}

// One Loom run: both nodes in their own processes; the receiving node's bandwidth.
absl::StatusOr<double> RunLoom(const Size& size, const std::string& transports) {
  const std::vector<plan::Plan> plans = compiler::SplitByNode(TransferPlan(size));
  NodeJobProcessOptions options;
  options.ucx.configuration = {{"TLS", transports}};
  options.deadline = absl::Seconds(60);
  absl::StatusOr<std::vector<std::string>> reports = RunNodePlansInProcesses(
      plans, options, [](daemon::NodeJob& job) -> absl::StatusOr<std::string> {
        if (job.node() == 0) return std::string();
        return ReportActs(job, "consumer");
      });
  if (!reports.ok()) return reports.status();
  std::vector<Act> acts = ParseActs((*reports)[1]);
  std::sort(acts.begin(), acts.end(), [](const Act& a, const Act& b) { return a.piece < b.piece; });
  const int total = size.warmup + size.measured;
  if (static_cast<int>(acts.size()) != total) {
    return absl::InternalError(
        absl::StrCat("the consumer acted ", acts.size(), " times, expected ", total));
  }
  const int64_t elapsed =
      acts[total - 1].start_nanoseconds - acts[size.warmup - 1].start_nanoseconds;
  return MebibytesPerSecond(size.bytes * size.measured, elapsed);
}

// One ucx_perftest tag_bw run between two processes on `port`; its average bandwidth in MiB/s.
// `port_taken` is set when the server could not listen there.
absl::StatusOr<double> RunPerftestOnPort(const Size& size, const std::string& transports,
                                         const std::string& extra_flags, int port,
                                         bool* port_taken) {
  const std::string arguments = absl::StrCat("-t tag_bw -s ", size.bytes, " -n ", size.measured,
                                             " -w ", size.warmup, " -p ", port, " ", extra_flags);
  const std::string environment = absl::StrCat("UCX_TLS=", transports, " ");
  absl::StatusOr<BackgroundCommand> server = BackgroundCommand::Start(
      absl::StrCat(environment, "exec timeout ", kPerftestTimeoutSeconds, " ucx_perftest ",
                   arguments),
      absl::StrCat("/tmp/loom_bench_transfer_perftest_server_", getpid(), ".txt"));
  if (!server.ok()) return server.status();
  // The server listens once it is up; the client retries while it is not.
  absl::StatusOr<std::string> client;
  for (int attempt = 0; attempt < 20; ++attempt) {
    usleep(200 * 1000);
    client = RunCommand(absl::StrCat(environment, "timeout ", kPerftestTimeoutSeconds,
                                     " ucx_perftest 127.0.0.1 ", arguments));
    if (client.ok() || client.status().message().find("Connection refused") == std::string::npos) {
      break;
    }
  }
  server->Wait(absl::Seconds(10));
  *port_taken = absl::StrContains(server->Output(), "bind() failed");
  if (!client.ok()) return client.status();
  for (absl::string_view line : absl::StrSplit(*client, '\n')) {
    if (!absl::ConsumePrefix(&line, "Final:")) continue;
    std::vector<absl::string_view> fields = absl::StrSplit(line, ' ', absl::SkipWhitespace());
    double bandwidth = 0;
    // iterations, overhead 50%ile / average / overall (us), bandwidth average / overall (MB/s),
    // message rate average / overall.
    if (fields.size() >= 6 && absl::SimpleAtod(fields[4], &bandwidth)) return bandwidth;
  }
  return absl::InternalError(absl::StrCat("no 'Final:' line from ucx_perftest:\n", *client));
}

// One ucx_perftest tag_bw run between two processes; its average bandwidth in MiB/s. Another port
// when the one tried is taken (a port of an earlier run may still be held).
absl::StatusOr<double> RunPerftest(const Size& size, const std::string& transports,
                                   const std::string& extra_flags) {
  static int next_port = 20000 + static_cast<int>(getpid() % 20000);
  absl::StatusOr<double> bandwidth;
  for (int attempt = 0; attempt < 3; ++attempt) {
    bool port_taken = false;
    bandwidth = RunPerftestOnPort(size, transports, extra_flags, next_port++, &port_taken);
    if (!port_taken) break;
  }
  return bandwidth;
}

// Why a run failed, in one line: UCX's first error line when there is one.
std::string Reason(const absl::Status& status) {
  if (absl::StrContains(status.message(), "exited with status 124")) {
    return absl::StrCat("no result within ", kPerftestTimeoutSeconds, " s");
  }
  for (absl::string_view line : absl::StrSplit(status.message(), '\n')) {
    const size_t error = line.find("ERROR ");
    if (error != absl::string_view::npos) return std::string(line.substr(error + 6));
  }
  std::string text(status.message());
  return text.substr(0, text.find('\n'));
}

int Main() {
  if (!ProgramExists("ucx_perftest")) {
    std::fprintf(stderr,
                 "transfer: the peer ucx_perftest is not installed (Debian package ucx-utils; "
                 "scripts/install-deps installs it)\n");
    return 2;
  }
  std::printf(
      "transfer: a register between two processes, Loom SEND/RECEIVE (NodeJob per node) vs "
      "ucx_perftest tag_bw; UCX_TLS=tcp; %d repetitions; MiB/s\n",
      kRepetitions);
  std::printf("machine at start: %s\n", MachineCheck().c_str());
  struct Medians {
    double loom = 0, perftest = 0, perftest_error_handling = 0, perftest_like_loom = 0;
  };
  // A reference run of ucx_perftest over tcp: its value, or why it failed.
  struct Reference {
    const char* flags;
    std::vector<double> values;
    std::vector<std::string> failures;
    void Run(const Size& size) {
      absl::StatusOr<double> bandwidth = RunPerftest(size, "tcp", flags);
      if (bandwidth.ok()) {
        values.push_back(*bandwidth);
      } else {
        failures.push_back(Reason(bandwidth.status()));
      }
    }
    void Print() const {
      std::printf("  ucx_perftest %-16s %s\n", flags, JoinValues(values, 0).c_str());
      for (const std::string& failure : failures) {
        std::printf("    (a run of ucx_perftest %s failed: %s)\n", flags, failure.c_str());
      }
    }
  };
  std::map<std::string, Medians> medians;
  for (const Size& size : Sizes()) {
    std::vector<double> loom, perftest;
    Reference error_handling{kErrorHandlingPerftestFlags, {}, {}};
    Reference like_loom{kLoomLikePerftestFlags, {}, {}};
    for (int repetition = 0; repetition < kRepetitions; ++repetition) {
      absl::StatusOr<double> peer = RunPerftest(size, "tcp", "");
      ExitIfError(peer.status(), "ucx_perftest over tcp");
      perftest.push_back(*peer);
      error_handling.Run(size);
      like_loom.Run(size);
      absl::StatusOr<double> ours = RunLoom(size, "tcp");
      ExitIfError(ours.status(), "Loom's transfer over tcp");
      loom.push_back(*ours);
    }
    std::printf("%s x %d pieces (after %d warm-up), tcp:\n", size.label.c_str(), size.measured,
                size.warmup);
    std::printf("  loom                          %s\n", JoinValues(loom, 0).c_str());
    std::printf("  ucx_perftest                  %s\n", JoinValues(perftest, 0).c_str());
    error_handling.Print();
    like_loom.Print();
    Medians& result = medians[size.label];
    result = {Median(loom), Median(perftest), Median(error_handling.values),
              Median(like_loom.values)};
    std::printf(
        "  median: loom %.0f  ucx_perftest %.0f (ratio %.3f)  with error handling %.0f "
        "(ratio %.3f)  with Loom's settings %.0f (ratio %.3f)\n",
        result.loom, result.perftest, result.loom / result.perftest, result.perftest_error_handling,
        result.loom / result.perftest_error_handling, result.perftest_like_loom,
        result.loom / result.perftest_like_loom);
    std::fflush(stdout);
  }

  // On one host: Loom's data by same-host copy (UCX_TLS=tcp,cma: messages over TCP, data read
  // with process_vm_readv; transport/same_host.h) against ucx_perftest over UCX's shared memory
  // transports (UCX_TLS=sm: its FIFO for messages, CMA for rendezvous), busy polling as above.
  std::map<std::string, Medians> same_host;
  for (const Size& size : Sizes()) {
    std::vector<double> loom, perftest;
    for (int repetition = 0; repetition < kRepetitions; ++repetition) {
      absl::StatusOr<double> peer = RunPerftest(size, "sm", "");
      ExitIfError(peer.status(), "ucx_perftest over sm");
      perftest.push_back(*peer);
      absl::StatusOr<double> ours = RunLoom(size, "tcp,cma");
      ExitIfError(ours.status(), "Loom's transfer by same-host copy");
      loom.push_back(*ours);
    }
    Medians& result = same_host[size.label];
    result.loom = Median(loom);
    result.perftest = Median(perftest);
    std::printf("%s x %d pieces (after %d warm-up), same host:\n", size.label.c_str(),
                size.measured, size.warmup);
    std::printf("  loom (UCX_TLS=tcp,cma)        %s\n", JoinValues(loom, 0).c_str());
    std::printf("  ucx_perftest (UCX_TLS=sm)     %s\n", JoinValues(perftest, 0).c_str());
    std::printf("  median: loom %.0f  ucx_perftest %.0f (ratio %.3f)\n", result.loom,
                result.perftest, result.loom / result.perftest);
    std::fflush(stdout);
  }
  // UCX's own shared memory with error handling, as Loom's endpoints have it: not offered.
  absl::StatusOr<double> perftest_shared_error_handling = RunPerftest(Sizes()[0], "sm", "-e");
  if (perftest_shared_error_handling.ok()) {
    std::printf("  ucx_perftest -e (UCX_TLS=sm)  %.0f\n", *perftest_shared_error_handling);
  } else {
    std::printf("  ucx_perftest -e (UCX_TLS=sm)  not possible: %s\n",
                Reason(perftest_shared_error_handling.status()).c_str());
  }
  std::printf("machine at end: %s\n", MachineCheck().c_str());

  // The RESULT lines: per path, the size with the lower ratio against plain ucx_perftest.
  auto worst_of = [](std::map<std::string, Medians>& results) {
    std::string worst = Sizes()[0].label;
    for (const Size& size : Sizes()) {
      const Medians& candidate = results[size.label];
      const Medians& current = results[worst];
      if (candidate.loom / candidate.perftest < current.loom / current.perftest) {
        worst = size.label;
      }
    }
    return worst;
  };
  std::printf("GOAL transfer: ratio >= %.1f of ucx_perftest's bandwidth (higher is better)\n",
              kGoalRatio);
  const std::string worst = worst_of(medians);
  PrintResult("transfer", absl::StrCat("loom_mib_per_s_", worst, "_tcp"), medians[worst].loom,
              absl::StrCat("ucx_perftest_mib_per_s_", worst, "_tcp"), medians[worst].perftest);
  const std::string worst_same_host = worst_of(same_host);
  PrintResult("transfer-same-host", absl::StrCat("loom_mib_per_s_", worst_same_host, "_cma"),
              same_host[worst_same_host].loom,
              absl::StrCat("ucx_perftest_mib_per_s_", worst_same_host, "_sm"),
              same_host[worst_same_host].perftest);
  return 0;
}

}  // namespace
}  // namespace loom::bench

int main() { return loom::bench::Main(); }
