#ifndef LOOM_COMPILER_SLOT_ASSIGNMENT_H_
#define LOOM_COMPILER_SLOT_ASSIGNMENT_H_

// The number of slots of a lowered plan's registers, set once all its tasks are there: one for
// a register read only on its producer's stream (unless the job set register_slots), and for
// the activations that backward ops read, enough to bound the micro-batches in flight on each
// pipeline stage (one-forward-one-backward, GPipe or zero bubble). Under zero bubble also the
// weight gradients' Task.input_lookahead. Every other register keeps the slots it was made with.

#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "compiler/logical_graph.h"
#include "core/device_key.h"
#include "proto/plan.pb.h"

namespace loom::compiler {

// Sets the slots of `plan`'s registers (and the lookahead of zero-bubble weight gradients);
// `op_of_task` is the logical op of each op task (by task name), `all_to_all_devices` the devices
// with an all-to-all once per micro-batch (where a pipeline stage routes tokens to experts, it
// stashes one micro-batch more there).
// Adds no task or register.
void AssignRegisterSlots(const LogicalGraph& graph,
                         const absl::flat_hash_map<std::string, const LogicalNode*>& op_of_task,
                         const absl::flat_hash_set<DeviceKey>& all_to_all_devices,
                         plan::Plan* plan);

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_SLOT_ASSIGNMENT_H_
