#include "tests/runtime/node_runtimes.h"

#include <utility>

#include "actors/actor_factory.h"
#include "tests/runtime/runtime_test_util.h"

namespace loom::testing {

NodeRuntimes::NodeRuntimes(const std::vector<plan::Plan>& plans, const JobOptions& options,
                           const KernelRegistry* kernels)
    : network_(static_cast<int>(plans.size())) {
  if (kernels == nullptr) kernels = &TestRegistry();
  for (int node = 0; node < static_cast<int>(plans.size()); ++node) {
    JobOptions node_options = options;
    node_options.network = network_.node(node);
    absl::StatusOr<std::unique_ptr<JobRuntime>> job =
        JobRuntime::Create(plans[node], kernels, MakeActorFactory(), std::move(node_options));
    created_.Update(job.status());
    if (!job.ok()) return;
    jobs_.push_back(std::move(*job));
    network_.SetMessageReceiver(node, [job = jobs_.back().get()](const ActorMessage& message) {
      job->DeliverFromNetwork(message);
    });
  }
  status_ = created_;
}

absl::Status NodeRuntimes::Start() {
  for (auto& job : jobs_) status_.Update(job->Start());
  return status_;
}

absl::Status NodeRuntimes::Wait() {
  for (auto& job : jobs_) status_.Update(job->Wait());
  return status_;
}

}  // namespace loom::testing
