#ifndef LOOM_RUNTIME_ACTOR_H_
#define LOOM_RUNTIME_ACTOR_H_

// The base class of every actor and what an actor is built from. Actor implements the act rule
// (act when every input has a READY slot and every output a free slot), the bookkeeping of READY,
// FREE and END_OF_DATA messages, exhaustion and time accounting, which the kinds in actors/ refine.
// ActorInit holds an actor's task, registers, stream, memory and per-kind settings; MessageSender
// is how an actor hands messages to its stream thread.

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "core/file_roots.h"
#include "core/tensor.h"
#include "device/stream_context.h"
#include "proto/plan.pb.h"
#include "runtime/actor_id.h"
#include "runtime/device_memory.h"
#include "runtime/event_record.h"
#include "runtime/job_options.h"
#include "runtime/message.h"
#include "runtime/network.h"
#include "runtime/register.h"
#include "runtime/runtime_metrics.h"

namespace loom {

class CollectiveBackend;
class CollectiveTurn;
class KernelRegistry;

// Where an actor's messages go: its stream thread, which routes them.
class MessageSender {
 public:
  virtual ~MessageSender() = default;
  virtual void Send(const ActorMessage& message) = 0;
};

// Everything an actor is built from.
struct ActorInit {
  const plan::Task* task = nullptr;
  ActorId id;
  // In the task's input and output order.
  std::vector<const Register*> inputs;
  std::vector<const Register*> outputs;
  plan::DeviceType device_type = plan::CPU;
  StreamContext* stream = nullptr;
  DeviceMemory* memory = nullptr;
  const KernelRegistry* kernels = nullptr;
  // For the kernels the actor builds (KernelInit::files and KernelInit::ending): JobOptions::files,
  // and the flag the job sets once it is ending (failed, aborted or cancelled). Not owned; they
  // outlive the actor. Null: no file may be opened; never ending.
  const FileRoots* files = nullptr;
  const std::atomic<bool>* ending = nullptr;
  // Task names by task index, for messages that name other actors.
  const std::vector<std::string>* task_names = nullptr;
  // JobOptions::metrics (null: none).
  RuntimeMetrics* metrics = nullptr;
  // COLLECTIVE tasks: the backend of the task's communicator, and the turn order shared by the
  // communicator's collective actors on this stream. Null for other kinds.
  CollectiveBackend* collectives = nullptr;
  CollectiveTurn* collective_turn = nullptr;
  // SINK tasks: JobOptions::sink_piece_callback when this sink reports to it (null or empty: it
  // does not) and keep_sink_pieces.
  const SinkPieceCallback* sink_piece_callback = nullptr;
  bool keep_sink_pieces = true;
  // VARIABLE tasks: JobOptions::snapshot_every_steps and variable_snapshot_callback (0 or null:
  // no snapshots).
  int64_t snapshot_every_steps = 0;
  const VariableSnapshotCallback* variable_snapshot_callback = nullptr;
  // SEND and RECEIVE tasks: the job's network (JobOptions::network), and a way to hand a message
  // to an actor of this node from any thread (network completions).
  Network* network = nullptr;
  std::function<void(const ActorMessage&)> deliver_from_any_thread;
};

// The base of every actor kind. It implements the act rule of DESIGN.md §3: an actor acts when
// every input has a READY slot (and, with Task.input_lookahead, the pieces after it) and every
// output a free slot (kinds may refine CanAct). After an
// act it sends READY to every consumer of what it produced and FREE to the producers of what it
// consumed; a produced slot is free again once every reader returned it.
//
// Termination: END_OF_DATA flows from the sources. An actor that can never act again (by default:
// an input has ended and holds no READY slot) is exhausted: it returns every input slot it holds,
// sends END_OF_DATA to its consumers, and is finished once all its inputs ended and all its slots
// came back.
//
// An actor is touched only by its stream thread: no locks.
class Actor {
 public:
  explicit Actor(const ActorInit& init);
  virtual ~Actor() = default;

  Actor(const Actor&) = delete;
  Actor& operator=(const Actor&) = delete;

  // Called once, before the job starts (kernels are built here). An error rejects the plan.
  virtual absl::Status Initialize() { return absl::OkStatus(); }

  void set_sender(MessageSender* sender) { sender_ = sender; }

  // Whether `message`, which arrived from another node for this actor, fits what this actor can be
  // sent (its kind, register, slot, piece and sender), checked against what never changes once the
  // actor is initialized: any thread may call it. DATA_LOSS saying what is wrong otherwise (the
  // caller names the peer). The default accepts READY / END_OF_DATA for an input register and FREE
  // for an output register, from that register's producer or consumer, with a slot in range.
  virtual absl::Status CheckNetworkMessage(const ActorMessage& message) const;
  // Applies a message (READY, FREE, END_OF_DATA, or a peer message for HandlePeerMessage). An
  // error (a message that does not fit the actor's state: an unknown register, a slot out of range
  // or not held, a second credit for one slot) fails the job: DATA_LOSS naming the sending node
  // when it came from another node, INTERNAL otherwise.
  absl::Status HandleMessage(const ActorMessage& message);
  // Checks for exhaustion and completion; call after HandleMessage and Act.
  absl::Status Advance();

  bool CanActNow() const { return !exhausted_ && CanAct(); }
  // Performs one act. On error the job fails with it.
  absl::Status Act();

  // Accounts the time since the last call to the state the actor was in.
  void AccountTime(int64_t now_nanoseconds);
  void AccountBusy(int64_t start_nanoseconds, int64_t end_nanoseconds);

  bool finished() const { return finished_; }
  ActorId id() const { return id_; }
  const std::string& name() const { return task_->name(); }
  const plan::Task& task() const { return *task_; }
  int32_t priority() const { return task_->priority(); }
  // The piece of the last act (or of the act that failed).
  int64_t current_piece() const { return current_piece_; }
  const ActorSummary& summary() const { return summary_; }
  ActorSummary& mutable_summary() { return summary_; }

  // One line per thing this actor waits for, for stall reports.
  virtual std::string DescribeWait() const;

 protected:
  struct ReadySlot {
    int32_t slot;
    int64_t piece;
  };

  // Whether the actor can act, given it is not exhausted. Default: every input has a READY slot
  // and every output a free slot.
  virtual bool CanAct() const;
  virtual absl::Status DoAct() = 0;
  // Whether the actor can never act again. Default: some input has ended and holds no READY slot.
  virtual bool IsExhausted() const;
  // Called once when the actor becomes exhausted; an error fails the job (e.g. a partial group).
  virtual absl::Status OnExhausted() { return absl::OkStatus(); }

  int num_inputs() const { return static_cast<int>(inputs_.size()); }
  int num_outputs() const { return static_cast<int>(outputs_.size()); }
  bool InputReady(int input) const { return !inputs_[input].ready.empty(); }
  bool InputEnded(int input) const { return inputs_[input].ended; }
  int64_t InputPiece(int input) const { return inputs_[input].ready.front().piece; }
  TensorView InputView(int input) const;
  // Returns the front READY slot of an input to its producer.
  void ConsumeInput(int input);

  bool OutputFree(int output) const { return !outputs_[output].free_slots.empty(); }
  TensorView OutputView(int output) const;
  // Publishes the front free slot of an output as `piece` to every consumer.
  void ProduceOutput(int output, int64_t piece);
  // The same for a given slot (kinds that choose their slots, like RECEIVE); INTERNAL naming the
  // slot when it is not free.
  absl::Status ProduceOutputSlot(int output, int32_t slot, int64_t piece);
  const std::deque<int32_t>& FreeSlots(int output) const { return outputs_[output].free_slots; }
  TensorView OutputSlotView(int output, int32_t slot) const;

  // Messages between the halves of a SEND / RECEIVE pair (kCredit, kSent, kPeerEnd) and network
  // completions (kTransferDone) go to this; the base class takes none (an error). An error fails
  // the job (see HandleMessage).
  virtual absl::Status HandlePeerMessage(const ActorMessage& message);
  // The error for a message this actor cannot take: DATA_LOSS naming the sending node when it came
  // from another node (a forged or corrupt message), INTERNAL otherwise (a bug of this node).
  absl::Status BadMessage(const ActorMessage& message, absl::string_view what) const;
  // Sends such a message (no register) to `destination`, on this node or another.
  void SendPeerMessage(MessageType type, ActorId destination, int32_t slot, int64_t piece);

  // Asks an actor of this actor's thread to look again whether it can act (a kWake message).
  void WakeActor(ActorId actor);

  void set_current_piece(int64_t piece) { current_piece_ = piece; }
  int64_t act_count() const { return summary_.acts; }
  // Whether the act on `piece` works: always, except for a task of the job's evaluation
  // (Task.evaluation_every_steps), which works only in the steps that evaluate and otherwise acts
  // without working (consumes its inputs, produces its outputs as they are).
  bool WorksOn(int64_t piece) const;

  const ActorInit& init() const { return init_; }
  const std::string& TaskName(ActorId id) const;

 private:
  enum class State { kWaitingForInput, kWaitingForOutput, kWaitingForThread, kFinished };

  struct Input {
    const Register* reg;
    std::deque<ReadySlot> ready;
    bool ended = false;
    int32_t lookahead = 0;  // Task.input_lookahead
  };
  struct Output {
    const Register* reg;
    std::deque<int32_t> free_slots;
    std::vector<int32_t> readers_remaining;  // by slot
  };

  State CurrentState() const;
  // Whether `input` holds what the next act needs: a READY slot, and with a lookahead k the
  // pieces after it, up to k more or to the end of its step.
  bool Holds(const Input& input) const;
  // Hands accounted time to the job's metrics, if any.
  void Report(ActorTime time, int64_t nanoseconds);
  void Send(MessageType type, ActorId destination, const Register& reg, int32_t slot,
            int64_t piece);

  ActorInit init_;
  const plan::Task* task_;
  ActorId id_;
  MessageSender* sender_ = nullptr;
  std::vector<Input> inputs_;
  std::vector<Output> outputs_;
  bool exhausted_ = false;
  bool finished_ = false;
  int64_t current_piece_ = 0;

  ActorSummary summary_;
  State accounted_state_ = State::kWaitingForInput;
  int64_t accounted_since_ = -1;
};

}  // namespace loom

#endif  // LOOM_RUNTIME_ACTOR_H_
