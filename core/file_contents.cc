#include "core/file_contents.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
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

absl::StatusOr<FilePart> ReadFilePart(const std::string& path, int64_t offset, int64_t length) {
  auto failed = [&](int error) {
    return absl::StrCat("cannot read '", path, "': ", std::strerror(error));
  };
  const int descriptor = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (descriptor < 0) return absl::NotFoundError(failed(errno));
  FilePart part;
  struct stat status {};
  if (fstat(descriptor, &status) != 0) {
    const int error = errno;
    close(descriptor);
    return absl::DataLossError(failed(error));
  }
  part.total_bytes = static_cast<int64_t>(status.st_size);
  // offset + length, which may be past int64_t for any offset a caller passes, capped at the end.
  const int64_t end = length >= part.total_bytes - offset ? part.total_bytes : offset + length;
  part.bytes.resize(static_cast<size_t>(std::max<int64_t>(end - offset, 0)));
  size_t done = 0;
  while (done < part.bytes.size()) {
    const ssize_t read_bytes = pread(descriptor, part.bytes.data() + done, part.bytes.size() - done,
                                     static_cast<off_t>(offset + static_cast<int64_t>(done)));
    if (read_bytes < 0 && errno == EINTR) continue;
    if (read_bytes <= 0) {
      const int error = read_bytes < 0 ? errno : EIO;  // 0: the file shrank while it was read
      close(descriptor);
      return absl::DataLossError(failed(error));
    }
    done += static_cast<size_t>(read_bytes);
  }
  close(descriptor);
  return part;
}

}  // namespace loom
