#include "device/host_memory.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/file_contents.h"

namespace loom {
namespace {

std::optional<std::string> ReadFile(const std::string& path) {
  absl::StatusOr<std::string> contents = ReadFileContents(path);
  if (!contents.ok()) return std::nullopt;
  return *std::move(contents);
}

// "MemTotal:       24731708 kB" -> bytes.
std::optional<int64_t> ParseMemTotal(absl::string_view meminfo) {
  for (absl::string_view line : absl::StrSplit(meminfo, '\n')) {
    if (!absl::ConsumePrefix(&line, "MemTotal:")) continue;
    line = absl::StripAsciiWhitespace(line);
    const bool kibibytes = absl::ConsumeSuffix(&line, "kB");
    int64_t value = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &value) || value <= 0) {
      return std::nullopt;
    }
    return kibibytes ? value * 1024 : value;
  }
  return std::nullopt;
}

// A memory cgroup's limit file: a byte count, or "max" (v2) for none.
std::optional<int64_t> ParseLimit(absl::string_view text) {
  int64_t value = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &value) || value <= 0) {
    return std::nullopt;
  }
  return value;
}

// The limit files that apply to a process in cgroup `path` (its own cgroup's, then its
// ancestors'), under the hierarchy mounted at `mount`.
std::vector<std::string> LimitFiles(const std::string& mount, absl::string_view path,
                                    absl::string_view file_name) {
  std::vector<std::string> files;
  std::string cgroup(absl::StripSuffix(path, "/"));
  while (true) {
    files.push_back(absl::StrCat(mount, cgroup, "/", file_name));
    if (cgroup.empty()) break;
    const size_t slash = cgroup.rfind('/');
    cgroup.resize(slash == std::string::npos ? 0 : slash);
  }
  return files;
}

}  // namespace

absl::StatusOr<HostMemory> ReadHostMemory(absl::string_view root) {
  const std::string meminfo_path = absl::StrCat(root, "/proc/meminfo");
  std::optional<std::string> meminfo = ReadFile(meminfo_path);
  if (!meminfo.has_value()) {
    return absl::UnavailableError(absl::StrCat("cannot read ", meminfo_path));
  }
  std::optional<int64_t> total = ParseMemTotal(*meminfo);
  if (!total.has_value()) {
    return absl::UnavailableError(absl::StrCat(meminfo_path, " has no MemTotal line"));
  }
  HostMemory memory{*total, "MemTotal of /proc/meminfo"};

  // "0::/system.slice/loomd.service" (v2), "4:memory:/docker/abc" (v1).
  std::vector<std::string> limit_files;
  const std::string cgroups = ReadFile(absl::StrCat(root, "/proc/self/cgroup")).value_or("");
  for (absl::string_view line : absl::StrSplit(cgroups, '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> fields = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (fields.size() != 3) continue;
    if (fields[0] == "0" && fields[1].empty()) {
      for (std::string& file :
           LimitFiles(absl::StrCat(root, "/sys/fs/cgroup"), fields[2], "memory.max")) {
        limit_files.push_back(std::move(file));
      }
    }
    for (absl::string_view controller : absl::StrSplit(fields[1], ',')) {
      if (controller != "memory") continue;
      for (std::string& file : LimitFiles(absl::StrCat(root, "/sys/fs/cgroup/memory"), fields[2],
                                          "memory.limit_in_bytes")) {
        limit_files.push_back(std::move(file));
      }
    }
  }
  for (const std::string& file : limit_files) {
    std::optional<std::string> text = ReadFile(file);
    if (!text.has_value()) continue;
    std::optional<int64_t> limit = ParseLimit(*text);
    if (limit.has_value() && *limit < memory.bytes) {
      memory.bytes = *limit;
      memory.source = file.substr(root.size());
    }
  }
  return memory;
}

int64_t DefaultCpuMemoryBudget(int64_t host_bytes, int devices) {
  return std::max<int64_t>(1, host_bytes / 4 * 3 / std::max(devices, 1));
}

int64_t DefaultHostMemoryBudget(int64_t host_bytes, bool gpus) {
  return std::max<int64_t>(1, gpus ? host_bytes / 2 : host_bytes / 8);
}

}  // namespace loom
