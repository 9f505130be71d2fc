#ifndef LOOM_DAEMON_JOB_CHECKPOINT_H_
#define LOOM_DAEMON_JOB_CHECKPOINT_H_

// Saving a cluster job's variables to SubmitJobRequest.checkpoint_path: the path's check at
// submit, where the nodes' parts lie (StepPartsPath, CheckpointPartPath), how a node writes its
// part (WriteCheckpointPart: the NodeAgent at the job's end, CheckpointSnapshots every few steps),
// and how the coordinator assembles the parts into one checkpoint (AssembleCheckpointParts) and
// removes them.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "node/checkpoint_assembly.h"
#include "proto/plan.pb.h"
#include "runtime/job_runtime.h"
#include "runtime/variable_snapshot.h"

namespace loom::daemon {

// Saving a cluster job's variables (SubmitJobRequest.checkpoint_path): when the job succeeded,
// every node of it writes a checkpoint part next to the path (its VARIABLE tasks' pieces, as they
// are on its devices), then the coordinator assembles the parts into one checkpoint of logical
// tensors, as `loomctl run --save-dir` writes it. The parts cross between the nodes through the
// file system: the path's directory must be shared by them (any directory on one host).

// INVALID_ARGUMENT unless `path` is absolute, ends in ".safetensors" (a client cannot have loomd
// overwrite another kind of file its user may write), its directory exists here (on the
// coordinator) and `plan` has variables to save, and unless `every_steps` (save also every that
// many steps; 0: only at the end) is >= 0; the message names the path or the job.
absl::Status CheckCheckpointPath(const std::string& path, int64_t every_steps,
                                 const plan::Plan& plan);

// Where the parts of a checkpoint lie: "PATH" for the one written when the job ends, and
// "PATH.step-K" (StepPartsPath) for the one a job saving every few steps writes after its step K.
// Node N's part is "PARTS.node-N" (CheckpointPartPath).
std::string StepPartsPath(absl::string_view path, int64_t step);
std::string CheckpointPartPath(absl::string_view parts, int node);

// A node's part: a safetensors file holding, for every VARIABLE task (by name), its value as
// "value:TASK" and its i-th optimizer state as "state<i>:TASK". Errors name `node` and the path.
absl::Status WriteCheckpointPart(int node, std::map<std::string, VariableOnHost> variables,
                                 const std::string& path);
// The same, after the node's job ran (no act can run any more), for every VARIABLE task of the
// node's plan (runtime.plan()), copied to the host through the task's stream. Errors name the
// node and the path or task.
absl::Status WriteCheckpointPart(const JobRuntime& runtime, const std::string& path);

// Removes the parts of `nodes` (under `parts`) that exist (a job that failed after some of its
// nodes wrote theirs).
void RemoveCheckpointParts(absl::string_view parts, const std::vector<int>& nodes);

// Removes what an interrupted save of the checkpoint `path` can leave next to it: node parts
// ("PATH.node-N", "PATH.step-K.node-N") and unfinished atomic writes of those or of PATH (their
// names followed by ".tmp.PID.COUNT"). Any other file, PATH itself included, is left alone.
// Returns the paths removed; a file that cannot be removed is logged and skipped.
std::vector<std::string> RemoveLeftoverCheckpointFiles(const std::string& path);

// Assembles every variable of `plan` (the whole job's plan: its variable layouts name the tasks)
// from the parts of `nodes` under `parts` (CheckpointPartPath) and writes the checkpoint with
// `progress` to `path` (atomically, as `loomctl run --save-dir` writes it), one logical tensor at
// a time (AssembleVariableTensor, WriteSafetensorsStreamed): only the parts' headers and one
// tensor's pieces are in memory at once. Then removes the parts, also when it failed. Errors name
// the part, task or variable.
absl::Status AssembleCheckpointParts(const plan::Plan& plan, const std::vector<int>& nodes,
                                     absl::string_view parts, const std::string& path,
                                     const CheckpointProgress& progress);

}  // namespace loom::daemon

#endif  // LOOM_DAEMON_JOB_CHECKPOINT_H_
