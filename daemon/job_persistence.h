#ifndef LOOM_DAEMON_JOB_PERSISTENCE_H_
#define LOOM_DAEMON_JOB_PERSISTENCE_H_

// A job's record in the data directory's form (StoredJob, proto/loom/daemon/stored_job.proto) and
// back: what JobManager writes to its store (job_store.h) whenever a job changes, and the record
// it restores from there when the coordinator starts again. Fetched tensors are never stored:
// they are held in memory only.

#include <memory>

#include "daemon/job_record.h"
#include "proto/loom/daemon/stored_job.pb.h"

namespace loom::daemon {

// The record as written to the store: its number, info, events (packed ones included; fetched
// tensors never), next sequence and its trace's state. Without `with_step_events` only its
// non-step events are written (a running job's progress).
StoredJob StoredJobOf(const JobRecord& record, bool with_step_events);

// The record of a job restored from the store (`restored`; its queue position cleared, and its
// fetched tensors, if it streamed them, released).
std::shared_ptr<JobRecord> RestoredRecordOf(StoredJob stored);

}  // namespace loom::daemon

#endif  // LOOM_DAEMON_JOB_PERSISTENCE_H_
