#ifndef LOOM_TESTS_RUNTIME_NODE_RUNTIMES_H_
#define LOOM_TESTS_RUNTIME_NODE_RUNTIMES_H_

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "kernels/kernel_registry.h"
#include "runtime/job_options.h"
#include "runtime/job_runtime.h"
#include "tests/runtime/in_memory_network.h"

namespace loom::testing {

// The runtimes of a job's node plans (index = node) in one process, over one in-memory network,
// which stops first (pending receives and late credits then reach runtimes that still exist).
// Every runtime gets `options` with its node's network, and `kernels` (TestRegistry() when null).
class NodeRuntimes {
 public:
  explicit NodeRuntimes(const std::vector<plan::Plan>& plans, const JobOptions& options = {},
                        const KernelRegistry* kernels = nullptr);

  // Why a runtime could not be built (OK when all were).
  const absl::Status& created() const { return created_; }
  InMemoryNetwork& network() { return network_; }
  const JobRuntime& job(int node) const { return *jobs_[node]; }

  // Starts every runtime; the first error.
  absl::Status Start();
  // Waits for every runtime; the first error, the creation's included.
  absl::Status Wait();
  absl::Status WaitFor(int node) { return jobs_[node]->Wait(); }

 private:
  std::vector<std::unique_ptr<JobRuntime>> jobs_;
  InMemoryNetwork network_;  // destroyed (stopped) before the runtimes
  absl::Status created_;
  absl::Status status_;
};

}  // namespace loom::testing

#endif  // LOOM_TESTS_RUNTIME_NODE_RUNTIMES_H_
