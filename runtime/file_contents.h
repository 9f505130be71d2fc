#ifndef LOOM_RUNTIME_FILE_CONTENTS_H_
#define LOOM_RUNTIME_FILE_CONTENTS_H_

#include <string>

#include "absl/status/statusor.h"

namespace loom {

// The whole contents of the file at `path`, as bytes. NOT_FOUND "cannot read 'PATH': REASON" when
// it cannot be opened (REASON: the system's, e.g. "No such file or directory"), DATA_LOSS with the
// same message when reading it fails (e.g. PATH is a directory). Callers add what the file is.
absl::StatusOr<std::string> ReadFileContents(const std::string& path);

}  // namespace loom

#endif  // LOOM_RUNTIME_FILE_CONTENTS_H_
