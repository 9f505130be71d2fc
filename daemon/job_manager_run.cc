// One job's run on its nodes: launch, connect, start, the checkpoints saved while it runs, and its
// end; the nodes' updates about the running job.

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/tensor.h"
#include "daemon/job_checkpoint.h"
#include "daemon/job_manager.h"
#include "daemon/job_run.h"
#include "daemon/reachability.h"
#include "daemon/step_tracker.h"
#include "glog/logging.h"
#include "google/protobuf/util/time_util.h"
#include "node/step_collector.h"
#include "rpc/grpc_status.h"

namespace loom::daemon {
namespace {

using google::protobuf::util::TimeUtil;

// How often a running job's record is written for its steps (state changes: always).
constexpr absl::Duration kPersistStepsEvery = absl::Seconds(1);

}  // namespace

void JobManager::RunJob(const std::shared_ptr<JobRecord>& record) {
  // Read without the lock: the compiled job never changes after Submit, and goes only after this
  // returns (WorkerLoop).
  const compiler::CompiledJob& compiled = *record->compiled;
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
            absl::MutexLock lock(&mutex_);
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
          absl::MutexLock lock(&mutex_);
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
    absl::MutexLock lock(&mutex_);
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
    absl::MutexLock lock(&mutex_);
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
      absl::MutexLock lock(&mutex_);
      for (int node : participants) {
        (*message.mutable_connect()->mutable_addresses())[node] = record->nodes[node].address;
        for (const auto& [communicator, id] : record->nodes[node].communicator_ids) {
          (*message.mutable_connect()->mutable_communicator_ids())[communicator] = id;
        }
      }
      message.mutable_connect()->set_probe_timeout_milliseconds(
          absl::ToInt64Milliseconds(options_.probe_timeout));
      message.mutable_connect()->set_join_timeout_milliseconds(
          absl::ToInt64Milliseconds(JoinTimeout(options_.launch_timeout, options_.probe_timeout)));
    });
    for (int node : participants) send(node, connect);
    ok = WaitForNodes(
        record.get(), [](const JobRecord::NodeProgress& node) { return node.connected; },
        options_.launch_timeout, "connecting");
    if (!ok) NameUnreachableNodes(record.get(), participants);
  }
  if (ok) {
    {
      absl::MutexLock lock(&mutex_);
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
    absl::MutexLock lock(&mutex_);
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
        absl::MutexLock lock(&mutex_);
        ended = record->nodes[node].ended;
      }
      if (!ended) {
        send(node, command([&](v1::NodeCommand& message) {
               message.mutable_abort()->set_reason(std::string(error.message()));
             }));
      }
    }
    absl::MutexLock lock(&mutex_);
    auto all_ended = [&] {
      for (const JobRecord::NodeProgress& node : record->nodes) {
        if (!node.ended) return false;
      }
      return true;
    };
    const absl::Time deadline = absl::Now() + options_.abort_timeout;
    while (!all_ended()) {
      if (changed_.WaitWithDeadline(&mutex_, deadline)) break;  // timed out
    }
  }
  // A failed job's nodes have ended (or had their moment): remove the parts some of them wrote.
  if (!error.ok() && !checkpoint_path.empty() && options_.checkpoint_roots != nullptr) {
    RemoveCheckpointParts(*options_.checkpoint_roots, checkpoint_path, participants);
  }
  // The end barrier passed (or the job failed): every node frees the job's memory.
  for (int node : participants) {
    cluster_->Send(node, command([](v1::NodeCommand& message) { message.mutable_release(); }))
        .IgnoreError();  // a node that left has nothing to release
  }
  cluster_->SetRunningJob("", {});
  KeepTraceOf(record.get());
  {
    absl::MutexLock lock(&mutex_);
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
  absl::MutexLock lock(&mutex_);
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
    while (!settled()) changed_.Wait(&mutex_);
  } else {
    const absl::Time until = absl::Now() + deadline;
    while (!settled()) {
      if (changed_.WaitWithDeadline(&mutex_, until)) {  // timed out
        finished = settled();
        break;
      }
    }
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
    if (options_.checkpoint_roots == nullptr) return;
    for (const auto& [step, nodes] : parts) {
      RemoveCheckpointParts(*options_.checkpoint_roots,
                            StepPartsPath(record->checkpoint_path, step), nodes);
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
      absl::MutexLock lock(&mutex_);
      // Once every node ended, the checkpoint at the end replaces any still to be assembled.
      if (!std::all_of(record->nodes.begin(), record->nodes.end(), ended)) step = complete_step();
    }
    if (step == 0) break;
    absl::Status saved =
        SaveCheckpoint(record, writers, StepPartsPath(record->checkpoint_path, step), step);
    std::vector<std::pair<int64_t, std::vector<int>>> done;
    {
      absl::MutexLock lock(&mutex_);
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
    absl::MutexLock lock(&mutex_);
    left = take_parts_up_to(std::numeric_limits<int64_t>::max());
  }
  remove(left);
  return ok;
}

absl::Status JobManager::SaveCheckpoint(JobRecord* record, const std::vector<int>& nodes,
                                        absl::string_view parts, int64_t step) {
  const compiler::CompiledJob& compiled = *record->compiled;
  const int64_t steps_taken = compiled.job.initial_state().first_step() + step;
  const std::string& path = record->checkpoint_path;
  const absl::Time start = absl::Now();
  CheckpointProgress progress =
      JobCheckpointProgress(compiled.job, compiled.result.plan.job_name(), steps_taken);
  {
    // The job's mark in the file: a later save of this job may replace it, another job may not
    // (without overwrite_checkpoint).
    absl::MutexLock lock(&mutex_);
    progress.metadata[kWriterKey] =
        CheckpointWriter(record->id, TimeUtil::ToString(record->info.submit_time()));
  }
  absl::Status status =
      options_.checkpoint_roots == nullptr
          ? absl::PermissionDeniedError(
                "this coordinator writes no checkpoints (no "
                "--checkpoint-root given)")
          : AssembleCheckpointParts(*options_.checkpoint_roots, compiled.result.plan, nodes, parts,
                                    path, progress, record->overwrite_checkpoint);
  if (!status.ok()) {
    return absl::Status(status.code(),
                        absl::StrCat("saving the checkpoint '", path, "' after step ", steps_taken,
                                     ": ", status.message()));
  }
  const absl::Duration took = absl::Now() - start;
  LOG(INFO) << "job " << record->id << ": saved its checkpoint after step " << steps_taken << " to "
            << path << " in " << absl::FormatDuration(took);
  if (options_.metrics != nullptr) options_.metrics->CheckpointSaved(absl::ToDoubleSeconds(took));
  absl::MutexLock lock(&mutex_);
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
    absl::MutexLock lock(&mutex_);
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
  changed_.SignalAll();
}

void JobManager::NameUnreachableNodes(JobRecord* record, const std::vector<int>& participants) {
  absl::MutexLock lock(&mutex_);
  auto reported = [&] {
    for (int node : participants) {
      if (!record->nodes[node].unreachable.empty()) return true;
    }
    return false;
  };
  if (record->cancel_requested || !reported()) return;
  // Every node waits as long for its peers' probes; the last reports come soon after the first.
  auto all_reported = [&] {
    for (int node : participants) {
      const JobRecord::NodeProgress& progress = record->nodes[node];
      if (!progress.connected && !progress.ended) return false;
    }
    return true;
  };
  const absl::Time deadline = absl::Now() + (options_.probe_timeout + absl::Seconds(2));
  while (!all_reported()) {
    if (changed_.WaitWithDeadline(&mutex_, deadline)) break;  // timed out
  }
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
    absl::MutexLock lock(&mutex_);
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
      absl::MutexLock lock(&mutex_);
      // Only from a node of the job still running it, which saves checkpoints while it runs.
      if (running_ == nullptr || running_->id != update.job_id() ||
          running_->checkpoint_every_steps == 0 || node < 0 ||
          node >= static_cast<int>(running_->nodes.size()) || running_->nodes[node].ended) {
        return;
      }
      running_->checkpoint_parts[update.checkpoint_part().step()].insert(node);
    }
    changed_.SignalAll();
    return;
  }
  if (update.has_piece()) {
    std::shared_ptr<StepTracker> tracker;
    std::shared_ptr<FetchStream> fetch_stream;
    {
      absl::MutexLock lock(&mutex_);
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
    absl::MutexLock lock(&mutex_);
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
  changed_.SignalAll();
}

void JobManager::OnNodeLost(int node, const absl::Status& reason) {
  std::string job_id;
  {
    absl::MutexLock lock(&mutex_);
    if (running_ == nullptr) return;
    job_id = running_->id;
  }
  OnNodeEnded(job_id, node, reason);
}

}  // namespace loom::daemon
