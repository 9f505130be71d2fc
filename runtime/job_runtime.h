#ifndef LOOM_RUNTIME_JOB_RUNTIME_H_
#define LOOM_RUNTIME_JOB_RUNTIME_H_

// JobRuntime: runs one node's plan. It builds the memory pools, registers, actors, collective
// backends and stream threads, joins communicators across nodes, starts the job, waits for its end
// or its first failure (detecting stalls), and keeps the events and per-actor summaries. Also
// ActorFactory, the function that builds each task's actor. Used by loomd's node jobs, local runs,
// `loomctl`, tests and benchmarks.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/plan.pb.h"
#include "runtime/actor.h"
#include "runtime/collective_backend.h"
#include "runtime/collective_turn.h"
#include "runtime/device_memory.h"
#include "runtime/event_record.h"
#include "runtime/job_options.h"
#include "runtime/register.h"
#include "runtime/stream_thread.h"
#include "runtime/variable_snapshot.h"

namespace loom {

class KernelRegistry;

// Builds the actor of a task (see actors/actor_factory.h for the standard kinds).
using ActorFactory = std::function<absl::StatusOr<std::unique_ptr<Actor>>(const ActorInit&)>;

// Runs one node's plan: builds registers, actors and stream threads, starts them, waits until
// every actor has finished (END_OF_DATA reached everything) or the job failed, and keeps what
// happened (per-act events and per-actor summaries).
//
//   auto job = JobRuntime::Create(plan, &kernels, MakeActorFactory(), options);
//   absl::Status status = (*job)->Run();
//
// Every failure ends the job with one error that names its cause: a kernel error names the actor
// and the piece; a stall names what each actor waits for; Abort names its reason.
class JobRuntime final : public JobControl {
 public:
  // Validates the plan and builds everything; an invalid plan, an unknown kernel or a plan over a
  // device's memory budget fails here, before any actor starts.
  static absl::StatusOr<std::unique_ptr<JobRuntime>> Create(const plan::Plan& plan,
                                                            const KernelRegistry* kernels,
                                                            ActorFactory actor_factory,
                                                            JobOptions options = {});
  ~JobRuntime() override;

  // Before Start, for a plan whose communicators span nodes with a backend that needs an
  // identifier shared by all ranks (NCCL's unique id; see CollectiveBackend's joining):
  // communicator -> identifier, for those whose rank 0 is on this node (the coordinator merges
  // every node's), and the join itself with the merged identifiers of all nodes. JoinCommunicators
  // begins every join before it waits for any, waits at most `timeout` in all, ends at once on
  // Abort, and fails the job when a join fails. Both are no-ops for plans without such
  // communicators.
  std::map<std::string, std::string> CommunicatorJoinIds() const;
  absl::Status JoinCommunicators(const std::map<std::string, std::string>& ids,
                                 absl::Duration timeout);

  absl::Status Start();
  // Blocks until the job ends; returns its status. Detects stalls.
  absl::Status Wait();
  absl::Status Run();
  // Ends the job with `reason` (for example a cancellation). Safe from any thread. Like Fail,
  // changes nothing once the job ended (every actor thread exited).
  void Abort(absl::Status reason);

  // After Wait: every act recorded, ordered by start time (at most
  // JobOptions::max_recorded_events of them).
  const std::vector<ActEvent>& events() const { return events_; }
  // After Wait: whether acts went unrecorded because the record reached
  // JobOptions::max_recorded_events (events() then holds the first ones each thread made).
  bool events_truncated() const {
    return recorded_events_.load(std::memory_order_relaxed) > options_.max_recorded_events;
  }
  int64_t max_recorded_events() const { return options_.max_recorded_events; }
  // Whether the job is ending badly (failed, aborted or cancelled): what kernels see through
  // KernelInit::ending. Any thread.
  bool ending() const { return ending_.load(std::memory_order_acquire); }
  // After Wait: one summary per actor, in plan order.
  std::vector<ActorSummary> Summaries() const;
  // After Wait: from Start to the end of the last act (to the last thread's exit when acts were
  // not recorded).
  int64_t makespan_nanoseconds() const { return makespan_nanoseconds_; }

  const plan::Plan& plan() const { return plan_; }
  // nullptr when no task has this name.
  const Actor* FindActor(const std::string& task_name) const;
  // nullptr when the plan has no register of this name.
  const Register* FindRegister(const std::string& name) const;
  // After a run (no act can run any more): the value and states of the VARIABLE task `task`,
  // copied to the host (VariableHolder). NOT_FOUND naming the task when the job has no variable
  // task of that name.
  absl::StatusOr<VariableOnHost> CopyVariableToHost(const std::string& task) const;
  const std::vector<std::string>& task_names() const { return task_names_; }
  // Memory per device, in the plan's device order.
  const std::vector<std::shared_ptr<DeviceMemory>>& device_memories() const { return memories_; }
  // The node's host memory: the registers in it (RegisterDesc.host_memory) against
  // Plan.host_memory_budget_bytes.
  const DeviceMemory& host_memory() const { return *host_memory_; }

  // JobControl.
  void Fail(absl::Status status) override;
  StreamThread* ThreadOf(ActorId id) const override {
    if (id.node() != plan_.node() || id.task_index() >= thread_of_task_.size()) return nullptr;
    return thread_of_task_[id.task_index()];
  }
  void SendToNode(const ActorMessage& message) override;
  // Hands a message that arrived from another node to the thread of its destination actor (any
  // thread may call it, before or after Start). Network input is untrusted: a message of a type
  // that does not cross nodes, from this node, for an actor this node does not run, or whose
  // register, slot, piece or sender does not fit its destination (Actor::CheckNetworkMessage)
  // fails the job with DATA_LOSS naming the sending node and what is wrong; it never reaches an
  // actor.
  void DeliverFromNetwork(const ActorMessage& message);
  int64_t NowNanoseconds() const override;
  // The instant NowNanoseconds (and the events' times) count from: Start's.
  std::chrono::steady_clock::time_point start_time() const { return start_time_; }
  void ThreadExited() override;

 private:
  JobRuntime(const plan::Plan& plan, JobOptions options);
  absl::Status Build(const KernelRegistry* kernels, const ActorFactory& actor_factory);
  // One backend per communicator of the plan.
  absl::Status BuildCollectiveBackends();
  // The memory of `device`, one of the plan's.
  std::shared_ptr<DeviceMemory> MemoryOf(const plan::Device& device) const;
  std::string DiagnoseStall();

  plan::Plan plan_;
  // Set when the job has metrics and a network: options_.network points at it (declared before
  // everything that uses the network, so it is destroyed after them).
  std::unique_ptr<Network> metered_network_;
  JobOptions options_;
  // By plan.devices(); shared with the network collectives' staging buffers, which a transfer
  // still in flight may hold after the backends are gone.
  std::vector<std::shared_ptr<DeviceMemory>> memories_;
  std::shared_ptr<DeviceMemory> host_memory_;
  // One buffer per Plan.memory_pools entry, in plan order: the registers placed in it
  // (RegisterDesc.pool) hold slots inside it, so the destructor frees these after the registers.
  struct PoolBuffer {
    std::shared_ptr<DeviceMemory> memory;
    void* base = nullptr;
  };
  std::vector<PoolBuffer> pools_;
  std::vector<std::unique_ptr<Register>> registers_;
  std::vector<std::unique_ptr<Actor>> actors_;  // plan order
  // Built before the threads start and never changed after: Fail reads them from any thread.
  std::vector<std::unique_ptr<CollectiveBackend>> collective_backends_;
  absl::flat_hash_map<std::string, CollectiveBackend*> backend_of_communicator_;
  // One turn order per (stream, communicator), used by that stream's thread only.
  std::vector<std::unique_ptr<CollectiveTurn>> collective_turns_;
  std::vector<std::unique_ptr<StreamThread>> threads_;
  std::vector<StreamThread*> thread_of_task_;  // by task index
  std::vector<const Actor*> actor_of_task_;    // by task index (null: no task of this node)
  std::vector<std::string> task_names_;        // by task index

  std::chrono::steady_clock::time_point start_time_;
  bool started_ = false;
  bool waited_ = false;
  std::vector<ActEvent> events_;
  int64_t makespan_nanoseconds_ = 0;

  std::mutex mutex_;
  std::condition_variable changed_;
  absl::Status status_;                // guarded by mutex_: the first failure
  size_t exited_threads_ = 0;          // guarded by mutex_
  int64_t last_exit_nanoseconds_ = 0;  // guarded by mutex_
  std::atomic<bool> failed_{false};
  // KernelInit::ending: set with the first failure (Fail, Abort).
  std::atomic<bool> ending_{false};
  // Acts the threads would have recorded (StreamThread::Options::recorded_events).
  std::atomic<int64_t> recorded_events_{0};
};

}  // namespace loom

#endif  // LOOM_RUNTIME_JOB_RUNTIME_H_
