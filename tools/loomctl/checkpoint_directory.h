#ifndef LOOM_TOOLS_LOOMCTL_CHECKPOINT_DIRECTORY_H_
#define LOOM_TOOLS_LOOMCTL_CHECKPOINT_DIRECTORY_H_

// The checkpoints `loomctl run --save-dir` writes: the path of the state after a number of steps
// (CheckpointPath), saving a finished run's checkpoint there (SaveCheckpoint), and the
// latest.safetensors link to the last one (PointLatestCheckpoint).

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "node/checkpoint_assembly.h"
#include "proto/plan.pb.h"
#include "runtime/job_runtime.h"

namespace loom::loomctl {

// The checkpoints of `loomctl run --save-dir DIR`: DIR/step-<k>.safetensors holds the state after
// k steps (counted from the start of training, so a resumed run continues the numbering), and
// DIR/latest.safetensors is a symbolic link to the last one written.

inline constexpr char kLatestCheckpoint[] = "latest.safetensors";

// DIR/step-<steps_taken>.safetensors.
std::string CheckpointPath(const std::string& directory, int64_t steps_taken);

// Assembles the checkpoint of a finished run (AssembleCheckpoint) and writes it atomically to
// CheckpointPath(directory, progress.steps_taken); returns that path.
absl::StatusOr<std::string> SaveCheckpoint(const plan::Plan& plan, const JobRuntime& job,
                                           const CheckpointProgress& progress,
                                           const std::string& directory);

// Points DIR/latest.safetensors at `checkpoint` (a file in DIR) atomically: a new link renamed
// over the old one.
absl::Status PointLatestCheckpoint(const std::string& directory, const std::string& checkpoint);

}  // namespace loom::loomctl

#endif  // LOOM_TOOLS_LOOMCTL_CHECKPOINT_DIRECTORY_H_
