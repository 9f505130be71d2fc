#include "tools/loomctl/fetch_directory.h"

#include <filesystem>
#include <system_error>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "client/fetched_tensor.h"
#include "tools/loomctl/job_summary.h"
#include "tools/loomctl/npy_writer.h"

namespace loom::loomctl {

absl::Status CreateFetchDirectory(const std::string& directory) {
  std::error_code error_code;
  std::filesystem::create_directories(directory, error_code);
  if (error_code) {
    return absl::UnavailableError(absl::StrCat("cannot create the fetch directory '", directory,
                                               "': ", error_code.message()));
  }
  return absl::OkStatus();
}

std::string FetchedTensorPath(const std::string& directory, const std::string& tensor,
                              int64_t step) {
  return (std::filesystem::path(directory) /
          absl::StrCat(FileNamePart(tensor), "_step", step, ".npy"))
      .string();
}

absl::StatusOr<std::string> WriteFetchedTensor(const std::string& directory,
                                               const v1::FetchedTensor& fetched) {
  absl::StatusOr<HostTensor> tensor = HostTensorOf(fetched);
  if (!tensor.ok()) return tensor.status();
  std::string path = FetchedTensorPath(directory, fetched.tensor(), fetched.piece());
  if (absl::Status written = WriteNpyFile(*tensor, path); !written.ok()) return written;
  return path;
}

absl::Status CheckFetchedFileNames(const std::vector<std::string>& tensors) {
  // File name part -> the tensor it holds.
  absl::flat_hash_map<std::string, std::string> file_names;
  for (const std::string& name : tensors) {
    auto [existing, inserted] = file_names.emplace(FileNamePart(name), name);
    if (!inserted && existing->second != name) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the fetched tensors '", existing->second, "' and '", name,
          "' would be written to the same files ", FileNamePart(name), "_step<k>.npy: rename one"));
    }
  }
  return absl::OkStatus();
}

}  // namespace loom::loomctl
