#ifndef LOOM_COMPILER_ACT_ORDER_H_
#define LOOM_COMPILER_ACT_ORDER_H_

// Orders the compiler writes into a training plan (Task.ordering_inputs) so that the
// memory-sharing proof (compiler/register_lifetimes.h) can use them, on every CPU device that
// trains variables (pipelines with micro-batches aside): per stream, a chain of the COMPUTE tasks
// that wait for nothing but their stream's work and what the step starts from, in the job's op
// order (micro-batch n + 1's after n's); a step barrier ("step-barrier@<device>") after the
// device's updates that the next step's first acts wait for; one slot for registers whose second
// the barrier makes useless. Why, and the costs: docs/ARCHITECTURE.md, "orders for memory".

#include "proto/job.pb.h"
#include "proto/plan.pb.h"

namespace loom::compiler {

// Adds the chains and barriers to the whole-job plan of `job` (the job as lowered, after autodiff:
// its op order is the chains' preference), with pieces per step set (SetPiecesPerStep).
void OrderActsForMemory(const job::Job& job, plan::Plan& plan);

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_ACT_ORDER_H_
