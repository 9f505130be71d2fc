#include "daemon/directory_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace loom::daemon {

absl::StatusOr<DirectoryLock> DirectoryLock::Acquire(const std::string& directory) {
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  if (error) {
    return absl::InvalidArgumentError(
        absl::StrCat("--data-dir: cannot create '", directory, "': ", error.message()));
  }
  const std::string path = (std::filesystem::path(directory) / "lock").string();
  const int descriptor = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0640);
  if (descriptor < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--data-dir: cannot open '", path, "': ", std::strerror(errno)));
  }
  if (::flock(descriptor, LOCK_EX | LOCK_NB) != 0) {
    const int why = errno;
    char holder[32] = {};
    const ssize_t count = ::pread(descriptor, holder, sizeof(holder) - 1, 0);
    ::close(descriptor);
    if (why == EWOULDBLOCK) {
      return absl::FailedPreconditionError(
          absl::StrCat("--data-dir '", directory, "' is in use by another loomd (pid ",
                       count > 0 ? absl::StripAsciiWhitespace(holder) : "unknown", ")"));
    }
    return absl::InvalidArgumentError(
        absl::StrCat("--data-dir: cannot lock '", path, "': ", std::strerror(why)));
  }
  // Only a second daemon's message needs the pid, so a failed write is no error.
  const std::string pid = absl::StrCat(::getpid(), "\n");
  if (::ftruncate(descriptor, 0) == 0) (void)!::pwrite(descriptor, pid.data(), pid.size(), 0);
  return DirectoryLock(descriptor);
}

DirectoryLock::DirectoryLock(DirectoryLock&& other) noexcept
    : descriptor_(std::exchange(other.descriptor_, -1)) {}

DirectoryLock& DirectoryLock::operator=(DirectoryLock&& other) noexcept {
  if (this != &other) {
    if (descriptor_ >= 0) ::close(descriptor_);
    descriptor_ = std::exchange(other.descriptor_, -1);
  }
  return *this;
}

DirectoryLock::~DirectoryLock() {
  if (descriptor_ >= 0) ::close(descriptor_);
}

}  // namespace loom::daemon
