#ifndef LOOM_COMPILER_PIPELINE_ROUNDS_H_
#define LOOM_COMPILER_PIPELINE_ROUNDS_H_

// Pipelines whose groups of devices each hold several stages: job.INTERLEAVED (stage k on group
// k mod p) and job.ZERO_BUBBLE_V (V-shaped: stage k < p on group k, stage k >= p on group
// 2p - 1 - k). StagesPerGroup checks that the stage placements have the schedule's shape.

#include <vector>

#include "absl/status/statusor.h"
#include "compiler/placement.h"
#include "proto/job.pb.h"

namespace loom::compiler {

// v, the stages on each group of devices (num_stages = p v, stage k in round k / p): checked
// against `schedule`'s shape for INTERLEAVED (v >= 2) and ZERO_BUBBLE_V (v = 2), 1 for the
// schedules with a stage per group. INVALID_ARGUMENT naming the first stage out of shape.
absl::StatusOr<int> StagesPerGroup(job::PipelineSchedule schedule,
                                   const std::vector<Placement>& placements, int num_stages);

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_PIPELINE_ROUNDS_H_
