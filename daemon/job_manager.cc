#include "daemon/job_manager.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/step_losses.h"
#include "daemon/job_execution.h"
#include "daemon/step_tracker.h"
#include "glog/logging.h"
#include "google/protobuf/util/time_util.h"
#include "runtime/device_name.h"

namespace loom::daemon {
namespace {

using google::protobuf::util::TimeUtil;

v1::JobError ErrorOf(const absl::Status& status) {
  v1::JobError error;
  error.set_code(static_cast<int32_t>(status.code()));
  error.set_message(std::string(status.message()));
  return error;
}

}  // namespace

JobManager::JobManager(Options options, const KernelRegistry* kernels)
    : options_(std::move(options)), kernels_(kernels) {}

JobManager::~JobManager() { Shutdown(absl::ZeroDuration()); }

void JobManager::Start() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (worker_.joinable() || stopping_) return;
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
      Finish(record, v1::JOB_STATE_CANCELLED,
             absl::CancelledError(absl::StrCat("job '", record->id,
                                               "' was cancelled: the daemon shut down before it "
                                               "started")));
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

absl::StatusOr<v1::JobInfo> JobManager::Submit(job::Job job) {
  if (!accepting()) {
    return absl::UnavailableError("loomd is shutting down and takes no new jobs");
  }
  const std::string name = job.name();
  absl::StatusOr<std::unique_ptr<loomctl::CompiledJob>> compiled =
      AdmitJob(std::move(job), options_.capacity);
  if (!compiled.ok()) {
    LOG(INFO) << "refused job '" << name << "': " << compiled.status();
    return compiled.status();
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (!accepting_) return absl::UnavailableError("loomd is shutting down and takes no new jobs");
  auto record = std::make_shared<JobRecord>();
  record->number = ++last_number_;
  record->id = absl::StrCat("job-", record->number);
  record->compiled = std::move(*compiled);
  const job::Job& admitted = record->compiled->job;
  v1::JobInfo& info = record->info;
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
  ChangeState(record.get(), v1::JOB_STATE_PENDING, absl::OkStatus());
  LOG(INFO) << "queued job " << record->id << " ('" << info.name() << "', "
            << record->compiled->result.plan.tasks_size() << " tasks), " << queue_.size()
            << " pending";
  return InfoOf(*record);
}

absl::StatusOr<v1::JobInfo> JobManager::Get(const std::string& job_id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  JobRecord* record = Find(job_id);
  if (record == nullptr) return absl::NotFoundError(absl::StrCat("no job '", job_id, "'"));
  return InfoOf(*record);
}

std::vector<v1::JobInfo> JobManager::List(const std::vector<v1::JobState>& states) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<v1::JobInfo> jobs;
  for (const auto& [number, record] : records_) {
    if (!states.empty() &&
        std::find(states.begin(), states.end(), record->info.state()) == states.end()) {
      continue;
    }
    jobs.push_back(InfoOf(*record));
  }
  return jobs;
}

absl::StatusOr<v1::JobInfo> JobManager::Cancel(const std::string& job_id, const std::string& reason,
                                               absl::Duration timeout) {
  std::shared_ptr<JobRuntime> runtime;
  std::shared_ptr<JobRecord> record;
  absl::Status cancelled;
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
      LOG(INFO) << cancelled.message() << " (it was pending)";
      return InfoOf(*record);
    }
    record->cancel_requested = true;
    record->cancel_message = std::string(cancelled.message());
    runtime = record->runtime;
  }
  LOG(INFO) << cancelled.message() << " (it was running)";
  // Outside the lock: the runtime's threads may be waiting for it in a step callback.
  if (runtime != nullptr) runtime->Abort(cancelled);
  runtime.reset();
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait_for(lock, absl::ToChronoNanoseconds(timeout),
                    [&] { return IsTerminal(record->info.state()); });
  return InfoOf(*record);
}

absl::StatusOr<v1::GetPlanResponse> JobManager::GetPlan(const std::string& job_id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  JobRecord* record = Find(job_id);
  if (record == nullptr) return absl::NotFoundError(absl::StrCat("no job '", job_id, "'"));
  v1::GetPlanResponse response;
  *response.mutable_plan() = record->compiled->result.plan;
  for (const plan::Plan& node_plan : record->compiled->result.node_plans) {
    *response.add_node_plans() = node_plan;
  }
  return response;
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
  for (const v1::JobEvent& event : held->events) {
    if (event.sequence() >= from_sequence) batch.events.push_back(event);
  }
  batch.ended = IsTerminal(held->info.state());
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
    std::lock_guard<std::mutex> lock(mutex_);
    running_.reset();
    changed_.notify_all();
  }
}

void JobManager::RunJob(const std::shared_ptr<JobRecord>& record) {
  // Read without the lock: the compiled job never changes after Submit.
  const loomctl::CompiledJob& compiled = *record->compiled;
  const plan::Plan& plan = compiled.result.plan;
  const int64_t num_steps = std::max<int64_t>(compiled.job.num_steps(), 1);

  JobOptions job_options;
  job_options.stall_timeout = options_.stall_timeout;
  job_options.record_events = false;  // a daemon's jobs may run for days
  std::unique_ptr<StepTracker> tracker;
  absl::Status status;
  if (!compiled.job.loss().empty()) {
    const plan::Fetch* loss = nullptr;
    for (const plan::Fetch& fetch : plan.fetches()) {
      if (fetch.tensor() == compiled.job.loss()) loss = &fetch;
    }
    if (loss == nullptr) {
      status = absl::InternalError(
          absl::StrCat("the plan does not fetch the loss '", compiled.job.loss(), "'"));
    } else {
      absl::StatusOr<std::unique_ptr<StepTracker>> created = StepTracker::Create(
          *loss, plan.num_micro_batches(), num_steps, TokensPerStep(compiled.job),
          [this, raw = record.get()](const v1::StepEvent& step) {
            std::lock_guard<std::mutex> lock(mutex_);
            raw->info.set_steps_done(step.step());
            raw->info.set_last_loss(step.loss());
            *AppendEvent(raw)->mutable_step() = step;
          });
      if (created.ok()) {
        tracker = std::move(*created);
        job_options.sink_piece_callback = tracker->Callback();
      } else {
        status = created.status();
      }
    }
  }

  if (status.ok()) {
    LOG(INFO) << "running job " << record->id << " ('" << plan.job_name()
              << "'): " << plan.tasks_size() << " tasks on " << plan.devices_size() << " devices, "
              << num_steps << " steps";
    status = ExecutePlan(plan, *kernels_, std::move(job_options),
                         [&](std::shared_ptr<JobRuntime> runtime) {
                           {
                             std::lock_guard<std::mutex> lock(mutex_);
                             if (record->cancel_requested) return false;
                             record->runtime = std::move(runtime);
                             *record->info.mutable_start_time() = TimeUtil::GetCurrentTime();
                             ChangeState(record.get(), v1::JOB_STATE_RUNNING, absl::OkStatus());
                           }
                           if (tracker != nullptr) tracker->Start();
                           return true;
                         });
  }

  std::shared_ptr<JobRuntime> runtime;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    runtime = std::move(record->runtime);
    if (status.ok()) {
      if (!record->info.training()) record->info.set_steps_done(num_steps);
      Finish(record.get(), v1::JOB_STATE_SUCCEEDED, status);
    } else if (record->cancel_requested) {
      Finish(record.get(), v1::JOB_STATE_CANCELLED, absl::CancelledError(record->cancel_message));
    } else {
      Finish(record.get(), v1::JOB_STATE_FAILED, status);
    }
  }
  LOG(INFO) << "job " << record->id << " ended " << v1::JobState_Name(record->info.state())
            << (status.ok() ? "" : ": ") << (status.ok() ? "" : status.ToString());
  runtime.reset();  // outside the lock: tearing the actors down takes a moment
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

v1::JobEvent* JobManager::AppendEvent(JobRecord* record) {
  // Make room by dropping the oldest step event (state changes are kept: they are few).
  if (static_cast<int>(record->events.size()) >= options_.max_events_per_job) {
    auto oldest_step = std::find_if(record->events.begin(), record->events.end(),
                                    [](const v1::JobEvent& event) { return event.has_step(); });
    if (oldest_step != record->events.end()) record->events.erase(oldest_step);
  }
  v1::JobEvent& event = record->events.emplace_back();
  event.set_job_id(record->id);
  event.set_sequence(record->next_sequence++);
  *event.mutable_time() = TimeUtil::GetCurrentTime();
  changed_.notify_all();
  return &event;
}

void JobManager::ChangeState(JobRecord* record, v1::JobState state, const absl::Status& error) {
  record->info.set_state(state);
  v1::JobStateChange* change = AppendEvent(record)->mutable_state_change();
  change->set_state(state);
  if (!error.ok()) {
    *record->info.mutable_error() = ErrorOf(error);
    *change->mutable_error() = ErrorOf(error);
  }
}

void JobManager::Finish(JobRecord* record, v1::JobState state, const absl::Status& error) {
  *record->info.mutable_end_time() = TimeUtil::GetCurrentTime();
  ChangeState(record, state, error);
  finished_.push_back(record->number);
  ForgetOldFinishedJobs();
}

void JobManager::ForgetOldFinishedJobs() {
  while (static_cast<int>(finished_.size()) > options_.max_finished_jobs) {
    auto record = records_.find(finished_.front());
    finished_.pop_front();
    if (record == records_.end()) continue;
    number_of_id_.erase(record->second->id);
    records_.erase(record);
  }
}

}  // namespace loom::daemon
