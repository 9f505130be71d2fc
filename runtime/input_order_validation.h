#ifndef LOOM_RUNTIME_INPUT_ORDER_VALIDATION_H_
#define LOOM_RUNTIME_INPUT_ORDER_VALIDATION_H_

// ValidatePlan's checks of the orders a task's inputs carry beyond their data: lookahead
// (Task.input_lookahead) and ordering inputs (Task.ordering_inputs). Each error is
// INVALID_ARGUMENT naming the task.

#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "proto/plan.pb.h"

namespace loom {

// Task.input_lookahead: a COMPUTE task's, one count >= 0 per input, each below its register's
// slots (the producer must be able to write the pieces the task waits for while it holds one).
// `register_position`: register name -> position in `plan`, for every register the task reads.
absl::Status CheckLookahead(const plan::Task& task, const plan::Plan& plan,
                            const absl::flat_hash_map<std::string, int>& register_position);

// Task.ordering_inputs: a COMPUTE or COLLECTIVE task's, at most its inputs.
absl::Status CheckOrderingInputs(const plan::Task& task);

}  // namespace loom

#endif  // LOOM_RUNTIME_INPUT_ORDER_VALIDATION_H_
