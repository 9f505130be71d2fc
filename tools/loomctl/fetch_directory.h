#ifndef LOOM_TOOLS_LOOMCTL_FETCH_DIRECTORY_H_
#define LOOM_TOOLS_LOOMCTL_FETCH_DIRECTORY_H_

// The --fetch-dir of loomctl's commands: creating it, where a piece of a fetched tensor goes
// (FetchedTensorPath: `<directory>/<tensor>_step<k>.npy`), writing a piece a daemon streamed
// (WriteFetchedTensor), and the check that no two tensors would share files.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/loom/v1/job_service.pb.h"

namespace loom::loomctl {

// Creates `directory` (the --fetch-dir of 'loomctl run' and 'loomctl run-plan', which write the
// fetched tensors there as .npy files) and its parents; OK when it exists already. UNAVAILABLE,
// naming the directory, when it cannot be created.
absl::Status CreateFetchDirectory(const std::string& directory);

// Where 'loomctl run' writes piece `step` of the fetched tensor `tensor`:
// `<directory>/<tensor>_step<step>.npy`, the tensor's name made file-safe with FileNamePart.
std::string FetchedTensorPath(const std::string& directory, const std::string& tensor,
                              int64_t step);

// Writes the piece of a fetched tensor that a daemon sent (JobEvent.fetched, SubmitJobRequest.
// stream_fetches) to FetchedTensorPath(directory, tensor, piece) and returns the path.
// HostTensorOf's DATA_LOSS for an event whose bytes do not match its shape and data type;
// the file's error, naming it, when it cannot be written.
absl::StatusOr<std::string> WriteFetchedTensor(const std::string& directory,
                                               const v1::FetchedTensor& fetched);

// FAILED_PRECONDITION naming both when two of `tensors` would be written to the same files.
absl::Status CheckFetchedFileNames(const std::vector<std::string>& tensors);

}  // namespace loom::loomctl

#endif  // LOOM_TOOLS_LOOMCTL_FETCH_DIRECTORY_H_
