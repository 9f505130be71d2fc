// The data directory's writes of the jobs' records (JobStoreWriter, off the lock) and their
// restore when the coordinator starts.

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/job_checkpoint.h"
#include "daemon/job_history.h"
#include "daemon/job_manager.h"
#include "daemon/job_persistence.h"
#include "daemon/metrics.h"
#include "glog/logging.h"

namespace loom::daemon {

void JobManager::Write(std::string what, JobStoreWriter::Write write) {
  last_write_ = writer_->Enqueue(std::move(what), std::move(write));
}

void JobManager::Persist(JobRecord* record, bool with_step_events) {
  if (writer_ == nullptr) return;
  record->persisted = absl::Now();
  StoredJob stored = StoredJobOf(*record, with_step_events);
  Write(absl::StrCat("job ", record->id),
        [stored = std::move(stored)](const JobStore& store) { return store.Save(stored); });
}

void JobManager::Restore() {
  JobStore::Contents contents = options_.store->Load();
  for (const std::string& problem : contents.problems) {
    LOG(WARNING) << "data directory: skipped " << problem;
  }
  last_number_ = contents.last_number;
  for (StoredJob& stored : contents.jobs) {
    std::shared_ptr<JobRecord> record = RestoredRecordOf(std::move(stored));
    records_[record->number] = record;
    number_of_id_[record->id] = record->number;
    if (IsTerminal(record->info.state())) {
      PackEventsOf(record.get());
      finished_.push_back(record->number);
    } else {
      // It was pending or running when the coordinator stopped: nothing runs it any more, and
      // the parts of a checkpoint it was saving will not be assembled.
      if (!record->info.checkpoint_path().empty()) {
        for (const std::string& removed :
             RemoveLeftoverCheckpointFiles(options_.checkpoint_roots, record->info.checkpoint_path())) {
          LOG(INFO) << "job " << record->id << ": removed " << removed
                    << ", left by its interrupted checkpoint";
        }
      }
      Finish(record.get(), v1::JOB_STATE_FAILED,
             absl::AbortedError(absl::StrCat(
                 "job '", record->id, "' was ", JobStateLabel(record->info.state()),
                 " when the coordinator stopped, and did not finish (submit it again)")));
    }
  }
  ForgetOldFinishedJobs();
  LOG(INFO) << "restored " << records_.size() << " jobs from " << options_.store->jobs_directory()
            << "; the next is job-" << last_number_ + 1;
}

}  // namespace loom::daemon
