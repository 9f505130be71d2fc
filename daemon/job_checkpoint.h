#ifndef LOOM_DAEMON_JOB_CHECKPOINT_H_
#define LOOM_DAEMON_JOB_CHECKPOINT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "client/checkpoint_assembly.h"
#include "proto/plan.pb.h"
#include "runtime/job_runtime.h"

namespace loom::daemon {

// Saving a cluster job's variables (SubmitJobRequest.checkpoint_path): when the job succeeded,
// every node of it writes a checkpoint part next to the path (its VARIABLE tasks' pieces, as they
// are on its devices), then the coordinator assembles the parts into one checkpoint of logical
// tensors, as `loomctl run --save-dir` writes it. The parts cross between the nodes through the
// file system: the path's directory must be shared by them (any directory on one host).

// INVALID_ARGUMENT unless `path` is absolute, ends in ".safetensors" (a client cannot have loomd
// overwrite another kind of file its user may write), its directory exists here (on the
// coordinator) and `plan` has variables to save; the message names the path or the job.
absl::Status CheckCheckpointPath(const std::string& path, const plan::Plan& plan);

// "PATH.node-N": node N's part of the checkpoint at `path`.
std::string CheckpointPartPath(absl::string_view path, int node);

// A node's part, after its job ran (no act can run any more): a safetensors file holding, for
// every VARIABLE task of the node's plan (runtime.plan()), its value as "value:TASK" and its i-th
// optimizer state as "state<i>:TASK", copied to the host through the task's stream. Errors name
// the node and the path or task.
absl::Status WriteCheckpointPart(const JobRuntime& runtime, const std::string& path);

// Removes the parts of `nodes` that exist (a job that failed after some of its nodes wrote theirs).
void RemoveCheckpointParts(absl::string_view path, const std::vector<int>& nodes);

// Reads the parts of `nodes` (CheckpointPartPath), assembles every variable of `plan` (the whole
// job's plan: its variable layouts name the tasks) with AddVariableToCheckpoint and writes the
// checkpoint with `progress` to `path` (atomically); then removes the parts, also when it failed.
// Errors name the part, task or variable.
absl::Status AssembleCheckpointParts(const plan::Plan& plan, const std::vector<int>& nodes,
                                     const std::string& path, const CheckpointProgress& progress);

}  // namespace loom::daemon

#endif  // LOOM_DAEMON_JOB_CHECKPOINT_H_
