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
// ucx_perftest: `ucx_perftest -t tag_bw -s SIZE -n N -w W` (a server and a client process), the
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
// Paths, and the two RESULT lines:
// - `transfer`: over TCP between two hosts. Each process runs on a virtual host of its own (a
//   network namespace with a veth into a bridge, tests/cluster/virtual_hosts.h; needs root),
//   UCX_TLS=tcp and UCX_NET_DEVICES=eth1 (its data network) for both systems. This is the path
//   Loom's data take over TCP: between processes of one host they go by same-host copy.
// - For reference, TCP on one host over loopback (and the `transfer` RESULT when no virtual hosts
//   can be made here, which the output says). There plain ucx_perftest's rendezvous stripes every
//   message over two TCP connections, its rma_bw lanes on lo and on eth0, which are both loopback
//   on one host (`UCX_TLS=tcp ucx_info -e -u t -D net`); two hosts with one network each have one
//   (between the virtual hosts its run on eth1 alone gives the same). Its run on lo alone is
//   printed beside it. Loom's endpoints (error handling) get one lane either way.
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
#include <functional>
#include <map>
#include <memory>
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
#include "testing/plan_builder.h"
#include "tests/cluster/virtual_hosts.h"

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

// Where a run's two processes are: both on this host, or each on a virtual host of its own.
struct Placement {
  // Put before the ucx_perftest server's and client's commands ("ip netns exec NAME "); empty:
  // in this process's namespace.
  std::string server_prefix, client_prefix;
  std::string server_address = "127.0.0.1";
  // UCX_NET_DEVICES of both sides (ucx_perftest's environment, Loom's UCX configuration);
  // empty: UCX's default (every device).
  std::string net_devices;
  // The namespaces of Loom's two nodes (NodeJobProcessOptions::network_namespaces).
  std::vector<std::string> namespaces;
};

// One Loom run: both nodes in their own processes; the receiving node's bandwidth.
absl::StatusOr<double> RunLoom(const Size& size, const std::string& transports,
                               const Placement& placement) {
  const std::vector<plan::Plan> plans = compiler::SplitByNode(TransferPlan(size));
  NodeJobProcessOptions options;
  options.ucx.configuration = {{"TLS", transports}};
  if (!placement.net_devices.empty()) {
    options.ucx.configuration.emplace_back("NET_DEVICES", placement.net_devices);
  }
  options.network_namespaces = placement.namespaces;
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
                                         const std::string& extra_flags, const Placement& placement,
                                         int port, bool* port_taken) {
  const std::string arguments = absl::StrCat("-t tag_bw -s ", size.bytes, " -n ", size.measured,
                                             " -w ", size.warmup, " -p ", port, " ", extra_flags);
  std::string environment = absl::StrCat("UCX_TLS=", transports, " ");
  if (!placement.net_devices.empty()) {
    absl::StrAppend(&environment, "UCX_NET_DEVICES=", placement.net_devices, " ");
  }
  absl::StatusOr<BackgroundCommand> server = BackgroundCommand::Start(
      absl::StrCat(environment, "exec ", placement.server_prefix, "timeout ",
                   kPerftestTimeoutSeconds, " ucx_perftest ", arguments),
      absl::StrCat("/tmp/loom_bench_transfer_perftest_server_", getpid(), ".txt"));
  if (!server.ok()) return server.status();
  // The server listens once it is up; the client retries while it is not.
  absl::StatusOr<std::string> client;
  for (int attempt = 0; attempt < 20; ++attempt) {
    usleep(200 * 1000);
    client = RunCommand(absl::StrCat(environment, placement.client_prefix, "timeout ",
                                     kPerftestTimeoutSeconds, " ucx_perftest ",
                                     placement.server_address, " ", arguments));
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
                                   const std::string& extra_flags, const Placement& placement) {
  static int next_port = 20000 + static_cast<int>(getpid() % 20000);
  absl::StatusOr<double> bandwidth;
  for (int attempt = 0; attempt < 3; ++attempt) {
    bool port_taken = false;
    bandwidth =
        RunPerftestOnPort(size, transports, extra_flags, placement, next_port++, &port_taken);
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

// A system measured in every repetition of every size.
struct Row {
  std::string name;
  std::function<absl::StatusOr<double>(const Size&)> run;
  // Loom's row and the peer's: a failed run ends the benchmark. A reference row prints its
  // failures instead.
  bool required = false;
  std::vector<double> values = {};
  std::vector<std::string> failures = {};
};

// Loom's medians and the peer's (rows 0 and 1 of a table), by size label.
struct Medians {
  double loom = 0, perftest = 0;
};

// Runs `rows` interleaved, kRepetitions times per size, and prints a table per size: each row's
// values, then the medians with Loom's ratio to every other row's. The error of a required row's
// failed run ends it.
absl::StatusOr<std::map<std::string, Medians>> Measure(const std::string& path,
                                                       std::vector<Row> rows) {
  std::map<std::string, Medians> medians;
  for (const Size& size : Sizes()) {
    for (Row& row : rows) {
      row.values.clear();
      row.failures.clear();
    }
    for (int repetition = 0; repetition < kRepetitions; ++repetition) {
      for (Row& row : rows) {
        absl::StatusOr<double> bandwidth = row.run(size);
        if (row.required && !bandwidth.ok()) {
          return absl::Status(
              bandwidth.status().code(),
              absl::StrCat(row.name, ", ", path, ": ", bandwidth.status().message()));
        }
        if (bandwidth.ok()) {
          row.values.push_back(*bandwidth);
        } else {
          row.failures.push_back(Reason(bandwidth.status()));
        }
      }
    }
    std::printf("%s x %d pieces (after %d warm-up), %s:\n", size.label.c_str(), size.measured,
                size.warmup, path.c_str());
    for (const Row& row : rows) {
      std::printf("  %-40s %s\n", row.name.c_str(), JoinValues(row.values, 0).c_str());
      for (const std::string& failure : row.failures) {
        std::printf("    (a run of %s failed: %s)\n", row.name.c_str(), failure.c_str());
      }
    }
    const double loom = Median(rows[0].values);
    std::printf("  median: loom %.0f", loom);
    for (size_t i = 1; i < rows.size(); ++i) {
      if (rows[i].values.empty()) continue;
      const double median = Median(rows[i].values);
      std::printf("  %s %.0f (ratio %.3f)", rows[i].name.c_str(), median, loom / median);
    }
    std::printf("\n");
    std::fflush(stdout);
    medians[size.label] = {loom, Median(rows[1].values)};
  }
  return medians;
}

// A reference run of ucx_perftest in a TCP table.
struct Reference {
  std::string name;
  std::string flags;
  Placement placement;
};

// ucx_perftest with `flags`, named by them.
Reference WithFlags(const std::string& flags, const Placement& placement) {
  return {absl::StrCat("ucx_perftest ", flags), flags, placement};
}

// The rows of a TCP table: Loom, the peer (plain ucx_perftest), then `references`.
std::vector<Row> TcpRows(const Placement& placement, const std::vector<Reference>& references) {
  std::vector<Row> rows = {
      {"loom", [placement](const Size& size) { return RunLoom(size, "tcp", placement); }, true},
      {"ucx_perftest",
       [placement](const Size& size) { return RunPerftest(size, "tcp", "", placement); }, true}};
  for (const Reference& reference : references) {
    rows.push_back({reference.name, [reference](const Size& size) {
                      return RunPerftest(size, "tcp", reference.flags, reference.placement);
                    }});
  }
  return rows;
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
      "ucx_perftest tag_bw; %d repetitions; MiB/s\n",
      kRepetitions);
  std::printf("machine at start: %s\n", MachineCheck().c_str());

  // Between hosts: each process on a virtual host of its own (a network namespace, with a veth
  // into a bridge: tests/cluster/virtual_hosts.h), UCX_TLS=tcp on the data network's device.
  // This is the path Loom's data take over TCP: between the processes of one host they go by
  // same-host copy (below).
  absl::StatusOr<std::unique_ptr<testing::VirtualHosts>> hosts = testing::VirtualHosts::Create(2);
  std::map<std::string, Medians> between_hosts;
  if (hosts.ok()) {
    Placement placement;
    placement.namespaces = {(*hosts)->Namespace(0), (*hosts)->Namespace(1)};
    placement.server_prefix = absl::StrCat("ip netns exec ", placement.namespaces[0], " ");
    placement.client_prefix = absl::StrCat("ip netns exec ", placement.namespaces[1], " ");
    placement.server_address = testing::VirtualHosts::DataAddress(0);
    placement.net_devices = testing::VirtualHosts::kDataDevice;
    absl::StatusOr<std::map<std::string, Medians>> measured =
        Measure("tcp between two hosts (network namespaces, UCX_NET_DEVICES=eth1)",
                TcpRows(placement, {WithFlags(kErrorHandlingPerftestFlags, placement),
                                    WithFlags(kLoomLikePerftestFlags, placement)}));
    hosts->reset();  // the namespaces go, whatever the outcome
    ExitIfError(measured.status(), "between two hosts");
    between_hosts = *std::move(measured);
  } else {
    std::printf("tcp between two hosts: not measured: %s\n",
                std::string(hosts.status().message()).c_str());
  }

  // On one host over TCP loopback, for reference: here plain ucx_perftest's rendezvous stripes
  // each message over two TCP connections (rma_bw lanes on lo and on eth0, both loopback on one
  // host), which two hosts with one network each do not have; its run on lo alone is the
  // single-connection figure. Loom's endpoints (error handling mode PEER) have one lane.
  Placement loopback;
  Placement loopback_lo_only;
  loopback_lo_only.net_devices = "lo";
  absl::StatusOr<std::map<std::string, Medians>> one_host =
      Measure("tcp on one host (loopback)",
              TcpRows(loopback, {{"ucx_perftest on lo only (one connection)", "", loopback_lo_only},
                                 WithFlags(kErrorHandlingPerftestFlags, loopback)}));
  ExitIfError(one_host.status(), "on one host");

  // On one host: Loom's data by same-host copy (UCX_TLS=tcp,cma: messages over TCP, data read
  // with process_vm_readv; transport/same_host.h) against ucx_perftest over UCX's shared memory
  // transports (UCX_TLS=sm: its FIFO for messages, CMA for rendezvous), busy polling as above.
  absl::StatusOr<std::map<std::string, Medians>> same_host = Measure(
      "same host",
      {{"loom (UCX_TLS=tcp,cma)",
        [loopback](const Size& size) { return RunLoom(size, "tcp,cma", loopback); }, true},
       {"ucx_perftest (UCX_TLS=sm)",
        [loopback](const Size& size) { return RunPerftest(size, "sm", "", loopback); }, true}});
  ExitIfError(same_host.status(), "on one host");
  // UCX's own shared memory with error handling, as Loom's endpoints have it: not offered.
  absl::StatusOr<double> perftest_shared_error_handling =
      RunPerftest(Sizes()[0], "sm", "-e", loopback);
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
  std::map<std::string, Medians>& tcp = hosts.ok() ? between_hosts : *one_host;
  if (!hosts.ok()) {
    std::printf(
        "NOTE the transfer RESULT is of one host's loopback (no virtual hosts here), where "
        "ucx_perftest stripes over two connections\n");
  }
  const std::string worst = worst_of(tcp);
  PrintResult("transfer", absl::StrCat("loom_mib_per_s_", worst, "_tcp"), tcp[worst].loom,
              absl::StrCat("ucx_perftest_mib_per_s_", worst, "_tcp"), tcp[worst].perftest);
  const std::string worst_same_host = worst_of(*same_host);
  PrintResult("transfer-same-host", absl::StrCat("loom_mib_per_s_", worst_same_host, "_cma"),
              (*same_host)[worst_same_host].loom,
              absl::StrCat("ucx_perftest_mib_per_s_", worst_same_host, "_sm"),
              (*same_host)[worst_same_host].perftest);
  return 0;
}

}  // namespace
}  // namespace loom::bench

int main() { return loom::bench::Main(); }
