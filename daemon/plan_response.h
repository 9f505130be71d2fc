#ifndef LOOM_DAEMON_PLAN_RESPONSE_H_
#define LOOM_DAEMON_PLAN_RESPONSE_H_

// A job's GetPlanResponse, made from its CompiledJob: PlanResponseOf copies the plans for the
// GetPlan call (KeepOnlyNodePlan cuts a response down to one node's plan), and
// SerializedPlanResponse writes the response's bytes straight from the compiled job, compressed or
// not, for what the JobManager keeps in memory or writes to its data directory.

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "compiler/compile_for_devices.h"
#include "proto/loom/v1/job_service.pb.h"

namespace loom::daemon {

// A job's GetPlanResponse: its whole plan and its node plans, copied (for the GetPlan call); or,
// with a `node` (which must be one of the job's), that node's plan alone.
v1::GetPlanResponse PlanResponseOf(const compiler::CompiledJob& compiled,
                                   std::optional<int> node = std::nullopt);

// Keeps only node `node`'s plan of a whole response (which must have it), as PlanResponseOf does.
void KeepOnlyNodePlan(int node, v1::GetPlanResponse* response);

// The same response in the wire format, serialized straight from the compiled job, without the
// copy (why: docs/ARCHITECTURE.md, "The cluster", *What the coordinator holds of its jobs*), and
// zlib-compressed as CompressedMessage does when `compressed`. RESOURCE_EXHAUSTED when a plan is
// over protobuf's 2 GiB.
absl::StatusOr<std::string> SerializedPlanResponse(const compiler::CompiledJob& compiled,
                                                   bool compressed);

}  // namespace loom::daemon

#endif  // LOOM_DAEMON_PLAN_RESPONSE_H_
