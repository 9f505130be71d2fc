#ifndef LOOM_DAEMON_DIRECTORY_LOCK_H_
#define LOOM_DAEMON_DIRECTORY_LOCK_H_

// DirectoryLock: the flock on <directory>/lock that keeps a second loomd out of a --data-dir
// while one uses it. The Daemon acquires it at start and holds it for its whole life; the lock
// file holds the owner's pid, which a refused Acquire names.

#include <string>

#include "absl/status/statusor.h"

namespace loom::daemon {

// An exclusive lock on a directory (flock on <directory>/lock, which holds the owner's pid), so
// that two loomd processes never share one --data-dir. Released when destroyed (or when the
// process dies: the kernel drops flocks with their descriptors).
class DirectoryLock {
 public:
  // Creates the directory when missing. INVALID_ARGUMENT naming the directory when it cannot be
  // created, and FAILED_PRECONDITION naming the holder's pid when another process holds it.
  static absl::StatusOr<DirectoryLock> Acquire(const std::string& directory);

  DirectoryLock(DirectoryLock&& other) noexcept;
  DirectoryLock& operator=(DirectoryLock&& other) noexcept;
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;
  ~DirectoryLock();

 private:
  explicit DirectoryLock(int descriptor) : descriptor_(descriptor) {}

  int descriptor_ = -1;
};

}  // namespace loom::daemon

#endif  // LOOM_DAEMON_DIRECTORY_LOCK_H_
