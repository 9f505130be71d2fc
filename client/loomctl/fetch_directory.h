#ifndef LOOM_CLIENT_LOOMCTL_FETCH_DIRECTORY_H_
#define LOOM_CLIENT_LOOMCTL_FETCH_DIRECTORY_H_

#include <string>

#include "absl/status/status.h"

namespace loom::loomctl {

// Creates `directory` (the --fetch-dir of 'loomctl run' and 'loomctl run-plan', which write the
// fetched tensors there as .npy files) and its parents; OK when it exists already. UNAVAILABLE,
// naming the directory, when it cannot be created.
absl::Status CreateFetchDirectory(const std::string& directory);

}  // namespace loom::loomctl

#endif  // LOOM_CLIENT_LOOMCTL_FETCH_DIRECTORY_H_
