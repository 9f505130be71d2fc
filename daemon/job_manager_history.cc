// The jobs' history: the reads of what is kept of them (plans, traces, events), their events and
// state changes, their ends, the traces kept, and the finished jobs remembered.

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "daemon/compressed_message.h"
#include "daemon/job_history.h"
#include "daemon/job_manager.h"
#include "daemon/packed_events.h"
#include "daemon/plan_response.h"
#include "glog/logging.h"
#include "google/protobuf/util/time_util.h"
#include "rpc/grpc_status.h"
#include "runtime/chrome_trace.h"

namespace loom::daemon {
namespace {

using google::protobuf::util::TimeUtil;

}  // namespace

absl::StatusOr<v1::GetPlanResponse> JobManager::GetPlan(const std::string& job_id,
                                                        std::optional<int> node) const {
  int64_t number = 0;
  std::shared_ptr<const compiler::CompiledJob> compiled;
  std::shared_ptr<const std::string> plan_bytes;
  {
    absl::MutexLock lock(&mutex_);
    JobRecord* record = Find(job_id);
    if (record == nullptr) return absl::NotFoundError(absl::StrCat("no job '", job_id, "'"));
    number = record->number;
    compiled = record->compiled;
    plan_bytes = record->plan_bytes;
  }
  auto check_node = [&](int nodes) {
    if (!node.has_value() || (*node >= 0 && *node < nodes)) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("job '", job_id, "' has no node ", *node,
                                                   ": its plan spans ", nodes,
                                                   nodes == 1 ? " node" : " nodes"));
  };
  // Copied or inflated outside the lock (seconds for a plan of a million tasks).
  if (compiled != nullptr) {
    if (absl::Status valid = check_node(static_cast<int>(compiled->result.node_plans.size()));
        !valid.ok()) {
      return valid;
    }
    return PlanResponseOf(*compiled, node);
  }
  v1::GetPlanResponse response;
  if (options_.store == nullptr) {
    if (plan_bytes == nullptr || !ParseCompressedMessage(*plan_bytes, &response)) {
      return absl::InternalError(absl::StrCat("the kept plan of job '", job_id, "' is corrupt"));
    }
  } else {
    // In the data directory (written before the job's id reached its client), read outside the
    // lock.
    absl::StatusOr<v1::GetPlanResponse> stored = options_.store->LoadPlan(number);
    if (!stored.ok()) return StoredReadError(job_id, "plan", stored.status());
    response = *std::move(stored);
  }
  if (absl::Status valid = check_node(response.node_plans_size()); !valid.ok()) return valid;
  if (node.has_value()) KeepOnlyNodePlan(*node, &response);
  return response;
}

absl::StatusOr<v1::GetTraceResponse> JobManager::GetTrace(const std::string& job_id, int64_t offset,
                                                          int64_t max_bytes) const {
  v1::GetTraceResponse response;
  int64_t number = 0;
  bool stored = false;
  uint64_t written = 0;
  std::shared_ptr<const PackedTrace> packed;
  {
    absl::MutexLock lock(&mutex_);
    JobRecord* record = Find(job_id);
    if (record == nullptr) return absl::NotFoundError(absl::StrCat("no job '", job_id, "'"));
    if (!record->trace) {
      return absl::FailedPreconditionError(absl::StrCat(
          "job '", job_id, "' was submitted without trace (loomctl submit --trace FILE)"));
    }
    if (!IsTerminal(record->info.state())) {
      return absl::FailedPreconditionError(absl::StrCat("job '", job_id, "' is ",
                                                        v1::JobState_Name(record->info.state()),
                                                        ": its trace is there once it ends"));
    }
    if (!record->trace_error.empty()) {
      return absl::ResourceExhaustedError(
          absl::StrCat("job '", job_id, "' has no complete trace: ", record->trace_error));
    }
    if (record->trace_dropped) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the trace of job '", job_id, "' was dropped: without --data-dir the coordinator keeps ",
          options_.max_kept_trace_bytes,
          " bytes of finished jobs' traces (--max-kept-trace-bytes) "
          "and newer traces took its place"));
    }
    response.set_acts(record->trace_acts);
    packed = record->packed_trace;
    number = record->number;
    stored = record->trace_stored;
    written = last_write_;
  }
  // Read outside the lock: from the kept chunks, or from the data directory once the write
  // queued when the job ended is made. One byte more than asked, to end on a whole character.
  FilePart window;
  if (options_.store == nullptr) {
    if (packed == nullptr) {
      return absl::InternalError(absl::StrCat("job '", job_id, "' kept no trace"));
    }
    absl::StatusOr<std::string> bytes = packed->Read(offset, max_bytes + 1);
    if (!bytes.ok()) {
      return absl::InternalError(absl::StrCat("the kept trace of job '", job_id,
                                              "' is corrupt: ", bytes.status().message()));
    }
    window = {*std::move(bytes), packed->total_bytes()};
  } else {
    if (writer_ != nullptr) writer_->WaitFor(written);
    absl::StatusOr<FilePart> part =
        stored ? options_.store->LoadTracePart(number, offset, max_bytes + 1)
               : absl::NotFoundError("it was not written");
    if (!part.ok()) return StoredReadError(job_id, "trace", part.status());
    window = *std::move(part);
  }
  if (offset > window.total_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("offset ", offset,
                                                   " is past the end of the trace of job '", job_id,
                                                   "' (", window.total_bytes, " bytes)"));
  }
  window.bytes.resize(TracePartLength(window.bytes, max_bytes));
  response.set_chrome_trace_json(std::move(window.bytes));
  response.set_total_bytes(window.total_bytes);
  return response;
}

absl::Status JobManager::StoredReadError(const std::string& job_id, absl::string_view what,
                                         const absl::Status& status) const {
  {
    // Read outside the lock, the job may have been forgotten (and its files removed) meanwhile.
    absl::MutexLock lock(&mutex_);
    if (Find(job_id) == nullptr) return absl::NotFoundError(absl::StrCat("no job '", job_id, "'"));
  }
  return absl::DataLossError(absl::StrCat("the ", what, " of job '", job_id,
                                          "' is lost from the data directory: ", status.message()));
}

JobManager::HistoryBytes JobManager::FinishedJobsBytes() const {
  absl::MutexLock lock(&mutex_);
  HistoryBytes bytes;
  for (const auto& [number, record] : records_) {
    if (!IsTerminal(record->info.state())) continue;
    if (record->plan_bytes != nullptr) {
      bytes.plans += static_cast<int64_t>(record->plan_bytes->size());
    }
    if (record->packed_events != nullptr) {
      bytes.events += static_cast<int64_t>(record->packed_events->size());
    }
    if (record->packed_trace != nullptr) bytes.traces += record->packed_trace->packed_bytes();
    // What is left in `events` once they were packed: the fetched tensors.
    for (const std::shared_ptr<v1::JobEvent>& event : record->events) {
      bytes.fetched += static_cast<int64_t>(event->fetched().data().size());
    }
  }
  return bytes;
}

absl::StatusOr<JobManager::EventBatch> JobManager::WaitForEvents(const std::string& job_id,
                                                                 int64_t from_sequence,
                                                                 absl::Duration timeout) const {
  absl::ReleasableMutexLock lock(&mutex_);
  JobRecord* record = Find(job_id);
  if (record == nullptr) return absl::NotFoundError(absl::StrCat("no job '", job_id, "'"));
  // Shared: the record may be forgotten while this waits.
  std::shared_ptr<JobRecord> held = records_.at(record->number);
  const absl::Time deadline = absl::Now() + timeout;
  while (!(held->next_sequence > from_sequence || IsTerminal(held->info.state()))) {
    if (changed_.WaitWithDeadline(&mutex_, deadline)) break;  // timed out
  }
  EventBatch batch;
  // The events are in sequence order: start at the first one asked for, not at the oldest (a
  // watcher asks after every few events of a job that may hold tens of thousands).
  auto first = std::lower_bound(held->events.begin(), held->events.end(), from_sequence,
                                [](const std::shared_ptr<v1::JobEvent>& event, int64_t sequence) {
                                  return event->sequence() < sequence;
                                });
  batch.events.assign(first, held->events.end());
  batch.ended = IsTerminal(held->info.state());
  // A finished job's packed events are parsed outside the lock, unless none is asked for.
  const std::shared_ptr<const std::string> packed =
      from_sequence < held->next_sequence ? held->packed_events : nullptr;
  lock.Release();
  if (packed != nullptr) {
    batch.events = WithPackedEvents(*packed, std::move(batch.events), from_sequence);
  }
  return batch;
}

v1::JobEvent* JobManager::AppendEvent(JobRecord* record, bool fetched) {
  // Make room by dropping the oldest step or checkpoint event (state changes are kept: they are
  // few; fetched tensors are bounded by max_fetched_bytes_per_job, and released as a whole).
  if (fetched) {
    ++record->fetched_events;
  } else if (static_cast<int64_t>(record->events.size()) - record->fetched_events >=
             options_.max_events_per_job) {
    auto oldest_step = std::find_if(record->events.begin(), record->events.end(),
                                    [](const std::shared_ptr<v1::JobEvent>& event) {
                                      return event->has_step() || event->has_checkpoint();
                                    });
    if (oldest_step != record->events.end()) record->events.erase(oldest_step);
  }
  v1::JobEvent& event = *record->events.emplace_back(std::make_shared<v1::JobEvent>());
  event.set_job_id(record->id);
  event.set_sequence(record->next_sequence++);
  *event.mutable_time() = TimeUtil::GetCurrentTime();
  changed_.SignalAll();
  return &event;
}

void JobManager::ReleaseFetches() {
  if (fetches_held_by_ == 0) return;
  auto held = records_.find(fetches_held_by_);
  fetches_held_by_ = 0;
  if (held == records_.end()) return;  // forgotten
  JobRecord& record = *held->second;
  std::erase_if(record.events,
                [](const std::shared_ptr<v1::JobEvent>& event) { return event->has_fetched(); });
  record.fetched_events = 0;
  record.info.set_fetches_released(true);
  Persist(&record);
}

void JobManager::ChangeState(JobRecord* record, v1::JobState state, const absl::Status& error) {
  record->info.set_state(state);
  v1::JobStateChange* change = AppendEvent(record)->mutable_state_change();
  change->set_state(state);
  if (!error.ok()) {
    *record->info.mutable_error() = ToJobError(error);
    *change->mutable_error() = ToJobError(error);
  }
  Persist(record);
}

void JobManager::Finish(JobRecord* record, v1::JobState state, const absl::Status& error) {
  *record->info.mutable_end_time() = TimeUtil::GetCurrentTime();
  if (TraceToKeep(*record)) {
    // Not kept by KeepTraceOf yet (a job that ended before it ran): its few events, here.
    std::string document = ChromeTraceDocument(record->info.name(), TakeTraceEvents(record));
    KeepTrace(record, writer_ != nullptr ? nullptr : std::make_shared<const PackedTrace>(document),
              std::move(document));
  }
  ChangeState(record, state, error);
  PackEventsOf(record);
  if (options_.metrics != nullptr) options_.metrics->JobFinished(state);
  finished_.push_back(record->number);
  ForgetOldFinishedJobs();
}

void JobManager::KeepTraceOf(JobRecord* record) {
  std::vector<std::string> event_lists;
  std::string name;
  {
    absl::MutexLock lock(&mutex_);
    if (!TraceToKeep(*record)) return;
    event_lists = TakeTraceEvents(record);
    name = record->info.name();
  }
  // Merged and compressed outside the lock, which every call and node update takes: half a
  // second for half a million acts.
  std::string document = ChromeTraceDocument(name, event_lists);
  event_lists.clear();
  std::shared_ptr<const PackedTrace> packed;
  if (writer_ == nullptr) packed = std::make_shared<const PackedTrace>(document);
  absl::MutexLock lock(&mutex_);
  KeepTrace(record, std::move(packed), std::move(document));
}

void JobManager::KeepTrace(JobRecord* record, std::shared_ptr<const PackedTrace> packed,
                           std::string document) {
  record->trace_kept = true;
  record->trace_events.clear();  // parts of a node that had not ended, if any
  if (writer_ == nullptr) {
    // Kept compressed (a few bytes an act instead of a hundred).
    record->packed_trace = std::move(packed);
    DropOldTraces(*record, finished_, records_, options_.max_kept_trace_bytes);
    return;
  }
  // Only in the data directory, where GetTrace reads it. Written before the job's record, which
  // says it was (a failed write is logged; the trace is then reported lost, as a deleted file
  // would be).
  Write(absl::StrCat("the trace of job ", record->id),
        [number = record->number, json = std::move(document)](const JobStore& store) {
          return store.SaveTrace(number, json);
        });
  record->trace_stored = true;
}

void JobManager::ReleaseCompiled(const std::shared_ptr<JobRecord>& record) {
  std::shared_ptr<const compiler::CompiledJob> compiled;
  {
    absl::MutexLock lock(&mutex_);
    compiled = record->compiled;
  }
  if (compiled == nullptr) return;
  // Compressed outside the lock, which every call and node update takes: a plan of a million
  // tasks takes seconds. With a data directory the plan is there already (QueueJob wrote it):
  // GetPlan reads it back.
  std::shared_ptr<const std::string> bytes;
  if (writer_ == nullptr) {
    absl::StatusOr<std::string> compressed = SerializedPlanResponse(*compiled, true);
    if (!compressed.ok()) {
      // Too large to keep serialized: GetPlan goes on copying it.
      LOG(ERROR) << "job " << record->id << ": " << compressed.status();
      return;
    }
    bytes = std::make_shared<const std::string>(*std::move(compressed));
  }
  absl::MutexLock lock(&mutex_);
  record->plan_bytes = std::move(bytes);
  record->compiled.reset();
}

void JobManager::ForgetOldFinishedJobs() {
  while (static_cast<int>(finished_.size()) > options_.max_finished_jobs) {
    auto record = records_.find(finished_.front());
    finished_.pop_front();
    if (record == records_.end()) continue;
    if (writer_ != nullptr) {
      Write(absl::StrCat("forgetting job ", record->second->id),
            [number = record->first](const JobStore& store) {
              store.Remove(number);
              return absl::OkStatus();
            });
    }
    number_of_id_.erase(record->second->id);
    records_.erase(record);
  }
}

}  // namespace loom::daemon
