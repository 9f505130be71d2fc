#ifndef LOOM_RUNTIME_STREAM_THREAD_H_
#define LOOM_RUNTIME_STREAM_THREAD_H_

// StreamThread: the OS thread of one stream. It owns the stream's actors, drains their inbox, lets
// the ready actor with the highest priority act first, and holds back the messages of an
// asynchronous act until its device work completed. JobControl is what these threads see of their
// job; JobRuntime implements it.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <queue>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "core/plan_steps.h"
#include "device/stream_context.h"
#include "runtime/actor.h"
#include "runtime/event_record.h"
#include "runtime/message_queue.h"
#include "runtime/runtime_metrics.h"

namespace loom {

class StreamThread;

// What stream threads see of their job. Implemented by JobRuntime.
class JobControl {
 public:
  virtual ~JobControl() = default;
  // Ends the job with `status` (the first failure wins) and aborts every thread.
  virtual void Fail(absl::Status status) = 0;
  // The thread that runs the actor with this id; nullptr for an actor on another node.
  virtual StreamThread* ThreadOf(ActorId id) const = 0;
  // Sends a message to an actor on another node (over the job's Network).
  virtual void SendToNode(const ActorMessage& message) = 0;
  // Nanoseconds since the job started.
  virtual int64_t NowNanoseconds() const = 0;
  // Called by a stream thread as the last thing it does.
  virtual void ThreadExited() = 0;
};

// One OS thread per stream. It owns its actors and drains one inbox; among the actors able to
// act, the one with the highest priority (then the longest waiting) goes first.
class StreamThread final : public MessageSender {
 public:
  struct Options {
    absl::Duration spin_before_park = absl::Microseconds(50);
    bool record_events = true;
    // With record_events: the steps whose acts are recorded (JobOptions::recorded_steps).
    RecordedSteps recorded_steps;
    // JobOptions::metrics (null: none), and the kind of this thread's stream for its queue depth.
    RuntimeMetrics* metrics = nullptr;
    plan::StreamKind kind = plan::STREAM_COMPUTE;
    // With record_events: the job's count of acts to record, shared by its threads (each act it
    // would record adds one), and how many of them are kept (JobOptions::max_recorded_events).
    // Null: every one is kept.
    std::atomic<int64_t>* recorded_events = nullptr;
    int64_t max_recorded_events = 0;
  };

  StreamThread(std::string name, std::unique_ptr<StreamContext> context, JobControl* job,
               Options options);
  ~StreamThread() override;

  // Before Start only.
  void AddActor(Actor* actor);
  void Start();
  void Join();

  // Delivers a message to this thread (any thread may call it).
  void Deliver(const ActorMessage& message) {
    if (options_.metrics != nullptr) options_.metrics->AddQueuedMessages(options_.kind, 1);
    inbox_.Push(message);
  }
  // MessageSender: called by this thread's actors.
  void Send(const ActorMessage& message) override;

  const std::string& name() const { return name_; }
  StreamContext* context() const { return context_.get(); }

  // Stall detection (any thread): a counter that moves with every act and message, and whether
  // the thread is inside a kernel or waits for device work.
  int64_t progress() const { return progress_.load(std::memory_order_relaxed); }
  bool busy() const { return busy_.load(std::memory_order_relaxed); }

  // Asks the thread what its unfinished actors wait for; empty if it does not answer in time.
  std::string Diagnose(absl::Duration timeout);

  // After Join.
  std::vector<ActEvent> TakeEvents() { return std::move(events_); }

 private:
  struct ReadyEntry {
    int32_t priority;
    uint64_t sequence;
    Actor* actor;
    bool operator<(const ReadyEntry& other) const {
      if (priority != other.priority) return priority < other.priority;
      return sequence > other.sequence;
    }
  };
  // Messages that may leave only once an asynchronous act's work has completed.
  struct PendingSend {
    std::unique_ptr<CompletionEvent> event;  // null: as soon as everything before it has left
    std::vector<ActorMessage> messages;
  };

  void Run();
  void Dispatch(const ActorMessage& message, int64_t now);
  void AfterChange(Actor* actor);
  void ActOnce(Actor* actor);
  void SendRemote(const ActorMessage& message);
  // Sends the pending messages whose work completed, in order; a failed event fails the job.
  void FlushPendingSends();
  void AnswerDiagnose();

  const std::string name_;
  std::unique_ptr<StreamContext> context_;
  const bool asynchronous_;
  JobControl* const job_;
  const Options options_;

  std::vector<Actor*> actors_;
  std::vector<bool> queued_;            // by position in actors_: in ready_
  std::vector<bool> finished_counted_;  // by position in actors_
  std::vector<int> position_of_task_;
  int finished_actors_ = 0;
  bool aborted_ = false;
  bool in_act_ = false;
  std::priority_queue<ReadyEntry> ready_;
  uint64_t next_sequence_ = 0;
  std::deque<ActorMessage> local_;
  std::vector<ActorMessage> batch_;
  std::vector<ActorMessage> act_remote_;  // messages to other threads from the current act
  std::deque<PendingSend> pending_sends_;
  std::vector<ActEvent> events_;

  MessageQueue inbox_;
  std::thread thread_;
  std::atomic<int64_t> progress_{0};
  std::atomic<bool> busy_{false};
  std::atomic<bool> exited_{false};

  std::mutex diagnose_mutex_;
  std::condition_variable diagnose_answered_;
  std::string diagnosis_;         // guarded by diagnose_mutex_
  bool diagnosis_ready_ = false;  // guarded by diagnose_mutex_
};

}  // namespace loom

#endif  // LOOM_RUNTIME_STREAM_THREAD_H_
