#ifndef LOOM_CLIENT_INITIAL_STATE_H_
#define LOOM_CLIENT_INITIAL_STATE_H_

// Starting a job from a safetensors checkpoint (job::InitialState): StartFromCheckpoint and
// InitialStateFromCheckpoint check the checkpoint's header against the job's variables and
// optimizer, CheckOptimizerStates checks it against the compiled plan, and OptimizerStateNames
// gives PyTorch's names of a variable's optimizer states. `loomctl run` and `submit` use it.

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/safetensors.h"
#include "proto/job.pb.h"
#include "proto/plan.pb.h"

namespace loom {

// Starting a job from a checkpoint (job::InitialState, loomctl run --init): the checks that make
// a bad file fail before anything runs, with messages that name the file and the tensor.

// The checkpoint names PyTorch gives the optimizer state of `variable` under `optimizer`: AdamW
// "optimizer.exp_avg.<variable>", "optimizer.exp_avg_sq.<variable>"; SGD with momentum
// "optimizer.momentum_buffer.<variable>"; none for SGD without momentum or no optimizer.
std::vector<std::string> OptimizerStateNames(const job::Optimizer& optimizer,
                                             const std::string& variable);

// The checkpoint's tensor holding the optimizer's step counter (I64, shape []).
inline constexpr char kOptimizerStepTensor[] = "optimizer.step";

// A checkpoint's tensors by name, as its header lists them: all the checks below look at (they
// read no tensor's contents but the step counter's, so a checkpoint of any size is checked in
// the memory of its header).
using CheckpointTensors = std::map<std::string, checkpoint::SafetensorsTensorInfo>;

// The initial state of `job` from the checkpoint `checkpoint` (opened from `path`):
//  - every variable of the job must be there with its shape and data type (float32 when unset);
//  - when the job has an optimizer and the file holds any "optimizer.*" tensor, it must hold
//    "optimizer.step" (a scalar integer), and every optimizer state it holds of a job variable
//    must have that variable's shape: the result then has optimizer_state = true and first_step =
//    optimizer.step; with none, optimizer_state = false and first_step = 0 (a fresh optimizer);
//  - without an optimizer, optimizer tensors are ignored.
// Which states must be present depends on which variables the optimizer updates, which the
// compiler decides: CheckOptimizerStates checks that on the compiled plan.
// INVALID_ARGUMENT naming the file and every variable or tensor at fault.
absl::StatusOr<job::InitialState> InitialStateFromCheckpoint(
    const std::string& path, checkpoint::SafetensorsReader& checkpoint, const job::Job& job);

// Opens the checkpoint at `path` and starts `job` from it: job->initial_state as
// InitialStateFromCheckpoint makes it. Returns the checkpoint's tensors (for CheckOptimizerStates).
// Errors: SafetensorsReader::Open's (naming the file) and InitialStateFromCheckpoint's.
absl::StatusOr<CheckpointTensors> StartFromCheckpoint(const std::string& path, job::Job* job);

// After compiling with an initial state that has optimizer_state: every optimizer state the plan
// keeps (Plan.variables' state_names) must be in the checkpoint. A plan without variable layouts
// is checked against the job instead: every state (OptimizerStateNames) of every non-frozen
// variable. INVALID_ARGUMENT naming the file and every missing state.
absl::Status CheckOptimizerStates(const std::string& path, const CheckpointTensors& checkpoint,
                                  const job::Job& job, const plan::Plan& plan);

}  // namespace loom

#endif  // LOOM_CLIENT_INITIAL_STATE_H_
