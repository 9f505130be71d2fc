#include "daemon/job_execution.h"

#include <utility>

#include "actors/actor_factory.h"

namespace loom::daemon {

absl::Status ExecutePlan(const plan::Plan& plan, const KernelRegistry& kernels, JobOptions options,
                         const LaunchedCallback& on_launched) {
  absl::StatusOr<std::unique_ptr<JobRuntime>> created =
      JobRuntime::Create(plan, &kernels, MakeActorFactory(), std::move(options));
  if (!created.ok()) return created.status();
  std::shared_ptr<JobRuntime> runtime = std::move(*created);
  if (!on_launched(runtime)) {
    return absl::CancelledError("the job was cancelled before it started");
  }
  if (absl::Status status = runtime->Start(); !status.ok()) return status;
  return runtime->Wait();
}

}  // namespace loom::daemon
