#include "daemon/job_manager.h"

#include <malloc.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/device_name.h"
#include "daemon/job_checkpoint.h"
#include "daemon/job_run.h"
#include "daemon/plan_response.h"
#include "glog/logging.h"
#include "google/protobuf/util/time_util.h"

namespace loom::daemon {
namespace {

using google::protobuf::util::TimeUtil;

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
  absl::MutexLock lock(&mutex_);
  if (worker_.joinable() || stopping_) return;
  if (options_.store != nullptr) Restore();
  worker_ = std::thread([this] { WorkerLoop(); });
}

void JobManager::Shutdown(absl::Duration grace) {
  std::string running_id;
  {
    absl::MutexLock lock(&mutex_);
    if (accepting_) {
      accepting_ = false;
      LOG(INFO) << "shutting down: taking no new jobs, cancelling " << queue_.size() << " pending";
    }
    while (!queue_.empty()) {
      JobRecord* record = records_.at(queue_.front()).get();
      queue_.pop_front();
      Finish(record, v1::JOB_STATE_CANCELLED, CancelledAtShutdown(*record));
    }
    const absl::Time deadline = absl::Now() + grace;
    while (running_ != nullptr) {
      if (changed_.WaitWithDeadline(&mutex_, deadline)) break;  // timed out
    }
    if (running_ != nullptr) running_id = running_->id;
  }
  if (!running_id.empty()) {
    LOG(INFO) << "shutting down: cancelling the running job " << running_id << " after the grace "
              << "period of " << absl::FormatDuration(grace);
    (void)Cancel(running_id, "the daemon shut down before the job ended", absl::Seconds(30));
  }
  std::thread worker;
  {
    absl::MutexLock lock(&mutex_);
    stopping_ = true;
    worker = std::move(worker_);
  }
  changed_.SignalAll();
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
    absl::MutexLock lock(&mutex_);
    if (absl::Status room = QueueRoomLocked(name, 0); !room.ok()) return room;
  }
  absl::Duration compile_time;
  absl::StatusOr<std::unique_ptr<compiler::CompiledJob>> compiled = [&] {
    // One compile at a time: a large plan takes much of the coordinator's memory while it is
    // built, and submissions at once must not multiply that.
    absl::MutexLock compiling(&compile_mutex_);
    const absl::Time start = absl::Now();
    auto admitted = AdmitJob(std::move(job), cluster_->Devices(),
                             compiler::CompileOptions{.max_tasks = options_.max_plan_tasks,
                                                      .threads = options_.compile_threads});
    compile_time = absl::Now() - start;
    return admitted;
  }();
  if (compiled.ok()) {
    compiled = [&]() -> absl::StatusOr<std::unique_ptr<compiler::CompiledJob>> {
      const std::vector<int> nodes = NodesOf((*compiled)->result);
      if (absl::Status ready = cluster_->CheckReady(nodes); !ready.ok()) return ready;
      const plan::Plan& plan = (*compiled)->result.plan;
      if (absl::Status checkpoint =
              CheckCheckpointPath(options_.checkpoint_roots, options.checkpoint_path,
                                  options.checkpoint_every_steps, options.overwrite_checkpoint,
                                  plan);
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
  uint64_t first_write = 0;
  uint64_t written = 0;
  {
    absl::MutexLock lock(&mutex_);
    if (!accepting_) return absl::UnavailableError("loomd is shutting down and takes no new jobs");
    if (absl::Status room = QueueRoomLocked(name, (*compiled)->result.plan.tasks_size());
        !room.ok()) {
      return room;
    }
    first_write = last_write_ + 1;
    submitted = QueueJob(*std::move(compiled), options, compile_time);
    written = last_write_;
  }
  // The job (its number, plan and record) is on disk before its id reaches the client, and before
  // it may run. One that could not be written (a full disk) is cancelled before it ever ran, and
  // the submission fails with why.
  if (writer_ != nullptr) {
    if (absl::Status kept = writer_->WaitForWrites(first_write, written); !kept.ok()) {
      (void)Cancel(submitted.job_id(), std::string(kept.message()), absl::Seconds(10));
      return kept;
    }
    absl::MutexLock lock(&mutex_);
    if (auto found = number_of_id_.find(submitted.job_id()); found != number_of_id_.end()) {
      records_.at(found->second)->stored = true;
      changed_.SignalAll();
    }
  }
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

v1::JobInfo JobManager::QueueJob(std::unique_ptr<compiler::CompiledJob> compiled,
                                 const SubmitOptions& options, absl::Duration compile_time) {
  auto record = std::make_shared<JobRecord>();
  record->number = ++last_number_;
  record->id = absl::StrCat("job-", record->number);
  record->compiled = std::move(compiled);
  record->trace = options.trace;
  record->checkpoint_path = options.checkpoint_path;
  record->overwrite_checkpoint = options.overwrite_checkpoint;
  record->checkpoint_every_steps = options.checkpoint_every_steps;
  record->stream_fetches = options.stream_fetches;
  record->stored = writer_ == nullptr;
  const job::Job& admitted = record->compiled->job;
  v1::JobInfo& info = record->info;
  info.set_traced(options.trace);
  if (options.trace_steps.has_value()) *info.mutable_trace_steps() = *options.trace_steps;
  info.set_checkpoint_path(options.checkpoint_path);
  info.set_checkpoint_every_steps(options.checkpoint_every_steps);
  info.set_streams_fetches(options.stream_fetches);
  info.set_owner(options.owner);
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
  absl::MutexLock lock(&mutex_);
  JobRecord* record = Find(job_id);
  if (record == nullptr) return absl::NotFoundError(absl::StrCat("no job '", job_id, "'"));
  return InfoOf(*record);
}

std::vector<v1::JobInfo> JobManager::List(const std::vector<v1::JobState>& states, int64_t after,
                                          int limit, bool* more,
                                          const std::optional<std::string>& owner) const {
  absl::MutexLock lock(&mutex_);
  std::vector<v1::JobInfo> jobs;
  if (more != nullptr) *more = false;
  for (auto it = records_.upper_bound(after); it != records_.end(); ++it) {
    const JobRecord& record = *it->second;
    if (!states.empty() &&
        std::find(states.begin(), states.end(), record.info.state()) == states.end()) {
      continue;
    }
    if (owner.has_value() && record.info.owner() != *owner) continue;
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
    absl::MutexLock lock(&mutex_);
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
  changed_.SignalAll();
  absl::MutexLock lock(&mutex_);
  const absl::Time deadline = absl::Now() + timeout;
  while (!IsTerminal(record->info.state())) {
    if (changed_.WaitWithDeadline(&mutex_, deadline)) break;  // timed out
  }
  return InfoOf(*record);
}

std::string JobManager::RunningJobId() const {
  absl::MutexLock lock(&mutex_);
  return running_ == nullptr ? std::string() : running_->id;
}

bool JobManager::accepting() const {
  absl::MutexLock lock(&mutex_);
  return accepting_;
}

void JobManager::WorkerLoop() {
  while (true) {
    std::shared_ptr<JobRecord> record;
    {
      absl::MutexLock lock(&mutex_);
      // The first job in the queue runs once it is on disk (Submit says so).
      while (!stopping_ && (queue_.empty() || !records_.at(queue_.front())->stored)) {
        changed_.Wait(&mutex_);
      }
      if (stopping_) return;
      record = records_.at(queue_.front());
      queue_.pop_front();
      running_ = record;
      ChangeState(record.get(), v1::JOB_STATE_LAUNCHING, absl::OkStatus());
    }
    RunJob(record);
    ReleaseCompiled(record);
    {
      absl::MutexLock lock(&mutex_);
      running_.reset();
      changed_.SignalAll();
    }
    // The job's compilation and parsed events are freed, between the records of the jobs kept:
    // give the allocator's free pages back to the system, else a coordinator's resident memory
    // grows with every job by about twice what the finished job keeps (measured:
    // docs/ARCHITECTURE.md, "What the coordinator holds").
    malloc_trim(0);
  }
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

}  // namespace loom::daemon
