#ifndef LOOM_NODE_CHECKPOINT_ASSEMBLY_H_
#define LOOM_NODE_CHECKPOINT_ASSEMBLY_H_

// Checkpoints of a job's variables: AssembleCheckpoint reads every variable's value and optimizer
// states from a finished run's VARIABLE actors, and AddVariableToCheckpoint and
// AssembleVariableTensor assemble each logical tensor from its ranks' pieces. CheckpointProgress
// is the step count and metadata saved with them. `loomctl run` and loomd
// (daemon/job_checkpoint.h) save checkpoints with these.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/safetensors.h"
#include "core/tensor.h"
#include "proto/job.pb.h"
#include "proto/plan.pb.h"
#include "runtime/job_runtime.h"
#include "runtime/variable_snapshot.h"

namespace loom {

// What a checkpoint records besides the tensors.
struct CheckpointProgress {
  // The optimizer steps taken so far: the run's InitialState.first_step plus the steps it ran.
  // Written as metadata "step" (and "next_step", the index of the next batch, as the PyTorch
  // oracle names it) and, with `optimizer`, as the tensor "optimizer.step" (I64, shape []).
  int64_t steps_taken = 0;
  // The job has an optimizer (PyTorch always saves its step counter, even when it keeps no state).
  bool optimizer = false;
  // More metadata ("job", "optimizer", ...); "step" and "next_step" are set from steps_taken.
  std::map<std::string, std::string> metadata;
};

// The progress of `job` (its plan named `job_name`) after `steps_taken` optimizer steps: whether
// it has an optimizer, and metadata "job" and "optimizer" ("adamw", "sgd").
CheckpointProgress JobCheckpointProgress(const job::Job& job, const std::string& job_name,
                                         int64_t steps_taken);

// Adds `progress` to `checkpoint`: its metadata, "step" and "next_step", and "optimizer.step".
void AddCheckpointProgress(const CheckpointProgress& progress, checkpoint::Checkpoint* checkpoint);

// One variable's logical value and optimizer states from its ranks: values[rank] and
// states[state][rank], in the layout's rank order and state_names order. A variable is never
// partial: split axes place windows, broadcast axes are read from the ranks with coordinate 0
// (AssembleLogicalTensor). Adds the tensors to `checkpoint` under the variable's name and its
// state names. INVALID_ARGUMENT naming the variable when a count or a piece's shape is wrong.
absl::Status AddVariableToCheckpoint(const plan::VariableLayout& layout,
                                     const std::vector<const HostTensor*>& values,
                                     const std::vector<std::vector<const HostTensor*>>& states,
                                     checkpoint::Checkpoint* checkpoint);

// One tensor of a variable's checkpoint from its ranks' pieces (pieces[rank], in the layout's
// rank order): the value (`state` -1) or the optimizer state `state` (state_names order), as
// AddVariableToCheckpoint assembles them. Only the ranks VariableRanksRead marks are read (the
// others may be null). INVALID_ARGUMENT naming the variable when a piece's shape is wrong.
absl::StatusOr<HostTensor> AssembleVariableTensor(const plan::VariableLayout& layout, int state,
                                                  const std::vector<const HostTensor*>& pieces);
// Which ranks' pieces (by rank) AssembleVariableTensor reads: a broadcast axis is read from its
// first member only.
absl::StatusOr<std::vector<bool>> VariableRanksRead(const plan::VariableLayout& layout);

// After a run (no act can run any more): the checkpoint of every variable of plan.variables,
// read from the job's VARIABLE actors (VariableActor::value() and states(), copied to the host on
// each actor's stream: a GPU's are in device memory), with the progress.
// NOT_FOUND naming the task when a layout names a task the job lacks or that is no variable;
// FAILED_PRECONDITION when the plan has no variable layouts but VARIABLE tasks (a plan compiled
// without them cannot be saved).
absl::StatusOr<checkpoint::Checkpoint> AssembleCheckpoint(const plan::Plan& plan,
                                                          const JobRuntime& job,
                                                          const CheckpointProgress& progress);

}  // namespace loom

#endif  // LOOM_NODE_CHECKPOINT_ASSEMBLY_H_
