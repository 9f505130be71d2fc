#ifndef LOOM_TESTS_CLUSTER_MULTI_NODE_RUN_H_
#define LOOM_TESTS_CLUSTER_MULTI_NODE_RUN_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "kernels/kernel_registry.h"
#include "proto/job.pb.h"
#include "proto/plan.pb.h"
#include "runtime/job_options.h"
#include "runtime/job_runtime.h"

namespace loom::testing {

// Every fetched logical tensor of a run, one per step (piece).
using Fetched = std::map<std::string, std::vector<HostTensor>>;

// Admits `job` (as loomd does: the loss is fetched) on `devices_per_node` CPU devices on each of
// `nodes` nodes and returns the whole plan and the per-node plans.
absl::StatusOr<std::vector<plan::Plan>> CompileForNodes(const job::Job& job, int nodes,
                                                        int devices_per_node,
                                                        plan::Plan* whole_plan);

struct NodeRunOptions {
  // The kernels every node runs with; the CPU kernels when null.
  const KernelRegistry* kernels = nullptr;
  // Called with each node's plan and options before its NodeJob is made (e.g. SetUpDevices for a
  // plan with GPUs); none when empty.
  std::function<absl::Status(const plan::Plan& node_plan, JobOptions* options)> set_up;
  // Called with each node's runtime once every node finished well (e.g. to read its devices'
  // memory); none when empty.
  std::function<void(const JobRuntime& runtime)> inspect;
};

// Runs one process-local NodeJob per node plan (each with its own UCX network, connected to the
// others), starts them together and assembles the fetches of `whole_plan` from every node's sinks.
absl::StatusOr<Fetched> RunNodePlans(const std::vector<plan::Plan>& node_plans,
                                     const plan::Plan& whole_plan,
                                     const NodeRunOptions& run_options = {});

// The same job on one node (the reference).
absl::StatusOr<Fetched> RunOnOneNode(const job::Job& job, int devices);

}  // namespace loom::testing

#endif  // LOOM_TESTS_CLUSTER_MULTI_NODE_RUN_H_
