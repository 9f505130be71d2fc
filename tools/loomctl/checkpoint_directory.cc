#include "tools/loomctl/checkpoint_directory.h"

#include <unistd.h>

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "core/safetensors.h"
#include "node/checkpoint_assembly.h"

namespace loom::loomctl {

absl::StatusOr<std::string> SaveCheckpoint(const plan::Plan& plan, const JobRuntime& job,
                                           const CheckpointProgress& progress,
                                           const std::string& directory) {
  absl::StatusOr<checkpoint::Checkpoint> assembled = AssembleCheckpoint(plan, job, progress);
  if (!assembled.ok()) return assembled.status();
  std::string path = CheckpointPath(directory, progress.steps_taken);
  if (absl::Status status = checkpoint::WriteSafetensors(path, *assembled); !status.ok()) {
    return status;
  }
  return path;
}

std::string CheckpointPath(const std::string& directory, int64_t steps_taken) {
  return (std::filesystem::path(directory) / absl::StrCat("step-", steps_taken, ".safetensors"))
      .string();
}

absl::Status PointLatestCheckpoint(const std::string& directory, const std::string& checkpoint) {
  const std::filesystem::path latest = std::filesystem::path(directory) / kLatestCheckpoint;
  const std::filesystem::path temporary =
      std::filesystem::path(directory) / absl::StrCat(".", kLatestCheckpoint, ".", getpid());
  std::error_code error_code;
  std::filesystem::remove(temporary, error_code);
  // Relative, so that the directory can be moved or copied whole.
  std::filesystem::create_symlink(std::filesystem::path(checkpoint).filename(), temporary,
                                  error_code);
  if (!error_code) std::filesystem::rename(temporary, latest, error_code);
  if (error_code) {
    std::filesystem::remove(temporary);
    return absl::InternalError(absl::StrCat("cannot point ", latest.string(), " at ", checkpoint,
                                            ": ", error_code.message()));
  }
  return absl::OkStatus();
}

}  // namespace loom::loomctl
