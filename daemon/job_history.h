#ifndef LOOM_DAEMON_JOB_HISTORY_H_
#define LOOM_DAEMON_JOB_HISTORY_H_

// What a job's record keeps once the job ended, apart from the JobManager's state: whether its
// trace is still to be merged and kept, the nodes' trace events taken to merge, the packed traces
// of the oldest finished jobs dropped under --max-kept-trace-bytes, and its events packed. The
// records are guarded by the JobManager's mutex: callers hold it (JobManager's history,
// job_manager_history.cc).

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "daemon/job_record.h"

namespace loom::daemon {

// Whether the record's trace is still to be merged and kept (a traced job, every node's trace
// complete, not kept yet).
bool TraceToKeep(const JobRecord& record);

// The nodes' trace events, moved out of the record, to be merged into one Chrome trace document.
std::vector<std::string> TakeTraceEvents(JobRecord* record);

// Without a store: drops the packed traces of the oldest finished jobs (`finished`, in the order
// they ended, numbers of `records`) while all of them and `newest`'s take more than
// `max_kept_trace_bytes` (never `newest`'s).
void DropOldTraces(const JobRecord& newest, const std::deque<int64_t>& finished,
                   const std::map<int64_t, std::shared_ptr<JobRecord>>& records,
                   int64_t max_kept_trace_bytes);

// A job that ended keeps its events (but the fetched tensors) packed (packed_events.h).
void PackEventsOf(JobRecord* record);

}  // namespace loom::daemon

#endif  // LOOM_DAEMON_JOB_HISTORY_H_
