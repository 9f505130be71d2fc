#include "daemon/job_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "core/file_contents.h"

namespace loom::daemon {
namespace {

constexpr char kRecordSuffix[] = ".binpb";
constexpr char kPlanSuffix[] = ".plan.binpb";
constexpr char kTraceSuffix[] = ".trace.json";
constexpr char kLastNumberFile[] = "last-number";
// In a temporary file's name: "<name>.tmp-XXXXXX" (and ".tmp", as older versions named them).
constexpr char kTemporaryInfix[] = ".tmp-";

std::string ErrnoText() { return std::strerror(errno); }

// A failed write in the jobs directory `directory`: RESOURCE_EXHAUSTED when the disk (or the
// user's quota, or the process's file-size limit) is full, UNAVAILABLE otherwise; the message
// names the directory, the file and the system's reason.
absl::Status StoreError(int error, const std::string& directory, absl::string_view what,
                        absl::string_view file) {
  const bool full = error == ENOSPC || error == EDQUOT || error == EFBIG;
  return absl::Status(full ? absl::StatusCode::kResourceExhausted : absl::StatusCode::kUnavailable,
                      absl::StrCat("the data directory '", directory, "' cannot keep ", file, ": ",
                                   what, ": ", std::strerror(error)));
}

// Writes `bytes` to `directory`/`name`: to a new temporary file of a unique name (O_EXCL), synced,
// renamed over the old one, and the directory synced, so that a crash leaves the old or the new
// version, never half of one, and a rename that was reported is kept.
absl::Status WriteAtomically(const std::string& directory, const std::string& name,
                             const std::string& bytes) {
  const std::string path = (std::filesystem::path(directory) / name).string();
  std::string temporary = absl::StrCat(path, kTemporaryInfix, "XXXXXX");
  const int descriptor = ::mkostemp(temporary.data(), O_CLOEXEC);
  if (descriptor < 0) return StoreError(errno, directory, "cannot create a file", name);
  auto fail = [&](absl::string_view what) {
    const int error = errno;
    ::close(descriptor);
    ::unlink(temporary.c_str());
    return StoreError(error, directory, what, name);
  };
  size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t count = ::write(descriptor, bytes.data() + written, bytes.size() - written);
    if (count < 0 && errno == EINTR) continue;
    if (count == 0) errno = ENOSPC;  // write makes no progress: a full device
    if (count <= 0) return fail("cannot write");
    written += static_cast<size_t>(count);
  }
  if (::fchmod(descriptor, 0640) != 0) return fail("cannot set its mode");
  if (::fsync(descriptor) != 0) return fail("cannot sync");
  if (::close(descriptor) != 0) {
    const int error = errno;
    ::unlink(temporary.c_str());
    return StoreError(error, directory, "cannot close", name);
  }
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(temporary.c_str());
    return StoreError(error, directory, "cannot rename its temporary file", name);
  }
  // The rename itself is durable only once the directory is synced.
  const int directory_descriptor = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (directory_descriptor < 0)
    return StoreError(errno, directory, "cannot open the directory", name);
  const int synced = ::fsync(directory_descriptor);
  const int error = errno;
  ::close(directory_descriptor);
  if (synced != 0) return StoreError(error, directory, "cannot sync the directory", name);
  return absl::OkStatus();
}

// The number of a record file's name ("job-12.binpb" -> 12); 0 for any other name.
int64_t RecordNumber(absl::string_view name) {
  if (!absl::ConsumePrefix(&name, "job-") || !absl::ConsumeSuffix(&name, kRecordSuffix)) return 0;
  int64_t number = 0;
  if (!absl::SimpleAtoi(name, &number) || number <= 0) return 0;
  return number;
}

}  // namespace

absl::StatusOr<JobStore> JobStore::Open(const std::string& directory) {
  const std::string jobs = (std::filesystem::path(directory) / "jobs").string();
  std::error_code error;
  std::filesystem::create_directories(jobs, error);
  if (error) {
    return absl::InvalidArgumentError(
        absl::StrCat("--data-dir: cannot create '", jobs, "': ", error.message()));
  }
  if (::access(jobs.c_str(), W_OK | X_OK) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--data-dir: cannot write in '", jobs, "': ", ErrnoText()));
  }
  // Temporary files a crash left behind (the directory is locked: no write of another loomd).
  for (const auto& entry : std::filesystem::directory_iterator(jobs, error)) {
    const std::string name = entry.path().filename().string();
    if (absl::StrContains(name, kTemporaryInfix) || absl::EndsWith(name, ".tmp")) {
      std::error_code ignored;
      std::filesystem::remove(entry.path(), ignored);
    }
  }
  return JobStore(jobs);
}

JobStore::Contents JobStore::Load() const {
  Contents contents;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(jobs_directory_, error)) {
    const std::string name = entry.path().filename().string();
    const int64_t number = RecordNumber(name);
    if (number == 0) continue;  // plans, traces, temporary files, anything else
    absl::StatusOr<std::string> bytes = ReadFileContents(entry.path().string());
    StoredJob job;
    if (!bytes.ok()) {
      contents.problems.push_back(std::string(bytes.status().message()));
    } else if (!job.ParseFromString(*bytes) || job.number() != number ||
               job.info().job_id() != absl::StrCat("job-", number)) {
      contents.problems.push_back(
          absl::StrCat("'", entry.path().string(), "' is not a stored job of number ", number));
    } else {
      contents.last_number = std::max(contents.last_number, number);
      contents.jobs.push_back(std::move(job));
    }
  }
  if (error) {
    contents.problems.push_back(
        absl::StrCat("cannot list '", jobs_directory_, "': ", error.message()));
  }
  std::sort(contents.jobs.begin(), contents.jobs.end(),
            [](const StoredJob& a, const StoredJob& b) { return a.number() < b.number(); });
  const std::string last_path = (std::filesystem::path(jobs_directory_) / kLastNumberFile).string();
  if (absl::StatusOr<std::string> text = ReadFileContents(last_path); text.ok()) {
    int64_t last = 0;
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &last) && last >= 0) {
      contents.last_number = std::max(contents.last_number, last);
    } else {
      contents.problems.push_back(absl::StrCat("'", last_path, "' does not hold a number"));
    }
  }
  return contents;
}

absl::Status JobStore::Save(const StoredJob& job) const {
  return WriteAtomically(jobs_directory_, NameOf(job.number(), kRecordSuffix),
                         job.SerializeAsString());
}

absl::Status JobStore::SaveLastNumber(int64_t number) const {
  return WriteAtomically(jobs_directory_, kLastNumberFile, absl::StrCat(number, "\n"));
}

absl::Status JobStore::SavePlan(int64_t number, const std::string& plan) const {
  return WriteAtomically(jobs_directory_, NameOf(number, kPlanSuffix), plan);
}

absl::StatusOr<v1::GetPlanResponse> JobStore::LoadPlan(int64_t number) const {
  const std::string path = PathOf(number, kPlanSuffix);
  absl::StatusOr<std::string> bytes = ReadFileContents(path);
  if (!bytes.ok()) return bytes.status();
  v1::GetPlanResponse plan;
  if (!plan.ParseFromString(*bytes)) {
    return absl::DataLossError(absl::StrCat("'", path, "' is not a stored plan"));
  }
  return plan;
}

absl::Status JobStore::SaveTrace(int64_t number, const std::string& chrome_trace_json) const {
  return WriteAtomically(jobs_directory_, NameOf(number, kTraceSuffix), chrome_trace_json);
}

absl::StatusOr<FilePart> JobStore::LoadTracePart(int64_t number, int64_t offset,
                                                 int64_t length) const {
  return ReadFilePart(PathOf(number, kTraceSuffix), offset, length);
}

void JobStore::Remove(int64_t number) const {
  for (const char* suffix : {kRecordSuffix, kPlanSuffix, kTraceSuffix}) {
    std::error_code ignored;
    std::filesystem::remove(PathOf(number, suffix), ignored);
  }
}

std::string JobStore::NameOf(int64_t number, const char* suffix) {
  return absl::StrCat("job-", number, suffix);
}

std::string JobStore::PathOf(int64_t number, const char* suffix) const {
  return (std::filesystem::path(jobs_directory_) / NameOf(number, suffix)).string();
}

}  // namespace loom::daemon
