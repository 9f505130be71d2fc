#include "runtime/actor.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/device_name.h"

namespace loom {

Actor::Actor(const ActorInit& init) : init_(init), task_(init.task), id_(init.id) {
  for (size_t i = 0; i < init.inputs.size(); ++i) {
    inputs_.push_back(Input{.reg = init.inputs[i],
                            .ready = {},
                            .ended = false,
                            .lookahead = static_cast<int>(i) < task_->input_lookahead_size()
                                             ? task_->input_lookahead(static_cast<int>(i))
                                             : 0});
  }
  for (const Register* reg : init.outputs) {
    Output output{reg, {}, std::vector<int32_t>(reg->num_slots(), 0)};
    for (int32_t slot = 0; slot < reg->num_slots(); ++slot) output.free_slots.push_back(slot);
    outputs_.push_back(std::move(output));
  }
  summary_.name = task_->name();
  summary_.task_index = id_.task_index();
  summary_.kind = task_->kind();
  summary_.stream = StreamName(task_->stream());
}

const std::string& Actor::TaskName(ActorId id) const {
  return (*init_.task_names)[id.task_index()];
}

void Actor::Send(MessageType type, ActorId destination, const Register& reg, int32_t slot,
                 int64_t piece) {
  ActorMessage message;
  message.type = type;
  message.slot = slot;
  message.register_index = reg.index();
  message.piece = piece;
  message.source = id_;
  message.destination = destination;
  sender_->Send(message);
}

void Actor::WakeActor(ActorId actor) {
  ActorMessage message;
  message.type = MessageType::kWake;
  message.source = id_;
  message.destination = actor;
  sender_->Send(message);
}

absl::Status Actor::BadMessage(const ActorMessage& message, absl::string_view what) const {
  const std::string text = absl::StrCat(
      "a ", MessageTypeName(message.type), " message from ",
      message.source.node() == id_.node() ? std::string("this node")
                                          : absl::StrCat("node ", message.source.node()),
      " (sender ", message.source.ToString(), ", register ", message.register_index, ", slot ",
      message.slot, ", piece ", message.piece, "): ", what);
  if (message.source.node() != id_.node()) return absl::DataLossError(text);
  return absl::InternalError(text);
}

absl::Status Actor::CheckNetworkMessage(const ActorMessage& message) const {
  switch (message.type) {
    case MessageType::kReady:
    case MessageType::kEndOfData:
      for (const Input& input : inputs_) {
        if (input.reg->index() != message.register_index) continue;
        if (message.source != input.reg->producer()) {
          return BadMessage(message, absl::StrCat("the sender does not produce register '",
                                                  input.reg->name(), "'"));
        }
        if (message.type == MessageType::kReady &&
            (message.slot < 0 || message.slot >= input.reg->num_slots())) {
          return BadMessage(message, absl::StrCat("register '", input.reg->name(), "' has ",
                                                  input.reg->num_slots(), " slots"));
        }
        return absl::OkStatus();
      }
      return BadMessage(message, "not a register this actor reads");
    case MessageType::kFree:
      for (const Output& output : outputs_) {
        if (output.reg->index() != message.register_index) continue;
        const std::vector<ActorId>& consumers = output.reg->consumers();
        if (std::find(consumers.begin(), consumers.end(), message.source) == consumers.end()) {
          return BadMessage(message, absl::StrCat("the sender does not read register '",
                                                  output.reg->name(), "'"));
        }
        if (message.slot < 0 || message.slot >= output.reg->num_slots()) {
          return BadMessage(message, absl::StrCat("register '", output.reg->name(), "' has ",
                                                  output.reg->num_slots(), " slots"));
        }
        return absl::OkStatus();
      }
      return BadMessage(message, "not a register this actor writes");
    default:
      return BadMessage(message,
                        absl::StrCat("actor '", name(), "' (a ", plan::TaskKind_Name(task_->kind()),
                                     " task) takes no such message from another node"));
  }
}

absl::Status Actor::HandleMessage(const ActorMessage& message) {
  switch (message.type) {
    case MessageType::kWake:
      // Nothing to apply: the thread re-checks the actor after every message.
      return absl::OkStatus();
    case MessageType::kCredit:
    case MessageType::kSent:
    case MessageType::kPeerEnd:
    case MessageType::kTransferDone:
      return HandlePeerMessage(message);
    case MessageType::kReady: {
      // A task may read one register as several inputs; its producer then sends one READY per
      // input, and each goes to the matching input that has the fewest.
      Input* target = nullptr;
      for (Input& input : inputs_) {
        if (input.reg->index() != message.register_index) continue;
        if (target == nullptr || input.ready.size() < target->ready.size()) target = &input;
      }
      if (target == nullptr) break;
      if (message.slot < 0 || message.slot >= target->reg->num_slots()) {
        return BadMessage(message, absl::StrCat("register '", target->reg->name(), "' has ",
                                                target->reg->num_slots(), " slots"));
      }
      if (exhausted_) {
        // Nothing will read it any more: hand it straight back.
        Send(MessageType::kFree, message.source, *target->reg, message.slot, message.piece);
      } else {
        target->ready.push_back(ReadySlot{message.slot, message.piece});
      }
      return absl::OkStatus();
    }
    case MessageType::kFree:
      for (Output& output : outputs_) {
        if (output.reg->index() != message.register_index) continue;
        if (message.slot < 0 || message.slot >= output.reg->num_slots() ||
            output.readers_remaining[message.slot] <= 0) {
          return BadMessage(message, absl::StrCat("slot ", message.slot, " of register '",
                                                  output.reg->name(), "' has no readers"));
        }
        if (--output.readers_remaining[message.slot] == 0) {
          output.free_slots.push_back(message.slot);
        }
        return absl::OkStatus();
      }
      break;
    case MessageType::kEndOfData: {
      bool reads_it = false;
      for (Input& input : inputs_) {
        if (input.reg->index() != message.register_index) continue;
        reads_it = true;
        if (input.ended) continue;
        input.ended = true;
        return absl::OkStatus();
      }
      if (reads_it) return BadMessage(message, "the register had ended already");
      break;
    }
    default:
      return BadMessage(message, "not a message an actor takes");
  }
  return BadMessage(message, absl::StrCat("actor '", name(), "' has no such register"));
}

absl::Status Actor::Advance() {
  if (finished_) return absl::OkStatus();
  absl::Status status;
  if (!exhausted_ && IsExhausted()) {
    exhausted_ = true;
    status = OnExhausted();
    for (Input& input : inputs_) {
      for (const ReadySlot& ready : input.ready) {
        Send(MessageType::kFree, input.reg->producer(), *input.reg, ready.slot, ready.piece);
      }
      input.ready.clear();
    }
    for (Output& output : outputs_) {
      for (ActorId consumer : output.reg->consumers()) {
        Send(MessageType::kEndOfData, consumer, *output.reg, 0, act_count());
      }
    }
  }
  if (exhausted_) {
    bool done = true;
    for (const Input& input : inputs_) done = done && input.ended;
    for (const Output& output : outputs_) {
      done = done && static_cast<int>(output.free_slots.size()) == output.reg->num_slots();
    }
    finished_ = done;
  }
  return status;
}

bool Actor::Holds(const Input& input) const {
  if (input.ready.empty()) return false;
  if (input.lookahead <= 0 || input.ended) return true;
  const int64_t piece = input.ready.front().piece;
  if (piece < 0) return true;  // no step to look into (pieces count from 0)
  const int64_t pieces_per_step = std::max<int64_t>(1, task_->pieces_per_step());
  const int64_t left_in_step = pieces_per_step - 1 - piece % pieces_per_step;
  const int64_t wanted = std::min<int64_t>(input.lookahead, left_in_step) + 1;
  return static_cast<int64_t>(input.ready.size()) >= wanted;
}

bool Actor::CanAct() const {
  for (const Input& input : inputs_) {
    if (!Holds(input)) return false;
  }
  for (const Output& output : outputs_) {
    if (output.free_slots.empty()) return false;
  }
  return true;
}

bool Actor::IsExhausted() const {
  for (const Input& input : inputs_) {
    if (input.ended && input.ready.empty()) return true;
  }
  return false;
}

absl::Status Actor::Act() {
  current_piece_ = act_count();
  absl::Status status = DoAct();
  ++summary_.acts;
  if (init_.metrics != nullptr) init_.metrics->AddActs(task_->kind(), 1);
  return status;
}

bool Actor::WorksOn(int64_t piece) const {
  const int64_t every = task_->evaluation_every_steps();
  if (every <= 0) return true;
  const int64_t pieces_per_step = std::max<int64_t>(1, task_->pieces_per_step());
  // first_step + piece / pieces_per_step, reduced modulo `every` so that it cannot overflow.
  const int64_t step_in_period =
      (task_->first_step() % every + (piece / pieces_per_step) % every) % every;
  return step_in_period == 0;
}

TensorView Actor::InputView(int input) const {
  return inputs_[input].reg->SlotView(inputs_[input].ready.front().slot);
}

void Actor::ConsumeInput(int input) {
  Input& in = inputs_[input];
  ReadySlot ready = in.ready.front();
  in.ready.pop_front();
  Send(MessageType::kFree, in.reg->producer(), *in.reg, ready.slot, ready.piece);
}

TensorView Actor::OutputView(int output) const {
  return outputs_[output].reg->SlotView(outputs_[output].free_slots.front());
}

absl::Status Actor::HandlePeerMessage(const ActorMessage& message) {
  return BadMessage(message, absl::StrCat("actor '", name(), "' is not a send or receive task"));
}

void Actor::SendPeerMessage(MessageType type, ActorId destination, int32_t slot, int64_t piece) {
  ActorMessage message;
  message.type = type;
  message.slot = slot;
  message.piece = piece;
  message.source = id_;
  message.destination = destination;
  sender_->Send(message);
}

TensorView Actor::OutputSlotView(int output, int32_t slot) const {
  return outputs_[output].reg->SlotView(slot);
}

void Actor::ProduceOutput(int output, int64_t piece) {
  // The front free slot is free: this cannot fail.
  ProduceOutputSlot(output, outputs_[output].free_slots.front(), piece).IgnoreError();
}

absl::Status Actor::ProduceOutputSlot(int output, int32_t slot, int64_t piece) {
  Output& out = outputs_[output];
  auto position = std::find(out.free_slots.begin(), out.free_slots.end(), slot);
  if (position == out.free_slots.end()) {
    return absl::InternalError(absl::StrCat("actor '", name(), "': slot ", slot, " of register '",
                                            out.reg->name(), "' is not free"));
  }
  out.free_slots.erase(position);
  const std::vector<ActorId>& consumers = out.reg->consumers();
  if (consumers.empty()) {
    out.free_slots.push_back(slot);
    return absl::OkStatus();
  }
  out.readers_remaining[slot] = static_cast<int32_t>(consumers.size());
  for (ActorId consumer : consumers) Send(MessageType::kReady, consumer, *out.reg, slot, piece);
  return absl::OkStatus();
}

Actor::State Actor::CurrentState() const {
  if (finished_) return State::kFinished;
  if (!exhausted_ && CanAct()) return State::kWaitingForThread;
  for (const Input& input : inputs_) {
    if (!Holds(input) && !input.ended) return State::kWaitingForInput;
  }
  // Draining (waiting for END_OF_DATA or its slots to come back) is not blocked work.
  if (exhausted_) return State::kFinished;
  return State::kWaitingForOutput;
}

void Actor::AccountTime(int64_t now_nanoseconds) {
  if (accounted_since_ >= 0) {
    const int64_t elapsed = now_nanoseconds - accounted_since_;
    switch (accounted_state_) {
      case State::kWaitingForInput:
        summary_.blocked_on_input_nanoseconds += elapsed;
        Report(ActorTime::kBlockedOnInput, elapsed);
        break;
      case State::kWaitingForOutput:
        summary_.blocked_on_output_nanoseconds += elapsed;
        Report(ActorTime::kBlockedOnOutput, elapsed);
        break;
      case State::kWaitingForThread:
        summary_.waiting_for_thread_nanoseconds += elapsed;
        Report(ActorTime::kWaitingForThread, elapsed);
        break;
      case State::kFinished:
        break;
    }
  }
  accounted_since_ = now_nanoseconds;
  accounted_state_ = CurrentState();
}

void Actor::AccountBusy(int64_t start_nanoseconds, int64_t end_nanoseconds) {
  AccountTime(start_nanoseconds);
  summary_.busy_nanoseconds += end_nanoseconds - start_nanoseconds;
  Report(ActorTime::kBusy, end_nanoseconds - start_nanoseconds);
  accounted_since_ = end_nanoseconds;
  accounted_state_ = CurrentState();
}

void Actor::Report(ActorTime time, int64_t nanoseconds) {
  if (init_.metrics != nullptr && nanoseconds > 0) {
    init_.metrics->AddActorTime(task_->kind(), time, nanoseconds);
  }
}

std::string Actor::DescribeWait() const {
  std::string lines;
  for (const Input& input : inputs_) {
    if (Holds(input) || input.ended) continue;
    absl::StrAppend(
        &lines, "  '", name(), "' waits for input register '", input.reg->name(), "' from '",
        TaskName(input.reg->producer()), "' (",
        input.ready.empty()
            ? std::string("no READY slot")
            : absl::StrCat("holds ", input.ready.size(), " READY slots from piece ",
                           input.ready.front().piece, ", looks ", input.lookahead, " ahead"),
        ")\n");
  }
  for (const Output& output : outputs_) {
    if (!output.free_slots.empty()) continue;
    std::string holders;
    for (ActorId consumer : output.reg->consumers()) {
      absl::StrAppend(&holders, holders.empty() ? "" : ", ", "'", TaskName(consumer), "'");
    }
    absl::StrAppend(&lines, "  '", name(), "' waits for a free slot of output register '",
                    output.reg->name(), "' (all ", output.reg->num_slots(),
                    " slots held by readers ", holders, ")\n");
  }
  if (lines.empty()) {
    absl::StrAppend(&lines, "  '", name(), "' is ", exhausted_ ? "draining" : "able to act", "\n");
  }
  return lines;
}

}  // namespace loom
