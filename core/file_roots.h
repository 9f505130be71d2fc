#ifndef LOOM_CORE_FILE_ROOTS_H_
#define LOOM_CORE_FILE_ROOTS_H_

// FileRoots: the directories beneath which a process opens the files its jobs name (token files,
// safetensors inputs, initial states, checkpoints) and lists (token datasets), resolved without
// leaving them (openat2 with RESOLVE_BENEATH and RESOLVE_NO_SYMLINKS), and ReadableFile, a regular
// file opened non-blocking and read with pread (a truncated file is an error naming it, never
// SIGBUS). loomd's --data-root and --checkpoint-root; the local `loomctl run` opens any path
// (FileRoots::Unrestricted).

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace loom {

// A regular file opened for reading. Move-only; closes its descriptor.
class ReadableFile {
 public:
  ReadableFile(int descriptor, int64_t size, std::string path);
  ReadableFile(ReadableFile&& other) noexcept;
  ReadableFile& operator=(ReadableFile&& other) noexcept;
  ReadableFile(const ReadableFile&) = delete;
  ReadableFile& operator=(const ReadableFile&) = delete;
  ~ReadableFile();

  // Fills `bytes` from `offset` with pread. DATA_LOSS naming the path when the file ends before
  // (it was truncated since it was opened) or the read fails; never a byte of the file in it.
  // With `ending`, a long read goes in chunks (kReadChunkBytes) and returns CANCELLED naming the
  // path once it is set.
  absl::Status ReadAt(int64_t offset, absl::Span<char> bytes,
                      const std::atomic<bool>* ending = nullptr) const;
  // The bytes ReadAt reads between two looks at `ending`.
  static constexpr size_t kReadChunkBytes = size_t{4} << 20;

  int descriptor() const { return descriptor_; }
  // The size when it was opened.
  int64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  int descriptor_ = -1;
  int64_t size_ = 0;
  std::string path_;
};

// A directory opened beneath a root, and the name of a file in it to write (see OpenForWriting).
// Move-only; closes its descriptor.
class WritableDirectory {
 public:
  WritableDirectory(int descriptor, std::string directory, std::string name);
  WritableDirectory(WritableDirectory&& other) noexcept;
  WritableDirectory& operator=(WritableDirectory&& other) noexcept;
  WritableDirectory(const WritableDirectory&) = delete;
  WritableDirectory& operator=(const WritableDirectory&) = delete;
  ~WritableDirectory();

  // An O_DIRECTORY descriptor, for openat / renameat2 / fsync of the directory.
  int descriptor() const { return descriptor_; }
  // The directory's path, for messages.
  const std::string& directory() const { return directory_; }
  // The file's name in it (no '/').
  const std::string& name() const { return name_; }

 private:
  int descriptor_ = -1;
  std::string directory_;
  std::string name_;
};

// Where files may be opened. Thread-safe (const after creation).
class FileRoots {
 public:
  // Any absolute or relative path (the local `loomctl run`, tests): files are still opened
  // non-blocking, as regular files only, and read with pread.
  static FileRoots Unrestricted();
  // Only beneath these directories. Each must be an existing directory (INVALID_ARGUMENT naming it
  // and `flag`, e.g. "--data-root", otherwise); none: every path is refused, naming `flag`.
  static absl::StatusOr<FileRoots> Beneath(const std::vector<std::string>& directories,
                                           const std::string& flag);
  // Beneath the roots of both (e.g. a node's --data-root and --checkpoint-root directories, where
  // its jobs read initial states): each keeps its flag in messages. Unrestricted when either is.
  // INTERNAL when a descriptor cannot be duplicated.
  static absl::StatusOr<FileRoots> Union(const FileRoots& first, const FileRoots& second);

  FileRoots(FileRoots&&) noexcept;
  FileRoots& operator=(FileRoots&&) noexcept;
  ~FileRoots();

  // Opens `path` for reading: an absolute path beneath one of the roots (no component a symlink,
  // no `..` out of the root), a regular file (not a FIFO, device or directory), opened O_NONBLOCK.
  // PERMISSION_DENIED naming the path and the roots when it is not beneath one; NOT_FOUND when it
  // does not exist; INVALID_ARGUMENT when it is not a regular file.
  absl::StatusOr<ReadableFile> OpenForReading(const std::string& path) const;
  // The directory of `path` opened beneath a root, for writing the file `path` names into it (with
  // openat relative to it). The same errors as OpenForReading, for the directory (NOT_FOUND when
  // it does not exist, INVALID_ARGUMENT when it is no directory); INVALID_ARGUMENT when `path`
  // names no file in it (ends in '/', ".", "..").
  absl::StatusOr<WritableDirectory> OpenForWriting(const std::string& path) const;
  // The regular files `path` names, each as a path to open with OpenForReading, in byte order of
  // their names: `path` itself when it is a regular file; the regular files directly in it whose
  // names do not start with '.' when it is a directory; or, when its last component holds '*', '?'
  // or '[' (a pattern, fnmatch with FNM_PERIOD), the regular files of its directory that match.
  // Entries that are not regular files (directories, symlinks, FIFOs) are left out. The same
  // refusals as OpenForReading for `path` (or the pattern's directory); INVALID_ARGUMENT for a
  // pattern character in another component; NOT_FOUND naming `path` when it lists no file.
  absl::StatusOr<std::vector<std::string>> ListFiles(const std::string& path) const;
  // OK when `path` is absolute and lies beneath a root as written, without a ".." component (no
  // symlink is followed: this checks the text only); PERMISSION_DENIED as OpenForReading
  // otherwise. Unrestricted: OK for any path.
  absl::Status CheckBeneath(const std::string& path) const;

  bool unrestricted() const;
  // "anywhere", or the roots: "beneath /data, /srv/tokens (--data-root)".
  std::string Describe() const;

 private:
  struct Root;
  FileRoots(bool unrestricted, std::vector<std::string> flags, std::vector<Root> roots);

  // The message of a path that is not beneath a root; `why`: what was wrong, or empty.
  absl::Status Refused(const std::string& path, const std::string& why) const;
  // Opens `path` beneath a root with `flags` (O_RDONLY, ...; O_NOFOLLOW and O_CLOEXEC are added);
  // the descriptor. Refusals name `named` (the path asked for).
  absl::StatusOr<int> OpenBeneath(const std::string& path, int flags,
                                  const std::string& named) const;
  // OpenBeneath, or a plain open when unrestricted (O_CLOEXEC added).
  absl::StatusOr<int> OpenDescriptor(const std::string& path, int flags) const;

  bool unrestricted_ = false;
  // The flags the roots came from ("--data-root"), each once, for messages about none.
  std::vector<std::string> flags_;
  std::vector<Root> roots_;
};

namespace file_roots_internal {
// Opens `relative` beneath the directory `root` (a descriptor) with `flags` as openat2 with
// RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS does, one component at a time with
// O_NOFOLLOW: what FileRoots does where openat2 is missing (ENOSYS). The descriptor, or -errno
// (EXDEV: ".." leaves the root; ELOOP: a component is a symlink; ENOENT, ENOTDIR, ...).
int OpenBeneathByWalk(int root, const std::string& relative, int flags);
}  // namespace file_roots_internal

}  // namespace loom

#endif  // LOOM_CORE_FILE_ROOTS_H_
