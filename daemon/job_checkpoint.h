#ifndef LOOM_DAEMON_JOB_CHECKPOINT_H_
#define LOOM_DAEMON_JOB_CHECKPOINT_H_

// Saving a cluster job's variables to SubmitJobRequest.checkpoint_path: the path's check at
// submit, where the nodes' parts lie (StepPartsPath, CheckpointPartPath), how a node writes its
// part (WriteCheckpointPart: the NodeAgent at the job's end, CheckpointSnapshots every few steps),
// and how the coordinator assembles the parts into one checkpoint (AssembleCheckpointParts) and
// removes them; all beneath the --checkpoint-root directories.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "core/file_roots.h"
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

// Checkpoints are written only beneath the coordinator's and nodes' --checkpoint-root directories
// (`roots`: FileRoots opened there), relative to a directory opened beneath them (no symbolic link
// followed), and never replace a file the job did not write unless it says so (overwrite):
// the file a job writes carries the metadata kWriterKey (CheckpointWriter), and a later save of
// the same job replaces only a file that carries the same.

// The metadata key that names the job that wrote a checkpoint (CheckpointWriter's value).
inline constexpr char kWriterKey[] = "loomd_job";
// The value of kWriterKey for the job `job_id` submitted at `submit_time` (unique across
// coordinator restarts, as a job id alone is not without --data-dir).
std::string CheckpointWriter(absl::string_view job_id, absl::string_view submit_time);

// At submit: INVALID_ARGUMENT unless `every_steps` (save also every that many steps; 0: only at
// the end) is >= 0, `path` is absolute, ends in ".safetensors" (a client cannot have loomd
// overwrite another kind of file its user may write), its directory exists here (on the
// coordinator) and `plan` has variables to save; PERMISSION_DENIED naming the path and the roots
// unless it lies beneath `roots` (null: no --checkpoint-root, every path is refused) without a
// symbolic link or ".." out of them; ALREADY_EXISTS when a file is at `path` and not `overwrite`
// (SubmitJobRequest.overwrite_checkpoint). The message names the path or the job.
absl::Status CheckCheckpointPath(const FileRoots* roots, const std::string& path,
                                 int64_t every_steps, bool overwrite, const plan::Plan& plan);

// Where the parts of a checkpoint lie: "PATH" for the one written when the job ends, and
// "PATH.step-K" (StepPartsPath) for the one a job saving every few steps writes after its step K.
// Node N's part is "PARTS.node-N" (CheckpointPartPath).
std::string StepPartsPath(absl::string_view path, int64_t step);
std::string CheckpointPartPath(absl::string_view parts, int node);
// OK when `part` is a part's path (CheckpointPartPath of PATH or StepPartsPath(PATH, K), PATH
// absolute and ending in ".safetensors") beneath `roots`; INVALID_ARGUMENT or PERMISSION_DENIED
// naming it otherwise. WriteCheckpointPart checks every part it writes so.
absl::Status CheckCheckpointPartPath(const FileRoots& roots, const std::string& part);

// A node's part: a safetensors file holding, for every VARIABLE task (by name), its value as
// "value:TASK" and its i-th optimizer state as "state<i>:TASK", written beneath `roots` (the
// node's --checkpoint-root) after CheckCheckpointPartPath; it replaces an older part of that name
// (a leftover of an interrupted job: only loomd writes such names). Errors name `node` and the
// path.
absl::Status WriteCheckpointPart(int node, std::map<std::string, VariableOnHost> variables,
                                 const FileRoots& roots, const std::string& path);
// The same, after the node's job ran (no act can run any more), for every VARIABLE task of the
// node's plan (runtime.plan()), copied to the host through the task's stream. Errors name the
// node and the path or task.
absl::Status WriteCheckpointPart(const JobRuntime& runtime, const FileRoots& roots,
                                 const std::string& path);

// Removes the parts of `nodes` (under `parts`) that exist beneath `roots` (a job that failed
// after some of its nodes wrote theirs).
void RemoveCheckpointParts(const FileRoots& roots, absl::string_view parts,
                           const std::vector<int>& nodes);

// Removes what an interrupted save of the checkpoint `path` can leave next to it, beneath `roots`
// (null: nothing is removed): node parts ("PATH.node-N", "PATH.step-K.node-N") and unfinished
// atomic writes of those or of PATH (their names followed by ".tmp.PID.COUNT"). Any other file,
// PATH itself included, is left alone. Returns the paths removed; a file that cannot be removed
// is logged and skipped.
std::vector<std::string> RemoveLeftoverCheckpointFiles(const FileRoots* roots,
                                                       const std::string& path);

// Assembles every variable of `plan` (the whole job's plan: its variable layouts name the tasks)
// from the parts of `nodes` under `parts` (CheckpointPartPath) and writes the checkpoint with
// `progress` to `path` beneath `roots` (atomically, as `loomctl run --save-dir` writes it), one
// logical tensor at a time (AssembleVariableTensor, WriteSafetensorsStreamed): only the parts'
// headers and one tensor's pieces are in memory at once. A file already at `path` is replaced
// only with `overwrite`, or when its metadata kWriterKey is progress.metadata's (non-empty: the
// same job wrote it); otherwise the save fails ALREADY_EXISTS naming it and the file is kept.
// Then removes the parts, also when it failed. Errors name the part, task, variable or path.
absl::Status AssembleCheckpointParts(const FileRoots& roots, const plan::Plan& plan,
                                     const std::vector<int>& nodes, absl::string_view parts,
                                     const std::string& path, const CheckpointProgress& progress,
                                     bool overwrite);

}  // namespace loom::daemon

#endif  // LOOM_DAEMON_JOB_CHECKPOINT_H_
