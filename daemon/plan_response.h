#ifndef LOOM_DAEMON_PLAN_RESPONSE_H_
#define LOOM_DAEMON_PLAN_RESPONSE_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "client/loomctl/compile_command.h"
#include "proto/loom/v1/job_service.pb.h"

namespace loom::daemon {

// A job's GetPlanResponse: its whole plan and its node plans, copied (for the GetPlan call); or,
// with a `node` (which must be one of the job's), that node's plan alone.
v1::GetPlanResponse PlanResponseOf(const loomctl::CompiledJob& compiled,
                                   std::optional<int> node = std::nullopt);

// Keeps only node `node`'s plan of a whole response (which must have it), as PlanResponseOf does.
void KeepOnlyNodePlan(int node, v1::GetPlanResponse* response);

// The same response in the wire format, serialized straight from the compiled job, without the
// copy (which takes as long as compiling: 10 s and 3 GB for the 1.5 million tasks of
// bench/compile_scale), and zlib-compressed as CompressedMessage does when `compressed`.
// RESOURCE_EXHAUSTED when a plan is over protobuf's 2 GiB.
absl::StatusOr<std::string> SerializedPlanResponse(const loomctl::CompiledJob& compiled,
                                                   bool compressed);

}  // namespace loom::daemon

#endif  // LOOM_DAEMON_PLAN_RESPONSE_H_
