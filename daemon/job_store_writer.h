#ifndef LOOM_DAEMON_JOB_STORE_WRITER_H_
#define LOOM_DAEMON_JOB_STORE_WRITER_H_

// JobStoreWriter: the JobManager's queue of writes to its JobStore, made in order on a thread of
// their own, so that none is made under the manager's mutex and no API call waits for a disk. Each
// write gets a ticket that a caller may wait for (WaitFor), and learn whether it failed
// (WaitForWrites: a submission fails when its job's record could not be kept).

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "daemon/job_store.h"

namespace loom::daemon {

// Makes a JobStore's writes on a thread of its own, in the order they were queued, so that the
// JobManager queues them under its mutex and no API call waits for a disk's fsync. A write that
// fails is logged (naming what it wrote) and does not stop the later ones; the failures of the
// last kKeptFailures writes are kept for WaitForWrites.
class JobStoreWriter {
 public:
  using Write = absl::AnyInvocable<absl::Status(const JobStore& store)>;

  // `store` must outlive the writer.
  explicit JobStoreWriter(const JobStore* store);
  // Makes every queued write, then joins.
  ~JobStoreWriter();
  JobStoreWriter(const JobStoreWriter&) = delete;
  JobStoreWriter& operator=(const JobStoreWriter&) = delete;

  // Queues `write`; `what` names it in the log when it fails ("job-3"). Returns its ticket, for
  // WaitFor. Never waits for a write.
  uint64_t Enqueue(std::string what, Write write);

  // Returns once the write with `ticket`, and every one queued before it, was made (or failed).
  void WaitFor(uint64_t ticket);
  // The same for `last`; then the first failure among the writes with tickets `first`..`last`
  // (the store's error, prefixed with what was written), or OK when all were made.
  absl::Status WaitForWrites(uint64_t first, uint64_t last);

  // How many of the latest failures are kept for WaitForWrites.
  static constexpr size_t kKeptFailures = 1024;

 private:
  struct Queued {
    std::string what;
    Write write;
  };
  void Loop();

  const JobStore* const store_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Queued> queue_;  // guarded by mutex_
  uint64_t queued_ = 0;       // tickets handed out; guarded by mutex_
  uint64_t done_ = 0;         // writes made; guarded by mutex_
  bool stopping_ = false;     // guarded by mutex_
  // The failed writes by ticket, the latest kKeptFailures (guarded by mutex_).
  std::map<uint64_t, absl::Status> failures_;
  std::thread thread_;
};

}  // namespace loom::daemon

#endif  // LOOM_DAEMON_JOB_STORE_WRITER_H_
