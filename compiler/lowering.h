#ifndef LOOM_COMPILER_LOWERING_H_
#define LOOM_COMPILER_LOWERING_H_

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
absl::StatusOr<plan::Plan> LowerToPlan(const LogicalGraph& graph, const DeviceSet& devices);

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_LOWERING_H_
