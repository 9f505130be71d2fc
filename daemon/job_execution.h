#ifndef LOOM_DAEMON_JOB_EXECUTION_H_
#define LOOM_DAEMON_JOB_EXECUTION_H_

#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "kernels/kernel_registry.h"
#include "proto/plan.pb.h"
#include "runtime/job_options.h"
#include "runtime/job_runtime.h"

namespace loom::daemon {

// Called once the job's actors are built, before any starts, with the runtime (to abort it from
// other threads). Returns false to not start the job (it was cancelled meanwhile).
using LaunchedCallback = std::function<bool(std::shared_ptr<JobRuntime>)>;

// Runs one node's plan in this process: builds the runtime (JobRuntime::Create, as RunPlanLocally
// does, but keeping the runtime reachable so that it can be aborted), calls `on_launched`, starts
// it and waits for its end. Returns the job's status: the first failure (a kernel error, a stall,
// an abort's reason), or CANCELLED when `on_launched` refused to start it.
absl::Status ExecutePlan(const plan::Plan& plan, const KernelRegistry& kernels, JobOptions options,
                         const LaunchedCallback& on_launched);

}  // namespace loom::daemon

#endif  // LOOM_DAEMON_JOB_EXECUTION_H_
