#ifndef LOOM_COMPILER_LOWERING_H_
#define LOOM_COMPILER_LOWERING_H_

// LowerToPlan, passes 5 and 7: the logical graph, after SBP inference, lowered to the whole job's
// physical plan of tasks, registers and communicators, with the boxing between ops. Compile
// (compiler/compiler.h) calls it; the lowering's state and parts are GraphLowering's
// (compiler/graph_lowering.h), internal to the compiler.

#include "absl/status/statusor.h"
#include "compiler/logical_graph.h"
#include "proto/plan.pb.h"

namespace loom::compiler {

// Passes 5 and 7: inserts boxing and lowers the graph (after SBP inference) to one physical
// plan: per op and rank a task on the rank's compute stream, per variable a VARIABLE task (its
// value initialised once and kept across steps), per input a source,
// per fetch a sink on every rank; boxing as local slice / pad / zero-fill tasks, collectives on a
// communication stream per communicator (with one global order per communicator), and copies at
// placement boundaries. Every register gets the job's slot count.
// With `max_tasks` > 0: RESOURCE_EXHAUSTED, naming the op (or variable, input, fetch) whose tasks
// took the plan beyond that many, as soon as they do.
absl::StatusOr<plan::Plan> LowerToPlan(const LogicalGraph& graph, const DeviceSet& devices,
                                       int64_t max_tasks = 0);

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_LOWERING_H_
