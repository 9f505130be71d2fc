#ifndef LOOM_COMPILER_SOURCE_KERNELS_H_
#define LOOM_COMPILER_SOURCE_KERNELS_H_

// The kernels of a plan's SOURCE and VARIABLE tasks, per rank: an input's batch for a step (drawn
// at random or read from a token file), a variable's initial value (from its initializer or the
// job's initial-state checkpoint), the optimizer that updates a variable from its gradient, and
// the checkpoint reads that initialise a variable's optimizer states. Pure functions of the
// logical graph: the lowering (compiler/lowering.cc) adds what they return to the plan.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/boxing.h"
#include "compiler/logical_graph.h"
#include "proto/job.pb.h"
#include "proto/plan.pb.h"

namespace loom::compiler {

// The kernel writing a variable's initial value on one rank: from the job's initial state when
// it has one, else from the variable's initializer.
plan::KernelConf VariableInitializerKernel(const LogicalGraph& graph, const LogicalNode& node,
                                           const std::string& checkpoint_name,
                                           const std::vector<int64_t>& logical,
                                           const LocalWindow& window);

// Reads this rank's window of the tensor `name` of the job's initial-state checkpoint.
plan::KernelConf CheckpointSliceKernel(const LogicalGraph& graph, const std::string& name,
                                       const std::vector<int64_t>& logical,
                                       const LocalWindow& window);

// The source kernel of an input on one rank: the whole step's batch of that rank.
absl::StatusOr<plan::KernelConf> InputKernel(const LogicalGraph& graph, const job::Input& input,
                                             const std::vector<int64_t>& logical,
                                             const LocalWindow& window);

// The job's optimizer as the kernel of the VARIABLE tasks of `variable` (its parameter group's
// learning rate and weight decay, the job's schedule); `state_names` gets the checkpoint names of
// the optimizer states it keeps for that variable.
plan::KernelConf OptimizerKernel(const LogicalGraph& graph, const LogicalNode& variable,
                                 std::vector<std::string>* state_names);

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_SOURCE_KERNELS_H_
