#ifndef LOOM_DAEMON_JOB_STORE_H_
#define LOOM_DAEMON_JOB_STORE_H_

// The coordinator's job history on disk (loomd --data-dir): JobStore saves and loads each job's
// StoredJob, plan and trace, and the last job number, under <directory>/jobs/, every write atomic.
// The JobManager restores its jobs from it at start and writes to it through a JobStoreWriter.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/file_contents.h"
#include "proto/loom/daemon/stored_job.pb.h"
#include "proto/loom/v1/job_service.pb.h"

namespace loom::daemon {

// The coordinator's job history on disk (loomd --data-dir), so that jobs, their events, plans
// and traces, and the job numbering survive a restart. Under <directory>/jobs/:
//   job-<number>.binpb       the StoredJob, rewritten (atomically) at every state change
//   job-<number>.plan.binpb  its GetPlanResponse, written once at submission
//   job-<number>.trace.json  its merged Chrome trace, when it was traced
//   last-number              the last job number handed out (ids are never reused)
// Every write goes to a new temporary file of a unique name that is synced and renamed over the
// old one, then the directory is synced, so a crash leaves the old or the new version, never half
// of one, and a write reported done survives a crash. A write that fails is RESOURCE_EXHAUSTED
// when the disk, quota or file-size limit is full, UNAVAILABLE otherwise, naming the directory,
// the file and the system's reason (never the bytes).
//
// Not thread-safe: the JobManager's JobStoreWriter makes every write, on its one thread; reads
// (Load at start, and the plans and traces of jobs from before a restart) touch no file a queued
// write changes.
class JobStore {
 public:
  // Creates <directory>/jobs when missing, and removes the temporary files a crash left there.
  // INVALID_ARGUMENT naming the directory when it cannot be created or written.
  static absl::StatusOr<JobStore> Open(const std::string& directory);

  struct Contents {
    std::vector<StoredJob> jobs;  // by number
    int64_t last_number = 0;
    // Files that could not be read (each named, with why); they are left in place and skipped.
    std::vector<std::string> problems;
  };
  Contents Load() const;

  absl::Status Save(const StoredJob& job) const;
  absl::Status SaveLastNumber(int64_t number) const;
  // `plan`: a serialized v1::GetPlanResponse (plan_response.h).
  absl::Status SavePlan(int64_t number, const std::string& plan) const;
  absl::StatusOr<v1::GetPlanResponse> LoadPlan(int64_t number) const;
  absl::Status SaveTrace(int64_t number, const std::string& chrome_trace_json) const;
  // The trace's bytes [offset, offset + length) (fewer at its end), and its size.
  absl::StatusOr<FilePart> LoadTracePart(int64_t number, int64_t offset, int64_t length) const;
  // Deletes the job's files (a forgotten job); missing files are not an error.
  void Remove(int64_t number) const;

  const std::string& jobs_directory() const { return jobs_directory_; }

 private:
  explicit JobStore(std::string jobs_directory) : jobs_directory_(std::move(jobs_directory)) {}
  // "job-<number><suffix>", and the same in the jobs directory.
  static std::string NameOf(int64_t number, const char* suffix);
  std::string PathOf(int64_t number, const char* suffix) const;

  std::string jobs_directory_;
};

}  // namespace loom::daemon

#endif  // LOOM_DAEMON_JOB_STORE_H_
