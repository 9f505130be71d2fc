#include "core/file_roots.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace loom {

struct FileRoots::Root {
  // Absolute and lexically normal, without a trailing '/' (but "/").
  std::string path;
  // Its real path (symlinks resolved), when it differs; paths may name the root either way.
  std::string canonical;
  // O_PATH | O_DIRECTORY; every path beneath the root is resolved relative to it.
  int descriptor = -1;
  // The flag that named it ("--data-root").
  std::string flag;
};

namespace {

std::string Quote(const std::string& path) { return absl::StrCat("'", path, "'"); }

void CloseDescriptor(int descriptor) {
  if (descriptor >= 0) ::close(descriptor);
}

// What a file that is not a regular one is, for messages.
std::string KindOf(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a regular file";
}

// The remainder of `path` beneath `root` (both absolute, `root` normal), "." for the root itself;
// nullopt when `path` does not start with it.
std::optional<std::string> Remainder(const std::string& root, const std::string& path) {
  if (root.empty()) return std::nullopt;
  std::string rest;
  if (root == "/") {
    if (path.empty() || path[0] != '/') return std::nullopt;
    rest = path.substr(1);
  } else if (path == root) {
    rest = "";
  } else if (path.size() > root.size() && path.compare(0, root.size(), root) == 0 &&
             path[root.size()] == '/') {
    rest = path.substr(root.size() + 1);
  } else {
    return std::nullopt;
  }
  const size_t first = rest.find_first_not_of('/');
  rest = first == std::string::npos ? "" : rest.substr(first);
  return rest.empty() ? std::string(".") : rest;
}

// `path` without empty and "." components ("/a//./b/" is "/a/b"); ".." stays, for the kernel to
// resolve beneath the root.
std::string WithoutEmptyComponents(const std::string& path) {
  std::string result;
  for (absl::string_view component : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    if (component == ".") continue;
    absl::StrAppend(&result, "/", component);
  }
  return result.empty() ? "/" : result;
}

// openat2 beneath `root`; the descriptor or -errno (-ENOSYS where the kernel lacks it).
int Openat2Beneath(int root, const std::string& relative, int flags) {
  struct open_how how;
  std::memset(&how, 0, sizeof(how));
  // No O_NOFOLLOW: RESOLVE_NO_SYMLINKS refuses a symlink as the last component too (ELOOP), where
  // O_NOFOLLOW with O_DIRECTORY would say ENOTDIR.
  how.flags = static_cast<uint64_t>(flags | O_CLOEXEC);
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  for (int attempt = 0;; ++attempt) {
    const long descriptor = ::syscall(SYS_openat2, root, relative.c_str(), &how, sizeof(how));
    if (descriptor >= 0) return static_cast<int>(descriptor);
    const int error = errno;
    // EAGAIN: a rename raced with the resolution of ".."; EINTR: a signal.
    if ((error == EAGAIN || error == EINTR) && attempt < 8) continue;
    return -error;
  }
}

int OpenBeneathAnyWay(int root, const std::string& relative, int flags) {
  const int descriptor = Openat2Beneath(root, relative, flags);
  if (descriptor != -ENOSYS) return descriptor;
  return file_roots_internal::OpenBeneathByWalk(root, relative, flags);
}

absl::Status OpenError(const std::string& path, int error) {
  if (error == ENOENT) {
    return absl::NotFoundError(absl::StrCat("cannot open ", Quote(path), ": it does not exist"));
  }
  return absl::ErrnoToStatus(error, absl::StrCat("cannot open ", Quote(path)));
}

}  // namespace

namespace file_roots_internal {

int OpenBeneathByWalk(int root, const std::string& relative, int flags) {
  std::vector<std::string> components;
  for (absl::string_view component : absl::StrSplit(relative, '/', absl::SkipEmpty())) {
    if (component != ".") components.emplace_back(component);
  }
  if (!relative.empty() && relative[0] == '/') return -EXDEV;  // absolute: not beneath
  // The directories opened below the root, innermost last.
  std::vector<int> opened;
  auto current = [&] { return opened.empty() ? root : opened.back(); };
  auto finish = [&](int result) {
    for (int descriptor : opened) CloseDescriptor(descriptor);
    return result;
  };
  const size_t directories = components.empty() ? 0 : components.size() - 1;
  for (size_t index = 0; index < directories; ++index) {
    const std::string& component = components[index];
    if (component == "..") {
      if (opened.empty()) return finish(-EXDEV);
      CloseDescriptor(opened.back());
      opened.pop_back();
      continue;
    }
    const int descriptor = ::openat(current(), component.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (descriptor < 0) return finish(-errno);
    struct stat info;
    int error = 0;
    if (::fstat(descriptor, &info) != 0) {
      error = errno;
    } else if (S_ISLNK(info.st_mode)) {
      error = ELOOP;
    } else if (!S_ISDIR(info.st_mode)) {
      error = ENOTDIR;
    }
    if (error != 0) {
      CloseDescriptor(descriptor);
      return finish(-error);
    }
    opened.push_back(descriptor);
  }
  std::string last = components.empty() ? "." : components.back();
  if (last == "..") {
    if (opened.empty()) return finish(-EXDEV);
    CloseDescriptor(opened.back());
    opened.pop_back();
    last = ".";
  }
  const int descriptor = ::openat(current(), last.c_str(), flags | O_NOFOLLOW | O_CLOEXEC);
  if (descriptor < 0) {
    const int error = errno;
    struct stat link;
    // O_NOFOLLOW | O_DIRECTORY on a symlink says ENOTDIR: a symlink is ELOOP, as with openat2.
    if (::fstatat(current(), last.c_str(), &link, AT_SYMLINK_NOFOLLOW) == 0 &&
        S_ISLNK(link.st_mode)) {
      return finish(-ELOOP);
    }
    return finish(-error);
  }
  struct stat info;
  if (::fstat(descriptor, &info) == 0 && S_ISLNK(info.st_mode)) {  // O_PATH | O_NOFOLLOW
    CloseDescriptor(descriptor);
    return finish(-ELOOP);
  }
  return finish(descriptor);
}

}  // namespace file_roots_internal

// ReadableFile.

ReadableFile::ReadableFile(int descriptor, int64_t size, std::string path)
    : descriptor_(descriptor), size_(size), path_(std::move(path)) {}

ReadableFile::ReadableFile(ReadableFile&& other) noexcept
    : descriptor_(std::exchange(other.descriptor_, -1)),
      size_(other.size_),
      path_(std::move(other.path_)) {}

ReadableFile& ReadableFile::operator=(ReadableFile&& other) noexcept {
  if (this != &other) {
    CloseDescriptor(descriptor_);
    descriptor_ = std::exchange(other.descriptor_, -1);
    size_ = other.size_;
    path_ = std::move(other.path_);
  }
  return *this;
}

ReadableFile::~ReadableFile() { CloseDescriptor(descriptor_); }

absl::Status ReadableFile::ReadAt(int64_t offset, absl::Span<char> bytes,
                                  const std::atomic<bool>* ending) const {
  if (offset < 0 ||
      static_cast<uint64_t>(offset) > static_cast<uint64_t>(INT64_MAX) - bytes.size()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot read ", bytes.size(), " bytes of ",
                                                   Quote(path_), " at offset ", offset));
  }
  size_t done = 0;
  while (done < bytes.size()) {
    if (ending != nullptr && ending->load(std::memory_order_relaxed)) {
      return absl::CancelledError(
          absl::StrCat("reading ", Quote(path_), " stopped: the job is ending"));
    }
    size_t chunk = bytes.size() - done;
    if (ending != nullptr) chunk = std::min(chunk, kReadChunkBytes);
    const ssize_t count = ::pread(descriptor_, bytes.data() + done, chunk,
                                  static_cast<off_t>(offset + static_cast<int64_t>(done)));
    if (count < 0) {
      if (errno == EINTR) continue;
      return absl::DataLossError(
          absl::StrCat("cannot read ", Quote(path_), ": ", std::strerror(errno)));
    }
    if (count == 0) {
      return absl::DataLossError(absl::StrCat(
          Quote(path_), " ended at byte ", offset + static_cast<int64_t>(done),
          " while being read (it had ", size_, " bytes when it was opened): it was truncated"));
    }
    done += static_cast<size_t>(count);
  }
  return absl::OkStatus();
}

// WritableDirectory.

WritableDirectory::WritableDirectory(int descriptor, std::string directory, std::string name)
    : descriptor_(descriptor), directory_(std::move(directory)), name_(std::move(name)) {}

WritableDirectory::WritableDirectory(WritableDirectory&& other) noexcept
    : descriptor_(std::exchange(other.descriptor_, -1)),
      directory_(std::move(other.directory_)),
      name_(std::move(other.name_)) {}

WritableDirectory& WritableDirectory::operator=(WritableDirectory&& other) noexcept {
  if (this != &other) {
    CloseDescriptor(descriptor_);
    descriptor_ = std::exchange(other.descriptor_, -1);
    directory_ = std::move(other.directory_);
    name_ = std::move(other.name_);
  }
  return *this;
}

WritableDirectory::~WritableDirectory() { CloseDescriptor(descriptor_); }

// FileRoots.

FileRoots::FileRoots(bool unrestricted, std::vector<std::string> flags, std::vector<Root> roots)
    : unrestricted_(unrestricted), flags_(std::move(flags)), roots_(std::move(roots)) {}

FileRoots::FileRoots(FileRoots&& other) noexcept
    : unrestricted_(other.unrestricted_),
      flags_(std::move(other.flags_)),
      roots_(std::exchange(other.roots_, {})) {}

FileRoots& FileRoots::operator=(FileRoots&& other) noexcept {
  if (this != &other) {
    for (Root& root : roots_) CloseDescriptor(root.descriptor);
    unrestricted_ = other.unrestricted_;
    flags_ = std::move(other.flags_);
    roots_ = std::exchange(other.roots_, {});
  }
  return *this;
}

FileRoots::~FileRoots() {
  for (Root& root : roots_) CloseDescriptor(root.descriptor);
}

FileRoots FileRoots::Unrestricted() { return FileRoots(true, {}, {}); }

absl::StatusOr<FileRoots> FileRoots::Beneath(const std::vector<std::string>& directories,
                                             const std::string& flag) {
  std::vector<Root> roots;
  auto fail = [&](absl::Status status) {
    for (Root& root : roots) CloseDescriptor(root.descriptor);
    return status;
  };
  for (const std::string& directory : directories) {
    if (directory.empty()) return fail(absl::InvalidArgumentError(absl::StrCat(flag, " is empty")));
    std::error_code error;
    std::filesystem::path absolute = std::filesystem::absolute(directory, error);
    if (error) {
      return fail(absl::InvalidArgumentError(
          absl::StrCat(flag, " ", Quote(directory), ": ", error.message())));
    }
    std::string normal = absolute.lexically_normal().string();
    while (normal.size() > 1 && normal.back() == '/') normal.pop_back();
    const int descriptor = ::open(normal.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (descriptor < 0) {
      return fail(absl::InvalidArgumentError(absl::StrCat(
          flag, " ", Quote(directory), " is not an existing directory: ", std::strerror(errno))));
    }
    Root root;
    root.path = normal;
    root.descriptor = descriptor;
    root.flag = flag;
    if (char* real = ::realpath(normal.c_str(), nullptr); real != nullptr) {
      if (normal != real) root.canonical = real;
      std::free(real);
    }
    roots.push_back(std::move(root));
  }
  return FileRoots(false, {flag}, std::move(roots));
}

absl::StatusOr<FileRoots> FileRoots::Union(const FileRoots& first, const FileRoots& second) {
  if (first.unrestricted_ || second.unrestricted_) return Unrestricted();
  std::vector<std::string> flags = first.flags_;
  for (const std::string& flag : second.flags_) {
    if (std::find(flags.begin(), flags.end(), flag) == flags.end()) flags.push_back(flag);
  }
  std::vector<Root> roots;
  for (const FileRoots* part : {&first, &second}) {
    for (const Root& root : part->roots_) {
      Root copy = root;
      copy.descriptor = ::fcntl(root.descriptor, F_DUPFD_CLOEXEC, 0);
      if (copy.descriptor < 0) {
        const int error = errno;
        for (Root& opened : roots) CloseDescriptor(opened.descriptor);
        return absl::InternalError(absl::StrCat("cannot duplicate the descriptor of ",
                                                Quote(root.path), ": ", std::strerror(error)));
      }
      roots.push_back(std::move(copy));
    }
  }
  return FileRoots(false, std::move(flags), std::move(roots));
}

bool FileRoots::unrestricted() const { return unrestricted_; }

std::string FileRoots::Describe() const {
  if (unrestricted_) return "anywhere";
  if (roots_.empty()) {
    return absl::StrCat("nowhere (no ", absl::StrJoin(flags_, " or "), " given)");
  }
  std::string text = "beneath ";
  for (size_t index = 0; index < roots_.size(); ++index) {
    if (index > 0) text += ", ";
    text += roots_[index].path;
    if (index + 1 == roots_.size() || roots_[index + 1].flag != roots_[index].flag) {
      absl::StrAppend(&text, " (", roots_[index].flag, ")");
    }
  }
  return text;
}

absl::Status FileRoots::Refused(const std::string& path, const std::string& why) const {
  if (roots_.empty()) {
    return absl::PermissionDeniedError(
        absl::StrCat(Quote(path), " is refused: this node opens no files for jobs (no ",
                     absl::StrJoin(flags_, " or "), " given)"));
  }
  return absl::PermissionDeniedError(absl::StrCat(
      Quote(path), " is not beneath a root of this node",
      why.empty() ? "" : absl::StrCat(" (", why, ")"), ": it opens files only ", Describe()));
}

absl::StatusOr<int> FileRoots::OpenBeneath(const std::string& path, int flags,
                                           const std::string& named) const {
  if (path.empty() || path[0] != '/') return Refused(named, "it is not an absolute path");
  const std::string normal = WithoutEmptyComponents(path);
  bool matched = false;
  int refusal = 0;      // EXDEV or ELOOP, when a root refused it
  int other_error = 0;  // the first other error
  bool not_found = false;
  for (const Root& root : roots_) {
    for (const std::string* spelling : {&root.path, &root.canonical}) {
      std::optional<std::string> relative = Remainder(*spelling, normal);
      if (!relative.has_value()) continue;
      matched = true;
      const int descriptor = OpenBeneathAnyWay(root.descriptor, *relative, flags);
      if (descriptor >= 0) return descriptor;
      const int error = -descriptor;
      if (error == EXDEV || error == ELOOP) {
        if (refusal == 0) refusal = error;
      } else if (error == ENOENT) {
        not_found = true;
      } else if (other_error == 0) {
        other_error = error;
      }
    }
  }
  if (!matched) return Refused(named, "");
  if (refusal == EXDEV) return Refused(named, "it leaves the root through '..'");
  if (refusal == ELOOP) {
    return Refused(named, "a component of it is a symbolic link, which is not followed");
  }
  if (other_error == ENOTDIR) {
    return absl::FailedPreconditionError(
        absl::StrCat(Quote(path), ": a component of it is no directory"));
  }
  if (other_error != 0) return OpenError(path, other_error);
  (void)not_found;
  return OpenError(path, ENOENT);
}

absl::StatusOr<int> FileRoots::OpenDescriptor(const std::string& path, int flags) const {
  if (!unrestricted_) return OpenBeneath(path, flags, path);
  const int descriptor = ::open(path.c_str(), flags | O_CLOEXEC);
  if (descriptor < 0) return OpenError(path, errno);
  return descriptor;
}

absl::StatusOr<ReadableFile> FileRoots::OpenForReading(const std::string& path) const {
  // O_NONBLOCK: opening a FIFO does not wait for a writer (it is refused below).
  absl::StatusOr<int> opened = OpenDescriptor(path, O_RDONLY | O_NONBLOCK | O_NOCTTY);
  if (!opened.ok()) return opened.status();
  const int descriptor = *opened;
  struct stat info;
  if (::fstat(descriptor, &info) != 0) {
    const int error = errno;
    CloseDescriptor(descriptor);
    return absl::ErrnoToStatus(error, absl::StrCat("cannot stat ", Quote(path)));
  }
  if (!S_ISREG(info.st_mode)) {
    CloseDescriptor(descriptor);
    return absl::InvalidArgumentError(
        absl::StrCat(Quote(path), " is not a regular file (it is ", KindOf(info.st_mode), ")"));
  }
  return ReadableFile(descriptor, static_cast<int64_t>(info.st_size), path);
}

absl::StatusOr<WritableDirectory> FileRoots::OpenForWriting(const std::string& path) const {
  const size_t slash = path.rfind('/');
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  if (name.empty() || name == "." || name == "..") {
    return absl::InvalidArgumentError(absl::StrCat(Quote(path), " names no file to write"));
  }
  std::string directory = slash == std::string::npos ? "." : path.substr(0, slash);
  if (directory.empty()) directory = "/";
  if (!unrestricted_ && (path.empty() || path[0] != '/')) {
    return Refused(path, "it is not an absolute path");
  }
  const int flags = O_RDONLY | O_DIRECTORY;
  int descriptor = -1;
  if (unrestricted_) {
    descriptor = ::open(directory.c_str(), flags | O_CLOEXEC);
    if (descriptor < 0) {
      const int error = errno;
      if (error == ENOTDIR) {
        return absl::InvalidArgumentError(absl::StrCat("the directory ", Quote(directory), " of ",
                                                       Quote(path), " is not a directory"));
      }
      return OpenError(directory, error);
    }
  } else {
    absl::StatusOr<int> opened = OpenBeneath(directory, flags, path);
    if (!opened.ok()) {
      if (opened.status().code() == absl::StatusCode::kPermissionDenied) return opened.status();
      if (opened.status().code() == absl::StatusCode::kFailedPrecondition) {  // ENOTDIR
        return absl::InvalidArgumentError(absl::StrCat("the directory ", Quote(directory), " of ",
                                                       Quote(path), " is not a directory"));
      }
      return absl::Status(opened.status().code(), absl::StrCat("the directory of ", Quote(path),
                                                               ": ", opened.status().message()));
    }
    descriptor = *opened;
  }
  return WritableDirectory(descriptor, directory, name);
}

absl::Status FileRoots::CheckBeneath(const std::string& path) const {
  if (unrestricted_) return absl::OkStatus();
  if (path.empty() || path[0] != '/') return Refused(path, "it is not an absolute path");
  for (absl::string_view component : absl::StrSplit(path, '/')) {
    if (component == "..") return Refused(path, "it has a '..' component");
  }
  const std::string normal = WithoutEmptyComponents(path);
  for (const Root& root : roots_) {
    if (Remainder(root.path, normal).has_value() || Remainder(root.canonical, normal).has_value()) {
      return absl::OkStatus();
    }
  }
  return Refused(path, "");
}

}  // namespace loom
