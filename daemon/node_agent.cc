#include "daemon/node_agent.h"

#include <malloc.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/job_checkpoint.h"
#include "daemon/trace_parts.h"
#include "glog/logging.h"
#include "node/device_backends.h"
#include "rpc/grpc_status.h"
#include "runtime/chrome_trace.h"

namespace loom::daemon {
namespace {

// When the coordinator does not say how long to wait for the peers' probes.
constexpr absl::Duration kDefaultProbeTimeout = absl::Seconds(5);
// When the coordinator does not say how long to wait for the ranks of every node to join the
// communicators that span nodes (NCCL's bootstrap).
constexpr absl::Duration kDefaultJoinTimeout = absl::Seconds(30);

}  // namespace

absl::Status CheckUpdateFits(const std::string& job_id, size_t bytes, int64_t limit) {
  if (static_cast<int64_t>(bytes) <= limit) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "an update on job ", job_id, " takes ", bytes, " bytes, over the ", limit,
      " bytes a message from this node to the coordinator may carry (--max-message-size; between ",
      "a worker and its coordinator, the smaller of the two)"));
}

NodeAgent::NodeAgent(const KernelRegistry* kernels, Reporter report, NodeAgentOptions options)
    : kernels_(kernels), options_(std::move(options)), report_(std::move(report)) {
  thread_ = std::thread([this] { Loop(); });
  monitor_ = std::thread([this] { MonitorHealth(); });
}

NodeAgent::~NodeAgent() { Stop(absl::InfiniteDuration()); }

bool NodeAgent::Stop(absl::Duration bound) {
  AbortAll("the daemon is stopping");
  bool ended;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    stopping_ = true;
    changed_.notify_all();
    const auto loop_ended = [this] { return loop_ended_; };
    if (bound == absl::InfiniteDuration()) {
      changed_.wait(lock, loop_ended);
      ended = true;
    } else {
      ended = changed_.wait_for(lock, absl::ToChronoNanoseconds(bound), loop_ended);
    }
    if (!ended) {
      LOG(ERROR) << "this node's part of job " << job_id_ << " did not end within "
                 << absl::FormatDuration(bound) << " of the stop; the agent's threads are "
                 << "abandoned";
    }
    // The monitor never waits for a job: it ends either way (no health_changed after Stop).
    monitor_stopping_ = true;
    changed_.notify_all();
  }
  if (monitor_.joinable()) monitor_.join();
  if (!ended) return false;
  if (thread_.joinable()) thread_.join();
  return true;
}

absl::Status NodeAgent::health() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return HealthLocked(absl::Now());
}

absl::Status NodeAgent::HealthLocked(absl::Time now) const {
  if (!stop_requested_at_.has_value() || now - *stop_requested_at_ < options_.release_timeout) {
    return absl::OkStatus();
  }
  return absl::UnavailableError(absl::StrCat(
      "this node's part of job ", job_id_, " has not ended ",
      absl::FormatDuration(absl::Trunc(now - *stop_requested_at_, absl::Seconds(1))),
      " after it was told to stop (--release-timeout ",
      absl::FormatDuration(options_.release_timeout),
      "): a kernel or a file read that does not return; the node takes no job until it ends"));
}

void NodeAgent::MarkStopRequestedLocked() {
  if (!job_id_.empty() && !stop_requested_at_.has_value()) {
    stop_requested_at_ = absl::Now();
    changed_.notify_all();  // the monitor's deadline
  }
}

void NodeAgent::MonitorHealth() {
  bool healthy = true;
  std::unique_lock<std::mutex> lock(mutex_);
  while (!monitor_stopping_) {
    const absl::Time now = absl::Now();
    const absl::Status health = HealthLocked(now);
    if (health.ok() != healthy) {
      healthy = health.ok();
      lock.unlock();
      if (healthy) {
        LOG(WARNING) << "this node is healthy again: its stuck job part ended";
      } else {
        LOG(ERROR) << "this node is unhealthy: " << health.message();
      }
      if (options_.health_changed) options_.health_changed(health);
      lock.lock();
      continue;
    }
    if (healthy && stop_requested_at_.has_value()) {
      changed_.wait_for(
          lock, absl::ToChronoNanoseconds(*stop_requested_at_ + options_.release_timeout - now +
                                          absl::Milliseconds(1)));
    } else {
      changed_.wait(lock);
    }
  }
}

bool NodeAgent::busy() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return !job_id_.empty();
}

void NodeAgent::Handle(const v1::NodeCommand& command) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // An abort acts at once (a launch or a running job may take long); the queue then releases.
    if (command.has_abort() && command.job_id() == job_id_) {
      if (job_ != nullptr) job_->Abort(absl::AbortedError(command.abort().reason()));
      MarkStopRequestedLocked();  // its part has release_timeout to end
    }
    commands_.push_back(command);
  }
  changed_.notify_all();
}

absl::Status NodeAgent::Report(const v1::NodeJobUpdate& update) {
  std::lock_guard<std::mutex> lock(report_mutex_);
  if (orphaned_) return absl::OkStatus();
  return report_(update);
}

void NodeAgent::AbortAll(const std::string& reason) {
  {
    // The coordinator that launched the job is gone: what is left of it (its end, pieces still
    // forwarded while its actors stop) is news to nobody, and a restarted coordinator may run a
    // job of the same id by then.
    std::lock_guard<std::mutex> lock(report_mutex_);
    orphaned_ = true;
  }
  std::string job_id;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (job_id_.empty()) return;
    job_id = job_id_;
    if (job_ != nullptr) job_->Abort(absl::AbortedError(reason));
    MarkStopRequestedLocked();
  }
  v1::NodeCommand release;
  release.set_job_id(job_id);
  release.mutable_release();
  Handle(release);
}

void NodeAgent::Loop() {
  while (true) {
    v1::NodeCommand command;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [this] { return stopping_ || !commands_.empty(); });
      if (commands_.empty()) break;
      command = std::move(commands_.front());
      commands_.pop_front();
    }
    Run(command);
  }
  Release();
  std::lock_guard<std::mutex> lock(mutex_);
  loop_ended_ = true;
  changed_.notify_all();
}

void NodeAgent::ReportEnded(const std::string& job_id, const absl::Status& status) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (ended_reported_) return;
    ended_reported_ = true;
  }
  v1::NodeJobUpdate update;
  update.set_job_id(job_id);
  *update.mutable_ended() = ToJobError(status);
  Report(update).IgnoreError();
}

void NodeAgent::Run(const v1::NodeCommand& command) {
  const std::string& job_id = command.job_id();
  if (command.has_launch()) {
    Launch(job_id, command.launch());
    return;
  }
  std::shared_ptr<NodeJob> job;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (job_id != job_id_) {
      if (!command.has_release() && !command.has_abort()) {
        LOG(WARNING) << "ignored a command for job " << job_id << ", which this node does not run";
      }
      return;
    }
    // Not for a release: Release drops the last reference, which frees the job's memory.
    if (!command.has_release()) job = job_;
  }
  if (command.has_release()) {
    Release();
    return;
  }
  if (job == nullptr) return;  // its launch failed (reported); wait for the release
  if (command.has_connect()) {
    std::map<int, std::string> addresses(command.connect().addresses().begin(),
                                         command.connect().addresses().end());
    // Connect's failures (an address UCX refuses at once) are among the unreachable peers that
    // WaitForPeers reports; waiting for the other peers' probes anyway gives the coordinator the
    // whole picture.
    job->Connect(addresses).IgnoreError();
    const int64_t probe_milliseconds = command.connect().probe_timeout_milliseconds();
    absl::Status status = job->WaitForPeers(
        probe_milliseconds > 0 ? absl::Milliseconds(probe_milliseconds) : kDefaultProbeTimeout);
    if (!status.ok()) {
      if (!job->unreachable_peers().empty()) {
        v1::NodeJobUpdate unreachable;
        unreachable.set_job_id(job_id);
        for (const auto& [peer, why] : job->unreachable_peers()) {
          (*unreachable.mutable_unreachable()->mutable_peers())[peer] = std::string(why.message());
        }
        Report(unreachable).IgnoreError();
      }
      ReportEnded(job_id, status);  // unreachable peers, or aborted while waiting
      return;
    }
    // Communicators spanning nodes (NCCL's) join once every peer is known to be reachable.
    std::map<std::string, std::string> ids(command.connect().communicator_ids().begin(),
                                           command.connect().communicator_ids().end());
    const int64_t join_milliseconds = command.connect().join_timeout_milliseconds();
    if (status = job->JoinCommunicators(ids, join_milliseconds > 0
                                                 ? absl::Milliseconds(join_milliseconds)
                                                 : kDefaultJoinTimeout);
        !status.ok()) {
      ReportEnded(job_id, status);
      return;
    }
    v1::NodeJobUpdate update;
    update.set_job_id(job_id);
    update.set_connected(true);
    Report(update).IgnoreError();
  } else if (command.has_start()) {
    if (absl::Status status = job->Start(); !status.ok()) {
      ReportEnded(job_id, status);
      return;
    }
    waiter_ = std::thread([this, job, job_id, traced = record_events_, path = checkpoint_path_,
                           snapshots = snapshots_] {
      absl::Status status = job->Wait();
      // The periodic parts first: the coordinator hears of them before the node's end.
      if (status.ok() && snapshots != nullptr) status = snapshots->Finish();
      if (status.ok() && !path.empty()) {
        status = options_.checkpoint_roots == nullptr
                     ? absl::PermissionDeniedError(
                           "this node writes no checkpoints: loomd has no --checkpoint-root")
                     : WriteCheckpointPart(job->runtime(), *options_.checkpoint_roots,
                                           CheckpointPartPath(path, job->node()));
      }
      if (traced) ReportTrace(job_id, *job);
      ReportEnded(job_id, status);
      std::lock_guard<std::mutex> lock(mutex_);
      if (job_id_ == job_id) stop_requested_at_.reset();  // its part ended; the release is quick
      changed_.notify_all();
    });
  } else if (command.has_abort()) {
    // Handle aborted the runtime already; a job that never started ends here.
    if (!waiter_.joinable()) {
      ReportEnded(job_id, absl::AbortedError(command.abort().reason()));
      std::lock_guard<std::mutex> lock(mutex_);
      stop_requested_at_.reset();  // nothing of it runs
      changed_.notify_all();
    }
  }
}

void NodeAgent::ReportTrace(const std::string& job_id, NodeJob& job) {
  // Halved while a part does not fit (the limit is the smaller of this node's and the
  // coordinator's), down to a size any message limit allows.
  constexpr int64_t kFirstPartBytes = 8 << 20;
  constexpr int64_t kSmallestPartBytes = 1 << 10;
  const std::string events = ChromeTraceEvents(job.runtime());
  const int64_t acts = static_cast<int64_t>(job.runtime().events().size());
  int64_t part_bytes = kFirstPartBytes;
  size_t offset = 0;
  while (true) {
    v1::NodeJobUpdate update;
    update.set_job_id(job_id);
    v1::NodeTrace* trace = update.mutable_trace();
    const absl::string_view window =
        absl::string_view(events).substr(offset, static_cast<size_t>(part_bytes) + 1);
    const size_t length = TracePartLength(window, part_bytes);
    trace->set_events(std::string(window.substr(0, length)));
    const bool last = offset + length >= events.size();
    trace->set_more(!last);
    if (last) trace->set_acts(acts);
    absl::Status reported = Report(update);
    if (absl::IsResourceExhausted(reported) && part_bytes > kSmallestPartBytes) {
      part_bytes /= 2;
      continue;
    }
    if (absl::IsResourceExhausted(reported)) {
      // Not even a small part fits: the error instead, which ends this node's trace.
      update.mutable_trace()->Clear();
      update.mutable_trace()->set_error(
          absl::StrCat("node ", job.node(), "'s trace of ", acts, " acts: ", reported.message()));
      Report(update).IgnoreError();
      return;
    }
    if (!reported.ok() || last) return;  // not reported: the session is gone, and the job with it
    offset += length;
  }
}

void NodeAgent::Launch(const std::string& job_id, const v1::LaunchNodeJob& launch) {
  Release();  // a previous job the coordinator forgot to release
  {
    // Everything of the previous job happened (Release joined it): report this one.
    std::lock_guard<std::mutex> lock(report_mutex_);
    orphaned_ = false;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_id_ = job_id;
    ended_reported_ = false;
  }
  record_events_ = launch.record_events();
  checkpoint_path_ = launch.checkpoint_path();
  JobOptions options;
  const bool has_variables =
      std::any_of(launch.plan().tasks().begin(), launch.plan().tasks().end(),
                  [](const plan::Task& task) { return task.kind() == plan::VARIABLE; });
  if (!checkpoint_path_.empty() && launch.checkpoint_every_steps() > 0 && has_variables) {
    snapshots_ = std::make_shared<CheckpointSnapshots>(
        launch.plan(), options_.checkpoint_roots, checkpoint_path_, [this, job_id](int64_t step, const absl::Status& written) {
          if (!written.ok()) {
            // Fail the job now, not at its next snapshot or its end (K steps later).
            std::lock_guard<std::mutex> lock(mutex_);
            if (job_ != nullptr && job_id_ == job_id) job_->Abort(written);
            return;
          }
          v1::NodeJobUpdate update;
          update.set_job_id(job_id);
          update.mutable_checkpoint_part()->set_step(step);
          Report(update).IgnoreError();
        });
    options.snapshot_every_steps = launch.checkpoint_every_steps();
    options.variable_snapshot_callback = [snapshots = snapshots_](VariableSnapshot snapshot) {
      return snapshots->Add(std::move(snapshot));
    };
  }
  // Off unless the job asked for a trace: a daemon's jobs may run for days. For the same reason
  // sinks keep no pieces: the coordinator gets those it needs (the forwarded sinks) through the
  // callback below, and the other sinks copy nothing.
  options.record_events = launch.record_events();
  if (launch.has_recorded_steps()) {
    // The runtime counts steps from 0.
    options.recorded_steps = {launch.recorded_steps().first() - 1,
                              launch.recorded_steps().last() - 1};
  }
  options.keep_sink_pieces = false;
  options.reported_sinks.emplace(launch.forward_sinks().begin(), launch.forward_sinks().end());
  options.metrics = options_.metrics;
  options.files = options_.files;
  options.max_recorded_events = options_.max_trace_events_per_job;
  if (launch.stall_timeout_milliseconds() > 0) {
    options.stall_timeout = absl::Milliseconds(launch.stall_timeout_milliseconds());
  }
  if (launch.forward_sinks_size() > 0) {
    options.sink_piece_callback = [this, job_id](const SinkPiece& piece) {
      v1::NodeJobUpdate update;
      update.set_job_id(job_id);
      v1::SinkPieceUpdate* forwarded = update.mutable_piece();
      forwarded->set_sink(piece.sink);
      forwarded->set_input(piece.input);
      forwarded->set_piece(piece.piece);
      forwarded->set_data_type(piece.tensor.data_type);
      for (int64_t dimension : piece.tensor.shape.dimensions()) forwarded->add_shape(dimension);
      forwarded->set_data(reinterpret_cast<const char*>(piece.tensor.bytes.data()),
                          piece.tensor.bytes.size());
      return Report(update);
    };
  }
  if (absl::Status status = SetUpDevices(launch.plan(), &options); !status.ok()) {
    ReportEnded(job_id, status);
    return;
  }
  absl::StatusOr<std::unique_ptr<NodeJob>> job =
      NodeJob::Create(launch.plan(), kernels_, std::move(options));
  if (!job.ok()) {
    ReportEnded(job_id, job.status());
    return;
  }
  v1::NodeJobUpdate update;
  update.set_job_id(job_id);
  update.mutable_launched()->set_address((*job)->address());
  for (const auto& [communicator, id] : (*job)->communicator_ids()) {
    (*update.mutable_launched()->mutable_communicator_ids())[communicator] = id;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = std::shared_ptr<NodeJob>(std::move(*job));
  }
  // Refused (e.g. over the coordinator's message limit): the coordinator hears why at once
  // instead of waiting for its launch timeout.
  if (absl::Status reported = Report(update); !reported.ok()) ReportEnded(job_id, reported);
}

void NodeAgent::Release() {
  std::shared_ptr<NodeJob> job;
  std::string job_id;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job = job_;
    job_id = job_id_;
    MarkStopRequestedLocked();  // cleared below once the part ended and was destroyed
  }
  if (job != nullptr && waiter_.joinable()) {
    job->Abort(absl::AbortedError("released by the coordinator"));  // no-op when it ended
  }
  if (waiter_.joinable()) waiter_.join();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_.reset();
  }
  job.reset();         // the last reference: stops the network, frees the node's memory
  snapshots_.reset();  // after the runtime, which calls it: removes the periodic parts
  {
    // Cleared only now: until here the part may still hold threads (HealthLocked names it).
    std::lock_guard<std::mutex> lock(mutex_);
    job_id_.clear();
    stop_requested_at_.reset();
    changed_.notify_all();
  }
  if (job_id.empty()) return;
  // Give the freed pages back to the system. Without this a worker's resident memory stays near
  // its largest job's after that job: glibc raises its mmap threshold when the first job frees
  // its large buffers, so the next jobs' come from arenas that keep their free pages (measured:
  // docs/ARCHITECTURE.md, "What a worker holds between jobs").
  malloc_trim(0);
  VLOG(1) << "released job " << job_id;
}

}  // namespace loom::daemon
