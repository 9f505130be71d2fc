#ifndef LOOM_BENCH_COMMON_NODE_JOB_PROCESSES_H_
#define LOOM_BENCH_COMMON_NODE_JOB_PROCESSES_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/node_job.h"
#include "proto/plan.pb.h"
#include "runtime/job_options.h"
#include "transport/ucx_context.h"

namespace loom::bench {

// Runs in the child after its job ended successfully: what to send back to the parent (for
// example the acts of one task, as text).
using NodeJobReport = std::function<absl::StatusOr<std::string>(daemon::NodeJob& job)>;

// CPU device 0 of node `node`: the device of a one-device-per-node plan (each node a process).
plan::Device NodeDevice(int node);

struct NodeJobProcessOptions {
  JobOptions job;
  transport::UcxContextOptions ucx;
  // A child that has not finished by then is killed (SIGALRM) and the run fails.
  absl::Duration deadline = absl::Seconds(120);
  // OpenBLAS threads per GEMM in each child (loomd's --blas-threads, default 1); this process's
  // count becomes the same (RunNodePlansInProcesses).
  int blas_threads = 1;
  // By position in the plans: the network namespace (a name of `ip netns`, under /var/run/netns)
  // the node's process enters before it makes its network, so that nodes run as hosts of their
  // own (tests/cluster/virtual_hosts.h). Empty (or shorter than the plans): this process's.
  std::vector<std::string> network_namespaces;
  // By position in the plans: the CPU the node's process is bound to before it starts its
  // threads (as taskset, systemd's CPUAffinity= or Kubernetes' static CPU manager would bind a
  // loomd). Empty (or shorter than the plans, or negative): not bound.
  std::vector<int> cpus;
};

// Runs every node plan in a process of its own, forked from this one, the way loomd's nodes run
// them: each child builds a daemon::NodeJob (its JobRuntime and its UCX TransportNetwork, with
// the CPU kernels and "bench_noop"), sends its network address to this process, which hands
// every child every address; the children connect, and once all are connected (the launch
// barrier) they start together. After its job ended, each child sends `report(job)` back and
// keeps its network open until every node ended (the end barrier), as loomd does.
//
// Returns the reports by position in `plans`, or the first error (naming the node). This process
// must not have created a UCX context or started threads (it forks).
absl::StatusOr<std::vector<std::string>> RunNodePlansInProcesses(
    const std::vector<plan::Plan>& plans, const NodeJobProcessOptions& options,
    const NodeJobReport& report);

// The acts of task `task_name` in the job's event record, one line per act: "piece start_ns
// end_ns" (nanoseconds since the job started on that node). A NodeJobReport.
absl::StatusOr<std::string> ReportActs(daemon::NodeJob& job, const std::string& task_name);

struct Act {
  int64_t piece = 0;
  int64_t start_nanoseconds = 0;
  int64_t end_nanoseconds = 0;
};
// Parses ReportActs' text.
std::vector<Act> ParseActs(const std::string& text);

}  // namespace loom::bench

#endif  // LOOM_BENCH_COMMON_NODE_JOB_PROCESSES_H_
