#include "daemon/job_manager.h"

#include <malloc.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/step_losses.h"
#include "daemon/compressed_message.h"
#include "daemon/grpc_status.h"
#include "daemon/job_checkpoint.h"
#include "daemon/packed_events.h"
#include "daemon/plan_response.h"
#include "daemon/reachability.h"
#include "daemon/step_tracker.h"
#include "glog/logging.h"
#include "google/protobuf/util/time_util.h"
#include "runtime/chrome_trace.h"
#include "runtime/device_name.h"
#include "runtime/tensor_bytes.h"

namespace loom::daemon {
namespace {

using google::protobuf::util::TimeUtil;

// How often a running job's record is written for its steps (state changes: always).
constexpr absl::Duration kPersistStepsEvery = absl::Seconds(1);

// How long a node may take to join its communicators that span nodes: what the launch timeout
// leaves after the probes, less a margin for the node's report to arrive, so that the join's
// error (naming the communicator) ends a launch before the coordinator's "connecting" timeout.
absl::Duration JoinTimeout(const JobManager::Options& options) {
  return std::max(options.launch_timeout - options.probe_timeout - absl::Seconds(2),
                  absl::Seconds(1));
}

// The nodes whose plans have tasks.
std::vector<int> NodesOf(const compiler::CompileResult& result) {
  std::vector<int> nodes;
  for (const plan::Plan& node_plan : result.node_plans) {
    if (node_plan.tasks_size() > 0) nodes.push_back(node_plan.node());
  }
  return nodes;
}

// Whether a forwarded piece's bytes are as many as its data type and shape say (a node's update
// is not trusted to be well formed).
bool PieceSizeMatches(const v1::SinkPieceUpdate& piece) {
  return BytesHoldTensor(piece.data_type(), piece.shape(),
                         static_cast<int64_t>(piece.data().size()));
}

// The MoE fetches of the plan (kMoeDroppedFetch, kMoeTokensPerExpertFetch), counted into the
// metrics per micro-batch.
void CountMoeFetches(const plan::Plan& plan, StepTracker* tracker, DaemonMetrics* metrics) {
  auto values = [](const HostTensor& tensor) {
    std::vector<float> floats(tensor.bytes.size() / sizeof(float));
    std::memcpy(floats.data(), tensor.bytes.data(), floats.size() * sizeof(float));
    return floats;
  };
  for (const plan::Fetch& fetch : plan.fetches()) {
    if (fetch.logical().data_type() != plan::FLOAT32) continue;
    if (fetch.tensor() == kMoeDroppedFetch) {
      tracker->AddCountedFetch(fetch, [metrics, values](const HostTensor& tensor) {
        for (float dropped : values(tensor)) metrics->AddDroppedAssignments(dropped);
      });
    } else if (fetch.tensor() == kMoeTokensPerExpertFetch) {
      tracker->AddCountedFetch(fetch, [metrics, values](const HostTensor& tensor) {
        metrics->AddExpertAssignments(values(tensor));
      });
    }
  }
}

absl::Status CancelledAtShutdown(const JobRecord& record) {
  return absl::CancelledError(
      absl::StrCat("job '", record.id, "' was cancelled: the daemon shut down before it started"));
}

// The nodes' trace events, moved out of the record, to be merged into one Chrome trace document.
std::vector<std::string> TakeTraceEvents(JobRecord& record) {
  std::vector<std::string> event_lists;
  for (auto& [node, events] : record.trace_events) {
    // A node that ended before its last part (it failed) left events cut anywhere: left out.
    if (record.traced_nodes.contains(node)) event_lists.push_back(std::move(events));
  }
  record.trace_events.clear();
  return event_lists;
}

// A trace window names steps of the job, and only a traced job has one.
absl::Status CheckTraceSteps(const SubmitOptions& options, const job::Job& job) {
  if (!options.trace_steps.has_value()) return absl::OkStatus();
  const v1::StepRange& steps = *options.trace_steps;
  const int64_t num_steps = std::max<int64_t>(job.num_steps(), 1);
  const std::string window = absl::StrCat("trace_steps ", steps.first(), "-", steps.last());
  if (!options.trace) {
    return absl::InvalidArgumentError(absl::StrCat("job '", job.name(), "': ", window,
                                                   " without trace: set trace to record them"));
  }
  if (steps.first() < 1 || steps.last() < steps.first() || steps.last() > num_steps) {
    return absl::InvalidArgumentError(
        absl::StrCat("job '", job.name(), "': ", window, " is not a range of the job's steps 1-",
                     num_steps, " (first >= 1, last >= first, last <= num_steps)"));
  }
  return absl::OkStatus();
}

}  // namespace

JobManager::JobManager(Options options, Cluster* cluster)
    : options_(std::move(options)), cluster_(cluster) {
  if (options_.store != nullptr) writer_ = std::make_unique<JobStoreWriter>(options_.store);
}

JobManager::~JobManager() { Shutdown(absl::ZeroDuration()); }

void JobManager::Start() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (worker_.joinable() || stopping_) return;
  if (options_.store != nullptr) Restore();
  worker_ = std::thread([this] { WorkerLoop(); });
}

void JobManager::Shutdown(absl::Duration grace) {
  std::string running_id;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (accepting_) {
      accepting_ = false;
      LOG(INFO) << "shutting down: taking no new jobs, cancelling " << queue_.size() << " pending";
    }
    while (!queue_.empty()) {
      JobRecord* record = records_.at(queue_.front()).get();
      queue_.pop_front();
      Finish(record, v1::JOB_STATE_CANCELLED, CancelledAtShutdown(*record));
    }
    changed_.wait_for(lock, absl::ToChronoNanoseconds(grace),
                      [this] { return running_ == nullptr; });
    if (running_ != nullptr) running_id = running_->id;
  }
  if (!running_id.empty()) {
    LOG(INFO) << "shutting down: cancelling the running job " << running_id << " after the grace "
              << "period of " << absl::FormatDuration(grace);
    (void)Cancel(running_id, "the daemon shut down before the job ended", absl::Seconds(30));
  }
  std::thread worker;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    worker = std::move(worker_);
  }
  changed_.notify_all();
  if (worker.joinable()) worker.join();
}

absl::StatusOr<v1::JobInfo> JobManager::Submit(job::Job job, const SubmitOptions& options) {
  if (!accepting()) {
    return absl::UnavailableError("loomd is shutting down and takes no new jobs");
  }
  const std::string name = job.name();
  if (absl::Status window = CheckTraceSteps(options, job); !window.ok()) return window;
  {
    // Before compiling: a full queue refuses cheaply (and again below, as others may queue
    // meanwhile).
    std::lock_guard<std::mutex> lock(mutex_);
    if (absl::Status room = QueueRoomLocked(name, 0); !room.ok()) return room;
  }
  absl::Duration compile_time;
  absl::StatusOr<std::unique_ptr<loomctl::CompiledJob>> compiled = [&] {
    // One compile at a time: a large plan takes much of the coordinator's memory while it is
    // built, and submissions at once must not multiply that.
    std::lock_guard<std::mutex> compiling(compile_mutex_);
    const absl::Time start = absl::Now();
    auto admitted = AdmitJob(std::move(job), cluster_->Devices(),
                             compiler::CompileOptions{.max_tasks = options_.max_plan_tasks,
                                                      .threads = options_.compile_threads});
    compile_time = absl::Now() - start;
    return admitted;
  }();
  if (compiled.ok()) {
    compiled = [&]() -> absl::StatusOr<std::unique_ptr<loomctl::CompiledJob>> {
      const std::vector<int> nodes = NodesOf((*compiled)->result);
      if (absl::Status ready = cluster_->CheckReady(nodes); !ready.ok()) return ready;
      const plan::Plan& plan = (*compiled)->result.plan;
      if (absl::Status checkpoint =
              CheckCheckpointPath(options.checkpoint_path, options.checkpoint_every_steps, plan);
          !checkpoint.ok()) {
        return checkpoint;
      }
      // Every message of the job fits between the coordinator and each of its nodes: their part
      // of the plan (the launch), and the pieces they forward (a fetched tensor's, whole, with
      // room for its event's other fields, is at most half the smallest limit).
      int64_t max_piece_bytes = cluster_->MessageLimit(0) / 2;
      for (int node : nodes) {
        if (absl::Status fits = cluster_->CheckMessageFits(
                node, static_cast<int64_t>((*compiled)->result.node_plans[node].ByteSizeLong()),
                absl::StrCat("the part of job '", name, "' that runs on node ", node));
            !fits.ok()) {
          return fits;
        }
        max_piece_bytes = std::min(max_piece_bytes, cluster_->MessageLimit(node) / 2);
      }
      if (options.stream_fetches) {
        if (absl::Status limits =
                FetchStream::CheckLimits(plan, (*compiled)->job.num_steps(), max_piece_bytes,
                                         options_.max_fetched_bytes_per_job);
            !limits.ok()) {
          return limits;
        }
      }
      return std::move(*compiled);
    }();
  }
  if (!compiled.ok()) {
    LOG(INFO) << "refused job '" << name << "': " << compiled.status();
    return compiled.status();
  }
  v1::JobInfo submitted;
  uint64_t written = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!accepting_) return absl::UnavailableError("loomd is shutting down and takes no new jobs");
    if (absl::Status room = QueueRoomLocked(name, (*compiled)->result.plan.tasks_size());
        !room.ok()) {
      return room;
    }
    submitted = QueueJob(*std::move(compiled), options, compile_time);
    written = last_write_;
  }
  // The job is on disk before its id reaches the client.
  if (writer_ != nullptr) writer_->WaitFor(written);
  return submitted;
}

absl::Status JobManager::QueueRoomLocked(const std::string& name, int64_t tasks) const {
  if (static_cast<int64_t>(queue_.size()) >= options_.max_pending_jobs) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "job '", name, "' cannot be queued: ", queue_.size(),
        " jobs are waiting to run, as many as loomd takes (--max-pending-jobs); submit it once "
        "some have started, or cancel some"));
  }
  if (options_.max_plan_tasks <= 0 || tasks == 0) return absl::OkStatus();
  int64_t waiting_tasks = 0;
  for (int64_t number : queue_) {
    const JobRecord& waiting = *records_.at(number);
    if (waiting.compiled != nullptr) waiting_tasks += waiting.compiled->result.plan.tasks_size();
  }
  if (waiting_tasks + tasks <= options_.max_plan_tasks) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      absl::StrCat("job '", name, "' (", tasks, " tasks) cannot be queued: the ", queue_.size(),
                   " jobs waiting to run hold plans of ", waiting_tasks,
                   " tasks, and with it they would exceed --max-plan-tasks (",
                   options_.max_plan_tasks, "); submit it once some have started, or cancel some"));
}

v1::JobInfo JobManager::QueueJob(std::unique_ptr<loomctl::CompiledJob> compiled,
                                 const SubmitOptions& options, absl::Duration compile_time) {
  auto record = std::make_shared<JobRecord>();
  record->number = ++last_number_;
  record->id = absl::StrCat("job-", record->number);
  record->compiled = std::move(compiled);
  record->trace = options.trace;
  record->checkpoint_path = options.checkpoint_path;
  record->checkpoint_every_steps = options.checkpoint_every_steps;
  record->stream_fetches = options.stream_fetches;
  const job::Job& admitted = record->compiled->job;
  v1::JobInfo& info = record->info;
  info.set_traced(options.trace);
  if (options.trace_steps.has_value()) *info.mutable_trace_steps() = *options.trace_steps;
  info.set_checkpoint_path(options.checkpoint_path);
  info.set_checkpoint_every_steps(options.checkpoint_every_steps);
  info.set_streams_fetches(options.stream_fetches);
  info.set_job_id(record->id);
  info.set_name(admitted.name());
  info.set_num_steps(std::max<int64_t>(admitted.num_steps(), 1));
  info.set_training(!admitted.loss().empty());
  for (const plan::DeviceDesc& device : record->compiled->result.plan.devices()) {
    info.add_devices(DeviceName(device.device()));
  }
  *info.mutable_submit_time() = TimeUtil::GetCurrentTime();
  records_[record->number] = record;
  number_of_id_[record->id] = record->number;
  queue_.push_back(record->number);
  if (writer_ != nullptr) {
    Write(
        absl::StrCat("the number of job ", record->id),
        [number = record->number](const JobStore& store) { return store.SaveLastNumber(number); });
    Write(absl::StrCat("the plan of job ", record->id),
          [number = record->number, compiled = record->compiled](const JobStore& store) {
            // Serialized on the writer's thread, not under the lock.
            absl::StatusOr<std::string> plan = SerializedPlanResponse(*compiled, false);
            if (!plan.ok()) return plan.status();
            return store.SavePlan(number, *plan);
          });
  }
  ChangeState(record.get(), v1::JOB_STATE_PENDING, absl::OkStatus());
  const int nodes = static_cast<int>(record->compiled->result.node_plans.size());
  LOG(INFO) << "queued job " << record->id << " ('" << info.name() << "', "
            << record->compiled->result.plan.tasks_size() << " tasks on " << nodes
            << (nodes == 1 ? " node" : " nodes") << ", compiled in "
            << absl::FormatDuration(absl::Trunc(compile_time, absl::Microseconds(1))) << "), "
            << queue_.size() << " pending";
  return InfoOf(*record);
}

absl::StatusOr<v1::JobInfo> JobManager::Get(const std::string& job_id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  JobRecord* record = Find(job_id);
  if (record == nullptr) return absl::NotFoundError(absl::StrCat("no job '", job_id, "'"));
  return InfoOf(*record);
}

std::vector<v1::JobInfo> JobManager::List(const std::vector<v1::JobState>& states, int64_t after,
                                          int limit, bool* more) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<v1::JobInfo> jobs;
  if (more != nullptr) *more = false;
  for (auto it = records_.upper_bound(after); it != records_.end(); ++it) {
    const JobRecord& record = *it->second;
    if (!states.empty() &&
        std::find(states.begin(), states.end(), record.info.state()) == states.end()) {
      continue;
    }
    if (limit > 0 && static_cast<int>(jobs.size()) == limit) {
      if (more != nullptr) *more = true;
      break;
    }
    jobs.push_back(InfoOf(record));
  }
  return jobs;
}

absl::StatusOr<v1::JobInfo> JobManager::Cancel(const std::string& job_id, const std::string& reason,
                                               absl::Duration timeout) {
  std::shared_ptr<JobRecord> record;
  absl::Status cancelled;
  std::optional<v1::JobInfo> info;  // cancelled while pending
  {
    std::lock_guard<std::mutex> lock(mutex_);
    JobRecord* found = Find(job_id);
    if (found == nullptr) return absl::NotFoundError(absl::StrCat("no job '", job_id, "'"));
    record = records_.at(found->number);
    const v1::JobState state = record->info.state();
    if (state == v1::JOB_STATE_CANCELLED) return InfoOf(*record);
    if (IsTerminal(state)) {
      return absl::FailedPreconditionError(
          absl::StrCat("job '", job_id, "' has already ended (", v1::JobState_Name(state),
                       "): only pending or running jobs can be cancelled"));
    }
    cancelled = absl::CancelledError(
        absl::StrCat("job '", job_id, "' was cancelled", reason.empty() ? "" : ": ", reason));
    if (state == v1::JOB_STATE_PENDING) {
      queue_.erase(std::find(queue_.begin(), queue_.end(), record->number));
      Finish(record.get(), v1::JOB_STATE_CANCELLED, cancelled);
      info = InfoOf(*record);
    } else {
      // RunJob sees it and aborts the job on every node.
      record->cancel_requested = true;
      record->cancel_message = std::string(cancelled.message());
    }
  }
  if (info.has_value()) {
    ReleaseCompiled(record);
    LOG(INFO) << cancelled.message() << " (it was pending)";
    return *std::move(info);
  }
  LOG(INFO) << cancelled.message() << " (it was running)";
  changed_.notify_all();
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait_for(lock, absl::ToChronoNanoseconds(timeout),
                    [&] { return IsTerminal(record->info.state()); });
  return InfoOf(*record);
}

absl::StatusOr<v1::GetPlanResponse> JobManager::GetPlan(const std::string& job_id,
                                                        std::optional<int> node) const {
  int64_t number = 0;
  std::shared_ptr<const loomctl::CompiledJob> compiled;
  std::shared_ptr<const std::string> plan_bytes;
  {
    std::lock_guard<std::mutex> lock(mutex_);
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
    std::lock_guard<std::mutex> lock(mutex_);
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
    std::lock_guard<std::mutex> lock(mutex_);
    if (Find(job_id) == nullptr) return absl::NotFoundError(absl::StrCat("no job '", job_id, "'"));
  }
  return absl::DataLossError(absl::StrCat("the ", what, " of job '", job_id,
                                          "' is lost from the data directory: ", status.message()));
}

JobManager::HistoryBytes JobManager::FinishedJobsBytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
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
  std::unique_lock<std::mutex> lock(mutex_);
  JobRecord* record = Find(job_id);
  if (record == nullptr) return absl::NotFoundError(absl::StrCat("no job '", job_id, "'"));
  // Shared: the record may be forgotten while this waits.
  std::shared_ptr<JobRecord> held = records_.at(record->number);
  changed_.wait_for(lock, absl::ToChronoNanoseconds(timeout), [&] {
    return held->next_sequence > from_sequence || IsTerminal(held->info.state());
  });
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
  lock.unlock();
  if (packed != nullptr) {
    batch.events = WithPackedEvents(*packed, std::move(batch.events), from_sequence);
  }
  return batch;
}

std::string JobManager::RunningJobId() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return running_ == nullptr ? std::string() : running_->id;
}

bool JobManager::accepting() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return accepting_;
}

void JobManager::WorkerLoop() {
  while (true) {
    std::shared_ptr<JobRecord> record;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      record = records_.at(queue_.front());
      queue_.pop_front();
      running_ = record;
      ChangeState(record.get(), v1::JOB_STATE_LAUNCHING, absl::OkStatus());
    }
    RunJob(record);
    ReleaseCompiled(record);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      running_.reset();
      changed_.notify_all();
    }
    // The job's compilation and parsed events are freed, between the records of the jobs kept:
    // give the allocator's free pages back to the system, else a coordinator's resident memory
    // grows with every job by about twice what the finished job keeps (measured:
    // docs/ARCHITECTURE.md, "What the coordinator holds").
    malloc_trim(0);
  }
}

void JobManager::RunJob(const std::shared_ptr<JobRecord>& record) {
  // Read without the lock: the compiled job never changes after Submit, and goes only after this
  // returns (WorkerLoop).
  const loomctl::CompiledJob& compiled = *record->compiled;
  const plan::Plan& plan = compiled.result.plan;
  const std::vector<plan::Plan>& node_plans = compiled.result.node_plans;
  const int nodes = static_cast<int>(node_plans.size());
  const int64_t num_steps = std::max<int64_t>(compiled.job.num_steps(), 1);

  // Step events from the loss's sinks, wherever they run (their nodes forward the pieces), and the
  // counted fetches' (the MoE metrics).
  std::shared_ptr<StepTracker> tracker;
  std::vector<std::string> forwarded_sinks;
  absl::Status status;
  if (!compiled.job.loss().empty()) {
    absl::StatusOr<StepFetches> step_fetches = StepFetchesOf(plan, compiled.job.loss());
    if (!step_fetches.ok()) {
      status = step_fetches.status();
    } else {
      absl::StatusOr<std::unique_ptr<StepTracker>> created = StepTracker::Create(
          *step_fetches, plan.num_micro_batches(), num_steps, TokensPerStep(compiled.job),
          [this, raw = record.get()](const v1::StepEvent& step) {
            std::lock_guard<std::mutex> lock(mutex_);
            raw->info.set_steps_done(step.step());
            raw->info.set_last_loss(step.loss());
            *AppendEvent(raw)->mutable_step() = step;
            if (options_.metrics != nullptr) options_.metrics->StepFinished(step);
            // The progress survives a crash of the coordinator (to within a second). The step
            // events are written when the job ends, not here: up to max_events_per_job of them
            // each second, under the lock, would make every step slower.
            if (absl::Now() - raw->persisted >= kPersistStepsEvery) {
              Persist(raw, /*with_step_events=*/false);
            }
          });
      if (created.ok()) {
        tracker = std::move(*created);
        if (options_.metrics != nullptr) CountMoeFetches(plan, tracker.get(), options_.metrics);
        forwarded_sinks = tracker->sinks();
      } else {
        status = created.status();
      }
    }
  }
  // The fetched tensors of a job that streams them, as events.
  std::shared_ptr<FetchStream> fetch_stream;
  if (status.ok() && record->stream_fetches) {
    fetch_stream =
        std::make_shared<FetchStream>(plan, [this, raw = record.get()](v1::FetchedTensor fetched) {
          std::lock_guard<std::mutex> lock(mutex_);
          // The previous streaming job's tensors go once this job has one of its own to hold (a
          // job that fails before its first piece leaves them to their watchers).
          if (fetches_held_by_ != raw->number) {
            ReleaseFetches();
            fetches_held_by_ = raw->number;
          }
          *AppendEvent(raw, /*fetched=*/true)->mutable_fetched() = std::move(fetched);
        });
    for (const std::string& sink : fetch_stream->sinks()) {
      if (std::find(forwarded_sinks.begin(), forwarded_sinks.end(), sink) ==
          forwarded_sinks.end()) {
        forwarded_sinks.push_back(sink);
      }
    }
  }
  const std::vector<int> participants = NodesOf(compiled.result);
  if (status.ok()) status = cluster_->CheckReady(participants);
  if (!status.ok()) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!accepting_) {
      // The daemon began to shut down (its nodes drain) as this job left the queue.
      Finish(record.get(), v1::JOB_STATE_CANCELLED, CancelledAtShutdown(*record));
      return;
    }
    Finish(record.get(), v1::JOB_STATE_FAILED, status);
    LOG(INFO) << "job " << record->id << " failed before launch: " << status;
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // Nodes the job does not use take no part (they count as done in every phase).
    JobRecord::NodeProgress bystander;
    bystander.launched = true;
    bystander.connected = true;
    bystander.ended = true;
    record->nodes.assign(nodes, bystander);
    for (int node : participants) record->nodes[node] = JobRecord::NodeProgress{};
    tracker_ = tracker;
    fetch_stream_ = fetch_stream;
  }
  cluster_->SetRunningJob(record->id, participants);
  LOG(INFO) << "launching job " << record->id << " ('" << plan.job_name()
            << "'): " << plan.tasks_size() << " tasks on " << plan.devices_size() << " devices of "
            << nodes << " node(s), " << num_steps << " steps";

  auto command = [&](auto fill) {
    v1::NodeCommand message;
    message.set_job_id(record->id);
    fill(message);
    return message;
  };
  auto send = [&](int node, const v1::NodeCommand& message) {
    if (absl::Status sent = cluster_->Send(node, message); !sent.ok()) {
      OnNodeEnded(record->id, node, sent, /*names_node=*/true);
    }
  };

  // Launch: every node builds its actors and opens its network.
  for (int node : participants) {
    send(
        node, command([&](v1::NodeCommand& message) {
          v1::LaunchNodeJob* launch = message.mutable_launch();
          *launch->mutable_plan() = node_plans[node];
          for (const std::string& sink : forwarded_sinks) launch->add_forward_sinks(sink);
          launch->set_stall_timeout_milliseconds(absl::ToInt64Milliseconds(options_.stall_timeout));
          launch->set_record_events(record->trace);
          if (record->info.has_trace_steps()) {
            *launch->mutable_recorded_steps() = record->info.trace_steps();
          }
          launch->set_checkpoint_path(record->checkpoint_path);
          launch->set_checkpoint_every_steps(record->checkpoint_every_steps);
        }));
  }
  bool ok = WaitForNodes(
      record.get(), [](const JobRecord::NodeProgress& node) { return node.launched; },
      options_.launch_timeout, "launching");
  // Connect: every node gets every node's UCX address and communicator ids, connects and joins
  // (a barrier).
  if (ok) {
    v1::NodeCommand connect = command([&](v1::NodeCommand& message) {
      std::lock_guard<std::mutex> lock(mutex_);
      for (int node : participants) {
        (*message.mutable_connect()->mutable_addresses())[node] = record->nodes[node].address;
        for (const auto& [communicator, id] : record->nodes[node].communicator_ids) {
          (*message.mutable_connect()->mutable_communicator_ids())[communicator] = id;
        }
      }
      message.mutable_connect()->set_probe_timeout_milliseconds(
          absl::ToInt64Milliseconds(options_.probe_timeout));
      message.mutable_connect()->set_join_timeout_milliseconds(
          absl::ToInt64Milliseconds(JoinTimeout(options_)));
    });
    for (int node : participants) send(node, connect);
    ok = WaitForNodes(
        record.get(), [](const JobRecord::NodeProgress& node) { return node.connected; },
        options_.launch_timeout, "connecting");
    if (!ok) NameUnreachableNodes(record.get(), participants);
  }
  if (ok) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      *record->info.mutable_start_time() = TimeUtil::GetCurrentTime();
      ChangeState(record.get(), v1::JOB_STATE_RUNNING, absl::OkStatus());
    }
    if (tracker != nullptr) tracker->Start();
    for (int node : participants) {
      send(node, command([](v1::NodeCommand& message) { message.mutable_start(); }));
    }
    ok = RunAndSaveCheckpoints(record.get(), participants);
  }
  absl::Status error;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    error = record->first_error;
  }
  const std::string& checkpoint_path = record->checkpoint_path;
  if (error.ok() && !checkpoint_path.empty()) {
    LOG(INFO) << "job " << record->id << ": assembling its checkpoint " << checkpoint_path;
    error = SaveCheckpoint(record.get(), participants, checkpoint_path, num_steps);
  }
  if (!error.ok()) {
    // Abort the job on every node still in it, and give them a moment to end.
    for (int node : participants) {
      bool ended;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        ended = record->nodes[node].ended;
      }
      if (!ended) {
        send(node, command([&](v1::NodeCommand& message) {
               message.mutable_abort()->set_reason(std::string(error.message()));
             }));
      }
    }
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait_for(lock, absl::ToChronoNanoseconds(options_.abort_timeout), [&] {
      for (const JobRecord::NodeProgress& node : record->nodes) {
        if (!node.ended) return false;
      }
      return true;
    });
  }
  // A failed job's nodes have ended (or had their moment): remove the parts some of them wrote.
  if (!error.ok() && !checkpoint_path.empty()) RemoveCheckpointParts(checkpoint_path, participants);
  // The end barrier passed (or the job failed): every node frees the job's memory.
  for (int node : participants) {
    cluster_->Send(node, command([](v1::NodeCommand& message) { message.mutable_release(); }))
        .IgnoreError();  // a node that left has nothing to release
  }
  cluster_->SetRunningJob("", {});
  KeepTraceOf(record.get());
  {
    std::lock_guard<std::mutex> lock(mutex_);
    tracker_ = nullptr;
    fetch_stream_ = nullptr;
    if (error.ok()) {
      if (!record->info.training()) record->info.set_steps_done(num_steps);
      Finish(record.get(), v1::JOB_STATE_SUCCEEDED, error);
    } else if (record->cancel_requested) {
      Finish(record.get(), v1::JOB_STATE_CANCELLED, absl::CancelledError(record->cancel_message));
    } else {
      Finish(record.get(), v1::JOB_STATE_FAILED, error);
    }
  }
  LOG(INFO) << "job " << record->id << " ended " << v1::JobState_Name(record->info.state())
            << (error.ok() ? "" : ": ") << (error.ok() ? "" : error.ToString());
}

bool JobManager::WaitForNodes(JobRecord* record,
                              const std::function<bool(const JobRecord::NodeProgress&)>& done,
                              absl::Duration deadline, const char* phase,
                              const std::function<bool()>& wake) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto settled = [&] {
    if (!record->first_error.ok() || record->cancel_requested) return true;
    if (wake && wake()) return true;
    for (const JobRecord::NodeProgress& node : record->nodes) {
      if (!done(node)) return false;
    }
    return true;
  };
  bool finished = true;
  if (deadline == absl::InfiniteDuration()) {
    changed_.wait(lock, settled);
  } else {
    finished = changed_.wait_for(lock, absl::ToChronoNanoseconds(deadline), settled);
  }
  if (record->cancel_requested && record->first_error.ok()) {
    record->first_error = absl::CancelledError(record->cancel_message);
  }
  if (!finished && record->first_error.ok()) {
    std::string late;
    for (size_t node = 0; node < record->nodes.size(); ++node) {
      if (!done(record->nodes[node])) absl::StrAppend(&late, late.empty() ? "" : ", ", node);
    }
    record->first_error = absl::DeadlineExceededError(
        absl::StrCat("job '", record->id, "': node(s) ", late, " did not finish ", phase,
                     " within ", absl::FormatDuration(deadline)));
  }
  return record->first_error.ok();
}

bool JobManager::RunAndSaveCheckpoints(JobRecord* record, const std::vector<int>& participants) {
  auto ended = [](const JobRecord::NodeProgress& node) { return node.ended; };
  if (record->checkpoint_every_steps == 0) {
    return WaitForNodes(record, ended, absl::InfiniteDuration(), "running");
  }
  // The nodes that write parts of the periodic checkpoints: those with variables.
  std::vector<int> writers;
  for (int node : participants) {
    for (const plan::Task& task : record->compiled->result.node_plans[node].tasks()) {
      if (task.kind() == plan::VARIABLE) {
        writers.push_back(node);
        break;
      }
    }
  }
  // Takes the parts of the steps up to `step` out of the record (the lock held): whose to remove.
  auto take_parts_up_to = [&](int64_t step) {
    std::vector<std::pair<int64_t, std::vector<int>>> taken;
    auto& parts = record->checkpoint_parts;
    for (auto it = parts.begin(); it != parts.end() && it->first <= step;) {
      taken.emplace_back(it->first, std::vector<int>(it->second.begin(), it->second.end()));
      it = parts.erase(it);
    }
    return taken;
  };
  auto remove = [&](const std::vector<std::pair<int64_t, std::vector<int>>>& parts) {
    for (const auto& [step, nodes] : parts) {
      RemoveCheckpointParts(StepPartsPath(record->checkpoint_path, step), nodes);
    }
  };
  // The newest step every writer has written its part of (the lock held); 0: none.
  auto complete_step = [&] {
    const auto& parts = record->checkpoint_parts;
    for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
      if (it->second.size() == writers.size()) return it->first;
    }
    return int64_t{0};
  };
  bool ok = true;
  while (true) {
    ok = WaitForNodes(record, ended, absl::InfiniteDuration(), "running",
                      [&] { return complete_step() > 0; });
    int64_t step = 0;
    if (ok) {
      std::lock_guard<std::mutex> lock(mutex_);
      // Once every node ended, the checkpoint at the end replaces any still to be assembled.
      if (!std::all_of(record->nodes.begin(), record->nodes.end(), ended)) step = complete_step();
    }
    if (step == 0) break;
    absl::Status saved =
        SaveCheckpoint(record, writers, StepPartsPath(record->checkpoint_path, step), step);
    std::vector<std::pair<int64_t, std::vector<int>>> done;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done = take_parts_up_to(step);  // the step's own are gone (AssembleCheckpointParts)
      if (!saved.ok() && record->first_error.ok()) record->first_error = saved;
    }
    remove(done);
    if (!saved.ok()) {
      ok = false;
      break;
    }
  }
  std::vector<std::pair<int64_t, std::vector<int>>> left;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    left = take_parts_up_to(std::numeric_limits<int64_t>::max());
  }
  remove(left);
  return ok;
}

absl::Status JobManager::SaveCheckpoint(JobRecord* record, const std::vector<int>& nodes,
                                        absl::string_view parts, int64_t step) {
  const loomctl::CompiledJob& compiled = *record->compiled;
  const int64_t steps_taken = compiled.job.initial_state().first_step() + step;
  const std::string& path = record->checkpoint_path;
  const absl::Time start = absl::Now();
  absl::Status status = AssembleCheckpointParts(
      compiled.result.plan, nodes, parts, path,
      JobCheckpointProgress(compiled.job, compiled.result.plan.job_name(), steps_taken));
  if (!status.ok()) {
    return absl::Status(status.code(),
                        absl::StrCat("saving the checkpoint '", path, "' after step ", steps_taken,
                                     ": ", status.message()));
  }
  const absl::Duration took = absl::Now() - start;
  LOG(INFO) << "job " << record->id << ": saved its checkpoint after step " << steps_taken << " to "
            << path << " in " << absl::FormatDuration(took);
  if (options_.metrics != nullptr) options_.metrics->CheckpointSaved(absl::ToDoubleSeconds(took));
  std::lock_guard<std::mutex> lock(mutex_);
  record->info.set_checkpoint_step(steps_taken);
  v1::CheckpointSaved* saved = AppendEvent(record)->mutable_checkpoint();
  saved->set_step(steps_taken);
  saved->set_path(path);
  Persist(record, /*with_step_events=*/false);
  return absl::OkStatus();
}

void JobManager::OnNodeEnded(const std::string& job_id, int node, const absl::Status& status,
                             bool names_node) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (running_ == nullptr || running_->id != job_id) return;
    if (node < 0 || node >= static_cast<int>(running_->nodes.size())) return;
    JobRecord::NodeProgress& progress = running_->nodes[node];
    if (progress.ended) return;
    progress.ended = true;
    progress.status = status;
    if (!status.ok() && running_->first_error.ok()) {
      running_->first_error =
          names_node || status.code() == absl::StatusCode::kUnavailable
              ? status
              : absl::Status(status.code(),
                             absl::StrCat(cluster_->Describe(node), ": ", status.message()));
    }
  }
  changed_.notify_all();
}

void JobManager::NameUnreachableNodes(JobRecord* record, const std::vector<int>& participants) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto reported = [&] {
    for (int node : participants) {
      if (!record->nodes[node].unreachable.empty()) return true;
    }
    return false;
  };
  if (record->cancel_requested || !reported()) return;
  // Every node waits as long for its peers' probes; the last reports come soon after the first.
  changed_.wait_for(lock, absl::ToChronoNanoseconds(options_.probe_timeout + absl::Seconds(2)),
                    [&] {
                      for (int node : participants) {
                        const JobRecord::NodeProgress& progress = record->nodes[node];
                        if (!progress.connected && !progress.ended) return false;
                      }
                      return true;
                    });
  if (record->cancel_requested) return;
  std::map<int, std::map<int, std::string>> unreachable;
  for (int node : participants) {
    if (!record->nodes[node].unreachable.empty()) {
      unreachable[node] = record->nodes[node].unreachable;
    }
  }
  record->first_error =
      UnreachableNodesError(record->id, participants, unreachable,
                            [this](int node) { return cluster_->DescribeWithAddress(node); });
}

void JobManager::OnNodeUpdate(int node, const v1::NodeJobUpdate& update) {
  if (update.has_trace()) {
    std::lock_guard<std::mutex> lock(mutex_);
    // Only from a node of the traced job still running it, until its trace is kept as it ends.
    if (running_ == nullptr || running_->id != update.job_id() || !running_->trace ||
        IsTerminal(running_->info.state()) || node < 0 ||
        node >= static_cast<int>(running_->nodes.size()) || running_->nodes[node].ended ||
        running_->traced_nodes.contains(node) || running_->trace_kept) {
      return;
    }
    // In parts when the node's events do not fit in a message (NodeTrace.more).
    running_->trace_events[node] += update.trace().events();
    if (update.trace().more() && update.trace().error().empty()) return;
    running_->traced_nodes.insert(node);
    running_->trace_acts += update.trace().acts();
    if (!update.trace().error().empty() && running_->trace_error.empty()) {
      running_->trace_error = update.trace().error();
    }
    return;
  }
  if (update.has_ended()) {
    OnNodeEnded(update.job_id(), node, FromJobError(update.ended()));
    return;
  }
  if (update.has_checkpoint_part()) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      // Only from a node of the job still running it, which saves checkpoints while it runs.
      if (running_ == nullptr || running_->id != update.job_id() ||
          running_->checkpoint_every_steps == 0 || node < 0 ||
          node >= static_cast<int>(running_->nodes.size()) || running_->nodes[node].ended) {
        return;
      }
      running_->checkpoint_parts[update.checkpoint_part().step()].insert(node);
    }
    changed_.notify_all();
    return;
  }
  if (update.has_piece()) {
    std::shared_ptr<StepTracker> tracker;
    std::shared_ptr<FetchStream> fetch_stream;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (running_ == nullptr || running_->id != update.job_id()) return;
      // Only from a node of the job still running it (one that takes no part counts as ended).
      if (node < 0 || node >= static_cast<int>(running_->nodes.size()) ||
          running_->nodes[node].ended) {
        return;
      }
      tracker = tracker_;
      fetch_stream = fetch_stream_;
    }
    if (tracker == nullptr && fetch_stream == nullptr) return;
    const v1::SinkPieceUpdate& piece = update.piece();
    if (!PieceSizeMatches(piece)) {
      OnNodeEnded(update.job_id(), node,
                  absl::DataLossError(absl::StrCat("forwarded a piece of sink '", piece.sink(),
                                                   "' with ", piece.data().size(),
                                                   " bytes, not what its type and shape [",
                                                   absl::StrJoin(piece.shape(), ", "), "] hold")));
      return;
    }
    HostTensor tensor;
    tensor.data_type = piece.data_type();
    tensor.shape = Shape(std::vector<int64_t>(piece.shape().begin(), piece.shape().end()));
    tensor.bytes.resize(piece.data().size());
    std::memcpy(tensor.bytes.data(), piece.data().data(), piece.data().size());
    const SinkPiece sink_piece{piece.sink(), piece.input(), piece.piece(), tensor};
    absl::Status status = tracker != nullptr ? tracker->OnPiece(sink_piece) : absl::OkStatus();
    if (status.ok() && fetch_stream != nullptr) status = fetch_stream->OnPiece(sink_piece);
    if (!status.ok()) OnNodeEnded(update.job_id(), node, status);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (running_ == nullptr || running_->id != update.job_id()) return;
    if (node < 0 || node >= static_cast<int>(running_->nodes.size())) return;
    JobRecord::NodeProgress& progress = running_->nodes[node];
    if (update.has_launched()) {
      progress.launched = true;
      progress.address = update.launched().address();
      progress.communicator_ids = {update.launched().communicator_ids().begin(),
                                   update.launched().communicator_ids().end()};
    } else if (update.has_connected()) {
      progress.connected = true;
    } else if (update.has_unreachable()) {
      for (const auto& [peer, why] : update.unreachable().peers()) {
        progress.unreachable[peer] = why;
      }
    }
  }
  changed_.notify_all();
}

void JobManager::OnNodeLost(int node, const absl::Status& reason) {
  std::string job_id;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (running_ == nullptr) return;
    job_id = running_->id;
  }
  OnNodeEnded(job_id, node, reason);
}

JobRecord* JobManager::Find(const std::string& job_id) const {
  auto number = number_of_id_.find(job_id);
  if (number == number_of_id_.end()) return nullptr;
  return records_.at(number->second).get();
}

v1::JobInfo JobManager::InfoOf(const JobRecord& record) const {
  v1::JobInfo info = record.info;
  if (info.state() == v1::JOB_STATE_PENDING) {
    auto position = std::find(queue_.begin(), queue_.end(), record.number);
    info.set_queue_position(static_cast<int32_t>(position - queue_.begin()));
  }
  return info;
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
  changed_.notify_all();
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
    std::string document = ChromeTraceDocument(record->info.name(), TakeTraceEvents(*record));
    KeepTrace(record, writer_ != nullptr ? nullptr : std::make_shared<const PackedTrace>(document),
              std::move(document));
  }
  ChangeState(record, state, error);
  PackEventsOf(record);
  if (options_.metrics != nullptr) options_.metrics->JobFinished(state);
  finished_.push_back(record->number);
  ForgetOldFinishedJobs();
}

bool JobManager::TraceToKeep(const JobRecord& record) const {
  return record.trace && record.trace_error.empty() && !record.restored && !record.trace_kept;
}

void JobManager::KeepTraceOf(JobRecord* record) {
  std::vector<std::string> event_lists;
  std::string name;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!TraceToKeep(*record)) return;
    event_lists = TakeTraceEvents(*record);
    name = record->info.name();
  }
  // Merged and compressed outside the lock, which every call and node update takes: half a
  // second for half a million acts.
  std::string document = ChromeTraceDocument(name, event_lists);
  event_lists.clear();
  std::shared_ptr<const PackedTrace> packed;
  if (writer_ == nullptr) packed = std::make_shared<const PackedTrace>(document);
  std::lock_guard<std::mutex> lock(mutex_);
  KeepTrace(record, std::move(packed), std::move(document));
}

void JobManager::KeepTrace(JobRecord* record, std::shared_ptr<const PackedTrace> packed,
                           std::string document) {
  record->trace_kept = true;
  record->trace_events.clear();  // parts of a node that had not ended, if any
  if (writer_ == nullptr) {
    // Kept compressed (a few bytes an act instead of a hundred).
    record->packed_trace = std::move(packed);
    DropOldTraces(*record);
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

void JobManager::DropOldTraces(const JobRecord& newest) {
  std::vector<JobRecord*> kept;  // the oldest first
  int64_t bytes = newest.packed_trace == nullptr ? 0 : newest.packed_trace->packed_bytes();
  for (int64_t number : finished_) {
    auto found = records_.find(number);
    if (found == records_.end() || found->second.get() == &newest ||
        found->second->packed_trace == nullptr) {
      continue;
    }
    kept.push_back(found->second.get());
    bytes += found->second->packed_trace->packed_bytes();
  }
  for (JobRecord* record : kept) {
    if (bytes <= options_.max_kept_trace_bytes) return;
    bytes -= record->packed_trace->packed_bytes();
    record->packed_trace.reset();
    record->trace_dropped = true;
    LOG(INFO) << "dropped the trace of job " << record->id << " (--max-kept-trace-bytes "
              << options_.max_kept_trace_bytes << ")";
  }
}

void JobManager::PackEventsOf(JobRecord* record) {
  // Once, when the job ends. An event appended later (none is) would stay in `events`, which
  // every reader merges with the packed ones.
  if (record->packed_events != nullptr) return;
  record->packed_events = std::make_shared<const std::string>(PackEvents(&record->events));
}

void JobManager::ReleaseCompiled(const std::shared_ptr<JobRecord>& record) {
  std::shared_ptr<const loomctl::CompiledJob> compiled;
  {
    std::lock_guard<std::mutex> lock(mutex_);
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
  std::lock_guard<std::mutex> lock(mutex_);
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

void JobManager::Write(std::string what, JobStoreWriter::Write write) {
  last_write_ = writer_->Enqueue(std::move(what), std::move(write));
}

void JobManager::Persist(JobRecord* record, bool with_step_events) {
  if (writer_ == nullptr) return;
  record->persisted = absl::Now();
  StoredJob stored;
  stored.set_number(record->number);
  *stored.mutable_info() = record->info;
  EventList events(record->events.begin(), record->events.end());
  if (record->packed_events != nullptr) {
    events = WithPackedEvents(*record->packed_events, std::move(events), 0);
  }
  for (const std::shared_ptr<const v1::JobEvent>& event : events) {
    if (event->has_fetched() || (!with_step_events && event->has_step())) continue;
    *stored.add_events() = *event;
  }
  stored.set_next_sequence(record->next_sequence);
  stored.set_has_trace(record->trace_stored);
  stored.set_trace_acts(record->trace_acts);
  stored.set_trace_error(record->trace_error);
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
    auto record = std::make_shared<JobRecord>();
    record->number = stored.number();
    record->id = stored.info().job_id();
    record->info = std::move(*stored.mutable_info());
    record->info.clear_queue_position();
    for (v1::JobEvent& event : *stored.mutable_events()) {
      record->events.push_back(std::make_shared<v1::JobEvent>(std::move(event)));
    }
    record->next_sequence = stored.next_sequence();
    record->trace = record->info.traced();
    record->restored = true;
    // Fetched tensors are held in memory only.
    if (record->info.streams_fetches()) record->info.set_fetches_released(true);
    record->trace_stored = stored.has_trace();
    record->trace_acts = stored.trace_acts();
    record->trace_error = stored.trace_error();
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
             RemoveLeftoverCheckpointFiles(record->info.checkpoint_path())) {
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
