// FileRoots::ListFiles: the regular files a path, a directory or a pattern names, beneath the
// roots (the token datasets' paths).

#include <dirent.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/file_roots.h"

namespace loom {
namespace {

bool HasPatternCharacter(const std::string& text) {
  return text.find_first_of("*?[") != std::string::npos;
}

// The names of the regular files in the open directory `descriptor` (taken over and closed) that
// match `pattern` (a leading '.' only explicitly), or with an empty pattern that do not start with
// '.', sorted.
absl::StatusOr<std::vector<std::string>> RegularFilesIn(int descriptor, const std::string& pattern,
                                                        const std::string& directory) {
  DIR* stream = ::fdopendir(descriptor);
  if (stream == nullptr) {
    const int error = errno;
    ::close(descriptor);
    return absl::ErrnoToStatus(error, absl::StrCat("cannot list '", directory, "'"));
  }
  std::vector<std::string> names;
  errno = 0;
  while (const dirent* entry = ::readdir(stream)) {
    const std::string name = entry->d_name;
    if (name.empty() || name == "." || name == "..") continue;
    if (pattern.empty() ? name[0] == '.'
                        : ::fnmatch(pattern.c_str(), name.c_str(), FNM_PERIOD) != 0) {
      continue;
    }
    struct stat info;
    if (::fstatat(::dirfd(stream), name.c_str(), &info, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (S_ISREG(info.st_mode)) names.push_back(name);
    errno = 0;
  }
  const int error = errno;
  ::closedir(stream);
  if (error != 0) return absl::ErrnoToStatus(error, absl::StrCat("cannot list '", directory, "'"));
  std::sort(names.begin(), names.end());
  return names;
}

std::string Joined(const std::string& directory, const std::string& name) {
  if (directory.empty()) return name;
  return directory.back() == '/' ? directory + name : absl::StrCat(directory, "/", name);
}

}  // namespace

absl::StatusOr<std::vector<std::string>> FileRoots::ListFiles(const std::string& path) const {
  const size_t slash = path.rfind('/');
  const std::string last = slash == std::string::npos ? path : path.substr(slash + 1);
  const std::string parent = slash == std::string::npos ? "" : path.substr(0, slash + 1);
  if (HasPatternCharacter(parent)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", path, "': only the last component of a path may hold a pattern ('*', '?', '[')"));
  }
  std::string directory = path;
  std::string pattern;
  if (HasPatternCharacter(last)) {
    directory = parent.empty() ? "." : parent;
    pattern = last;
  }
  absl::StatusOr<int> opened = OpenDescriptor(directory, O_RDONLY | O_NONBLOCK | O_NOCTTY);
  if (!opened.ok()) return opened.status();
  struct stat info;
  if (::fstat(*opened, &info) != 0) {
    const int error = errno;
    ::close(*opened);
    return absl::ErrnoToStatus(error, absl::StrCat("cannot stat '", directory, "'"));
  }
  if (pattern.empty() && S_ISREG(info.st_mode)) {
    ::close(*opened);
    return std::vector<std::string>{path};
  }
  if (!S_ISDIR(info.st_mode)) {
    ::close(*opened);
    return absl::InvalidArgumentError(
        absl::StrCat("'", directory, "' is neither a regular file nor a directory"));
  }
  absl::StatusOr<std::vector<std::string>> names = RegularFilesIn(*opened, pattern, directory);
  if (!names.ok()) return names.status();
  if (names->empty()) {
    return absl::NotFoundError(
        pattern.empty()
            ? absl::StrCat("directory '", path, "' holds no regular file (names starting with '.' ",
                           "are left out)")
            : absl::StrCat("'", path, "' matches no regular file"));
  }
  std::vector<std::string> files;
  files.reserve(names->size());
  for (const std::string& name : *names) {
    files.push_back(pattern.empty() ? Joined(path, name) : Joined(parent, name));
  }
  return files;
}

}  // namespace loom
