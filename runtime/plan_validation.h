#ifndef LOOM_RUNTIME_PLAN_VALIDATION_H_
#define LOOM_RUNTIME_PLAN_VALIDATION_H_

// ValidatePlan: the checks a plan passes before any actor is built (names, devices, registers and
// their producers, what each task kind needs, no cycles), each error INVALID_ARGUMENT naming the
// task or register at fault; and TaskIndex, a task's index in the job. JobRuntime validates every
// plan it runs; loomd's job admission and `loomctl run-plan` call it too.

#include "absl/status/status.h"
#include "proto/plan.pb.h"

namespace loom {

// Checks a plan before any actor is built: unique names, declared devices and registers, one
// producer per register (no dangling register), at least one slot per register, memory pools and
// the registers placed in them (one slot, inside the pool, on the producer's device), the arity
// and shapes each task kind needs, and no cycle (a cycle of tasks can never act). Every error is
// INVALID_ARGUMENT and names the task, register or pool at fault.
absl::Status ValidatePlan(const plan::Plan& plan);

// The task index of a task: its `index` field when set, else its position in the plan.
uint32_t TaskIndex(const plan::Plan& plan, int position);

}  // namespace loom

#endif  // LOOM_RUNTIME_PLAN_VALIDATION_H_
