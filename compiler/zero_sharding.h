#ifndef LOOM_COMPILER_ZERO_SHARDING_H_
#define LOOM_COMPILER_ZERO_SHARDING_H_

// ZeRO as SBP (Job.zero_stage): ShardOverDataParallel splits a training job's trained variables
// over its data-parallel axes in the logical graph, after SBP inference (so that every op keeps
// the signature it has with the variables replicated: the same math), and boxing gives the rest:
// the values' all-gather for their consumers and the gradients' reduce-scatter to the shards.
// docs/ARCHITECTURE.md, "ZeRO is an SBP choice", has the argument.

#include "absl/status/status.h"
#include "compiler/logical_graph.h"
#include "proto/job.pb.h"

namespace loom::compiler {

// With `job.zero_stage()` 1 to 3, on a graph whose SBPs are inferred: every variable of `graph`
// that the optimizer updates and that is broadcast on a data-parallel axis of its placement (an
// axis on which every input of the job splits its batch, axis 0) is split there instead, along
// its first tensor axis that the axis's extent divides and no other axis splits; a variable with
// no such tensor axis stays broadcast. Stage 3 also marks the split variables gathered per use
// (LogicalNode.gathered_per_use), and the once-per-step forward ops computed from them alone. A job
// without data parallelism has nothing to split. INVALID_ARGUMENT for a stage outside 0-3 or a job
// that trains nothing.
absl::Status ShardOverDataParallel(const job::Job& job, LogicalGraph* graph);

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_ZERO_SHARDING_H_
