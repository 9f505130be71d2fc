#ifndef LOOM_CORE_FILE_CONTENTS_H_
#define LOOM_CORE_FILE_CONTENTS_H_

// Reading files whole or in part: ReadFileContents, and ReadFilePart (a byte range and the file's
// size), with NOT_FOUND or DATA_LOSS errors naming the path and the system's reason. Callers (plan
// text, the job store, loomctl, the compiler, host memory) add what the file is.

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace loom {

// The whole contents of the file at `path`, as bytes. NOT_FOUND "cannot read 'PATH': REASON" when
// it cannot be opened (REASON: the system's, e.g. "No such file or directory"), DATA_LOSS with the
// same message when reading it fails (e.g. PATH is a directory). Callers add what the file is.
absl::StatusOr<std::string> ReadFileContents(const std::string& path);

// Part of a file, and the whole file's size.
struct FilePart {
  std::string bytes;
  int64_t total_bytes = 0;
};
// The bytes [offset, offset + length) of the file at `path` (offset, length >= 0; fewer at its
// end, none from its end on) and its size, without reading the rest. Errors as ReadFileContents.
absl::StatusOr<FilePart> ReadFilePart(const std::string& path, int64_t offset, int64_t length);

}  // namespace loom

#endif  // LOOM_CORE_FILE_CONTENTS_H_
