#include "tests/runtime/runtime_test_util.h"

#include "glog/logging.h"
#include "kernels/cpu/cpu_kernels.h"
#include "tests/runtime/test_kernels.h"

namespace loom::testing {

const KernelRegistry& TestRegistry() {
  static const KernelRegistry* registry = [] {
    auto* result = new KernelRegistry();
    absl::Status status = RegisterCpuKernels(result);
    CHECK(status.ok()) << status;
    RegisterTestKernels(result);
    return result;
  }();
  return *registry;
}

absl::StatusOr<std::unique_ptr<JobRuntime>> MakeJob(const plan::Plan& plan, JobOptions options) {
  return JobRuntime::Create(plan, &TestRegistry(), MakeActorFactory(), std::move(options));
}

std::vector<ActEvent> EventsOf(const JobRuntime& job, const std::string& task_name) {
  const Actor* actor = job.FindActor(task_name);
  CHECK(actor != nullptr) << task_name;
  std::vector<ActEvent> result;
  for (const ActEvent& event : job.events()) {
    if (event.task_index == actor->id().task_index()) result.push_back(event);
  }
  return result;
}

std::vector<float> SinkValues(const JobRuntime& job, const std::string& sink_name, int input) {
  auto pieces = FetchedPieces(job, sink_name);
  CHECK(pieces.ok()) << pieces.status();
  std::vector<float> values;
  if (static_cast<int>((*pieces)->size()) <= input) return values;
  for (const HostTensor& tensor : (**pieces)[input]) values.push_back(tensor.Values<float>()[0]);
  return values;
}

}  // namespace loom::testing
