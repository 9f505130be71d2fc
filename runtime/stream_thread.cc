#include "runtime/stream_thread.h"

#include <pthread.h>
#include <sys/prctl.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace loom {

StreamThread::StreamThread(std::string name, std::unique_ptr<StreamContext> context,
                           JobControl* job, Options options)
    : name_(std::move(name)),
      context_(std::move(context)),
      asynchronous_(context_->is_asynchronous()),
      job_(job),
      options_(options) {}

StreamThread::~StreamThread() {
  Join();
  // Messages nobody will take (an aborted job's, or late network ones) leave the queue gauge.
  batch_.clear();
  if (options_.metrics != nullptr && inbox_.TakeAll(&batch_)) {
    options_.metrics->AddQueuedMessages(options_.kind, -static_cast<int64_t>(batch_.size()));
  }
}

void StreamThread::AddActor(Actor* actor) {
  uint32_t task_index = actor->id().task_index();
  if (position_of_task_.size() <= task_index) position_of_task_.resize(task_index + 1, -1);
  position_of_task_[task_index] = static_cast<int>(actors_.size());
  actors_.push_back(actor);
  queued_.push_back(false);
  finished_counted_.push_back(false);
  actor->set_sender(this);
}

void StreamThread::Start() {
  thread_ = std::thread([this] { Run(); });
}

void StreamThread::Join() {
  if (thread_.joinable()) thread_.join();
}

void StreamThread::Send(const ActorMessage& message) {
  if (job_->ThreadOf(message.destination) == this) {
    // Same thread: no lock, and stream order protects the data even on asynchronous streams.
    local_.push_back(message);
    return;
  }
  if (in_act_) {
    // An act's messages leave when it ends (after its end is recorded; on an asynchronous stream,
    // once its device work completed).
    act_remote_.push_back(message);
  } else if (asynchronous_ && !pending_sends_.empty()) {
    pending_sends_.push_back(PendingSend{nullptr, {message}});
  } else {
    SendRemote(message);
  }
}

void StreamThread::SendRemote(const ActorMessage& message) {
  StreamThread* thread = job_->ThreadOf(message.destination);
  if (thread != nullptr) {
    thread->Deliver(message);
  } else {
    job_->SendToNode(message);
  }
}

void StreamThread::FlushPendingSends() {
  while (!pending_sends_.empty()) {
    PendingSend& front = pending_sends_.front();
    if (front.event != nullptr) {
      absl::StatusOr<bool> complete = front.event->IsComplete();
      if (!complete.ok()) {
        // The work failed: its consumers elsewhere must never hear of the data it was to write.
        job_->Fail(absl::Status(complete.status().code(),
                                absl::StrCat(name_, ": ", complete.status().message())));
        aborted_ = true;
        return;
      }
      if (!*complete) return;
    }
    for (const ActorMessage& message : front.messages) SendRemote(message);
    pending_sends_.pop_front();
  }
}

void StreamThread::AfterChange(Actor* actor) {
  absl::Status status = actor->Advance();
  if (!status.ok()) {
    job_->Fail(absl::Status(status.code(), absl::StrCat("actor '", actor->name(), "' on ", name_,
                                                        ": ", status.message())));
    aborted_ = true;
    return;
  }
  int position = position_of_task_[actor->id().task_index()];
  if (actor->finished()) {
    if (!finished_counted_[position]) {
      finished_counted_[position] = true;
      ++finished_actors_;
    }
    return;
  }
  if (!queued_[position] && actor->CanActNow()) {
    queued_[position] = true;
    ready_.push(ReadyEntry{actor->priority(), next_sequence_++, actor});
  }
}

void StreamThread::Dispatch(const ActorMessage& message, int64_t now) {
  switch (message.type) {
    case MessageType::kAbort:
      aborted_ = true;
      return;
    case MessageType::kDiagnose:
      AnswerDiagnose();
      return;
    default:
      break;
  }
  uint32_t task_index = message.destination.task_index();
  if (task_index >= position_of_task_.size() || position_of_task_[task_index] < 0) {
    // JobRuntime::DeliverFromNetwork and ThreadOf route nothing else here.
    job_->Fail(absl::InternalError(absl::StrCat(name_, ": a message for actor ",
                                                message.destination.ToString(),
                                                ", which is not on this thread")));
    aborted_ = true;
    return;
  }
  Actor* actor = actors_[position_of_task_[task_index]];
  if (absl::Status status = actor->HandleMessage(message); !status.ok()) {
    job_->Fail(absl::Status(status.code(), absl::StrCat("actor '", actor->name(), "' on ", name_,
                                                        " received ", status.message())));
    aborted_ = true;
    return;
  }
  AfterChange(actor);
  actor->AccountTime(now);
}

void StreamThread::ActOnce(Actor* actor) {
  int64_t start = job_->NowNanoseconds();
  busy_.store(true, std::memory_order_relaxed);
  in_act_ = true;
  absl::Status status = actor->Act();
  in_act_ = false;
  busy_.store(false, std::memory_order_relaxed);
  int64_t end = job_->NowNanoseconds();
  progress_.fetch_add(1, std::memory_order_relaxed);
  if (options_.record_events &&
      options_.recorded_steps.Contains(StepOfPiece(actor->task(), actor->current_piece())) &&
      (options_.recorded_events == nullptr ||
       options_.recorded_events->fetch_add(1, std::memory_order_relaxed) <
           options_.max_recorded_events)) {
    events_.push_back(ActEvent{actor->id().task_index(), actor->current_piece(), start, end});
  }
  if (!act_remote_.empty()) {
    if (asynchronous_) {
      pending_sends_.push_back(PendingSend{context_->RecordCompletion(), std::move(act_remote_)});
    } else {
      for (const ActorMessage& message : act_remote_) SendRemote(message);
    }
    act_remote_.clear();
  }
  if (!status.ok()) {
    job_->Fail(absl::Status(
        status.code(), absl::StrCat("actor '", actor->name(), "' on ", name_, " failed on piece ",
                                    actor->current_piece(), ": ", status.message())));
    aborted_ = true;
    return;
  }
  int position = position_of_task_[actor->id().task_index()];
  queued_[position] = false;
  AfterChange(actor);
  actor->AccountBusy(start, end);
}

void StreamThread::AnswerDiagnose() {
  std::string report;
  for (Actor* actor : actors_) {
    if (!actor->finished()) absl::StrAppend(&report, actor->DescribeWait());
  }
  std::lock_guard<std::mutex> lock(diagnose_mutex_);
  diagnosis_ = std::move(report);
  diagnosis_ready_ = true;
  diagnose_answered_.notify_all();
}

std::string StreamThread::Diagnose(absl::Duration timeout) {
  if (exited_.load(std::memory_order_acquire)) return "";
  {
    std::lock_guard<std::mutex> lock(diagnose_mutex_);
    diagnosis_ready_ = false;
  }
  ActorMessage message;
  message.type = MessageType::kDiagnose;
  Deliver(message);
  std::unique_lock<std::mutex> lock(diagnose_mutex_);
  if (!diagnose_answered_.wait_for(lock, absl::ToChronoNanoseconds(timeout),
                                   [this] { return diagnosis_ready_; })) {
    return absl::StrCat("  thread ", name_, " did not answer (inside a kernel?)\n");
  }
  return diagnosis_;
}

void StreamThread::Run() {
  // Linux thread names are at most 15 characters.
  pthread_setname_np(pthread_self(), name_.substr(0, 15).c_str());
  // Sleeps and timed waits on this thread wake when asked, not up to 50 us later.
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  context_->BindToThread();

  int64_t now = job_->NowNanoseconds();
  for (Actor* actor : actors_) {
    AfterChange(actor);
    actor->AccountTime(now);
  }
  while (!aborted_) {
    // 1. Messages: those from this thread's own actors first, then the inbox.
    bool received = false;
    if (!local_.empty() || inbox_.HasMessages()) {
      now = job_->NowNanoseconds();
      while (!local_.empty() && !aborted_) {
        ActorMessage message = local_.front();
        local_.pop_front();
        Dispatch(message, now);
        received = true;
      }
      batch_.clear();
      if (inbox_.TakeAll(&batch_)) {
        if (options_.metrics != nullptr) {
          options_.metrics->AddQueuedMessages(options_.kind, -static_cast<int64_t>(batch_.size()));
        }
        for (const ActorMessage& message : batch_) {
          if (aborted_) break;
          Dispatch(message, now);
        }
        received = true;
      }
      if (received) progress_.fetch_add(1, std::memory_order_relaxed);
    }
    if (aborted_) break;
    // 2. One act of the most urgent ready actor, then back to the messages it caused.
    bool acted = false;
    while (!ready_.empty()) {
      Actor* actor = ready_.top().actor;
      ready_.pop();
      if (!actor->CanActNow() || actor->finished()) {
        queued_[position_of_task_[actor->id().task_index()]] = false;
        continue;
      }
      ActOnce(actor);
      acted = true;
      break;
    }
    if (acted) continue;
    // 3. Device work that completed releases its messages.
    FlushPendingSends();
    if (aborted_) break;
    if (finished_actors_ == static_cast<int>(actors_.size()) && pending_sends_.empty() &&
        local_.empty()) {
      break;
    }
    if (!local_.empty()) continue;
    // 4. Nothing to do: wait for a message (or poll device completions).
    busy_.store(!pending_sends_.empty(), std::memory_order_relaxed);
    inbox_.WaitForMessages(options_.spin_before_park, pending_sends_.empty()
                                                          ? absl::Milliseconds(100)
                                                          : absl::Microseconds(20));
  }
  now = job_->NowNanoseconds();
  for (Actor* actor : actors_) actor->AccountTime(now);
  busy_.store(false, std::memory_order_relaxed);
  exited_.store(true, std::memory_order_release);
  // Answer a diagnosis request that may race with the end.
  AnswerDiagnose();
  job_->ThreadExited();
}

}  // namespace loom
