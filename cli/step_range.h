#ifndef LOOM_CLI_STEP_RANGE_H_
#define LOOM_CLI_STEP_RANGE_H_

// Ranges of steps on the command line ("K" or "K-L", counted from 1): ParseStepRange, the
// --trace-steps flag of `loomctl run`, `run-plan` and `submit` (TraceStepsFlag), and the check
// that a range lies within the steps a command runs (CheckTraceStepsWithin).

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cli/arguments.h"
#include "proto/loom/v1/job_service.pb.h"

namespace loom::cli {

// Reads a range of steps as `--trace-steps` takes it: "K" (step K alone) or "K-L" (steps K to L,
// both included), counted from 1. INVALID_ARGUMENT naming the text when it is not one, or when
// K < 1 or L < K. Whether the job has those steps is checked where they are known (the daemon,
// run, run-plan).
absl::StatusOr<v1::StepRange> ParseStepRange(absl::string_view text);

// The --trace-steps flag of `command` (run, run-plan, submit): unset when absent; a usage error
// naming the flag when it is given without --trace (`traced` false) or its value is not a range.
absl::StatusOr<std::optional<v1::StepRange>> TraceStepsFlag(absl::string_view command,
                                                            const ParsedArguments& arguments,
                                                            bool traced);

// OK when --trace-steps' `range` lies within steps `first` to `last` (1-based, both included) of
// what `command` runs (`what`: "the run", "the plan"); else a usage error saying both ranges.
absl::Status CheckTraceStepsWithin(absl::string_view command, const v1::StepRange& range,
                                   int64_t first, int64_t last, absl::string_view what);

}  // namespace loom::cli

#endif  // LOOM_CLI_STEP_RANGE_H_
