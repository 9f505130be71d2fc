#ifndef LOOM_DAEMON_JOB_ADMISSION_H_
#define LOOM_DAEMON_JOB_ADMISSION_H_

// Admitting a submitted job on the coordinator: the checks that it places nothing outside the
// cluster's devices (CheckJobFitsCluster) and that its shapes fit in 64 bits (CheckJobShapes), and
// AdmitJob, which runs them, compiles the job under each device's memory budget and validates the
// plan. JobManager::Submit admits every job with AdmitJob before it queues it.

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compiler/compile_for_devices.h"
#include "compiler/logical_graph.h"
#include "proto/job.pb.h"

namespace loom::daemon {

// RESOURCE_EXHAUSTED when the job places anything (its default placement, a stage, a variable,
// an input or an op) on a device the cluster lacks: the message says how many devices the job
// needs, what the cluster has, and names the first thing placed outside it. Device names that do
// not parse are left to the compiler (INVALID_ARGUMENT naming the op).
absl::Status CheckJobFitsCluster(const job::Job& job, const compiler::DeviceSet& devices);

// INVALID_ARGUMENT naming the variable or input whose shape has more elements than fit in 64 bits.
absl::Status CheckJobShapes(const job::Job& job);

// Admits a submitted job for the cluster's `devices`: checks its shapes, checks that it fits the
// cluster, fetches the loss of a training job, and compiles it with the standard ops; each device
// gets the tighter of the job's memory budget and its own (`devices`' budgets: each node's
// --memory-budget-per-device). Errors: the compiler's (INVALID_ARGUMENT naming the op;
// RESOURCE_EXHAUSTED for a device over its memory budget, or a plan of more than `options`'
// max_tasks), CheckJobShapes' and CheckJobFitsCluster's; INVALID_ARGUMENT for a job with nothing
// to run; INTERNAL for a plan the runtime would refuse (runtime/plan_validation.h).
absl::StatusOr<std::unique_ptr<compiler::CompiledJob>> AdmitJob(
    job::Job job, const compiler::DeviceSet& devices, const compiler::CompileOptions& options = {});

}  // namespace loom::daemon

#endif  // LOOM_DAEMON_JOB_ADMISSION_H_
