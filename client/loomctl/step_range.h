#ifndef LOOM_CLIENT_LOOMCTL_STEP_RANGE_H_
#define LOOM_CLIENT_LOOMCTL_STEP_RANGE_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/loom/v1/job_service.pb.h"

namespace loom::loomctl {

// Reads a range of steps as `--trace-steps` takes it: "K" (step K alone) or "K-L" (steps K to L,
// both included), counted from 1. INVALID_ARGUMENT naming the text when it is not one, or when
// K < 1 or L < K. Whether the job has those steps is the daemon's check.
absl::StatusOr<v1::StepRange> ParseStepRange(absl::string_view text);

}  // namespace loom::loomctl

#endif  // LOOM_CLIENT_LOOMCTL_STEP_RANGE_H_
