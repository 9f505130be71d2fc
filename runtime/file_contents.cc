#include "runtime/file_contents.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace loom {

absl::StatusOr<std::string> ReadFileContents(const std::string& path) {
  auto failed = [&](int error) {
    return absl::StrCat("cannot read '", path, "': ", std::strerror(error));
  };
  const int descriptor = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (descriptor < 0) return absl::NotFoundError(failed(errno));
  std::string contents;
  char buffer[1 << 16];
  while (true) {
    const ssize_t read_bytes = read(descriptor, buffer, sizeof(buffer));
    if (read_bytes == 0) break;
    if (read_bytes < 0) {
      if (errno == EINTR) continue;
      const int error = errno;  // e.g. EISDIR
      close(descriptor);
      return absl::DataLossError(failed(error));
    }
    contents.append(buffer, static_cast<size_t>(read_bytes));
  }
  close(descriptor);
  return contents;
}

}  // namespace loom
