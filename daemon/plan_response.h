#ifndef LOOM_DAEMON_PLAN_RESPONSE_H_
#define LOOM_DAEMON_PLAN_RESPONSE_H_

#include <string>

#include "absl/status/statusor.h"
#include "client/loomctl/compile_command.h"
#include "proto/loom/v1/job_service.pb.h"

namespace loom::daemon {

// A job's GetPlanResponse: its whole plan and its node plans, copied (for the GetPlan call).
v1::GetPlanResponse PlanResponseOf(const loomctl::CompiledJob& compiled);

// The same response in the wire format, serialized straight from the compiled job, without the
// copy (which takes as long as compiling: 10 s and 3 GB for the 1.5 million tasks of
// bench/compile_scale), and zlib-compressed as CompressedMessage does when `compressed`.
// RESOURCE_EXHAUSTED when a plan is over protobuf's 2 GiB.
absl::StatusOr<std::string> SerializedPlanResponse(const loomctl::CompiledJob& compiled,
                                                   bool compressed);

}  // namespace loom::daemon

#endif  // LOOM_DAEMON_PLAN_RESPONSE_H_
