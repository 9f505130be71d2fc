#include "daemon/job_history.h"

#include <utility>

#include "daemon/packed_events.h"
#include "glog/logging.h"

namespace loom::daemon {

bool TraceToKeep(const JobRecord& record) {
  return record.trace && record.trace_error.empty() && !record.restored && !record.trace_kept;
}

std::vector<std::string> TakeTraceEvents(JobRecord* record) {
  std::vector<std::string> event_lists;
  for (auto& [node, events] : record->trace_events) {
    // A node that ended before its last part (it failed) left events cut anywhere: left out.
    if (record->traced_nodes.contains(node)) event_lists.push_back(std::move(events));
  }
  record->trace_events.clear();
  return event_lists;
}

void DropOldTraces(const JobRecord& newest, const std::deque<int64_t>& finished,
                   const std::map<int64_t, std::shared_ptr<JobRecord>>& records,
                   int64_t max_kept_trace_bytes) {
  std::vector<JobRecord*> kept;  // the oldest first
  int64_t bytes = newest.packed_trace == nullptr ? 0 : newest.packed_trace->packed_bytes();
  for (int64_t number : finished) {
    auto found = records.find(number);
    if (found == records.end() || found->second.get() == &newest ||
        found->second->packed_trace == nullptr) {
      continue;
    }
    kept.push_back(found->second.get());
    bytes += found->second->packed_trace->packed_bytes();
  }
  for (JobRecord* record : kept) {
    if (bytes <= max_kept_trace_bytes) return;
    bytes -= record->packed_trace->packed_bytes();
    record->packed_trace.reset();
    record->trace_dropped = true;
    LOG(INFO) << "dropped the trace of job " << record->id << " (--max-kept-trace-bytes "
              << max_kept_trace_bytes << ")";
  }
}

void PackEventsOf(JobRecord* record) {
  // Once, when the job ends. An event appended later (none is) would stay in `events`, which
  // every reader merges with the packed ones.
  if (record->packed_events != nullptr) return;
  record->packed_events = std::make_shared<const std::string>(PackEvents(&record->events));
}

}  // namespace loom::daemon
