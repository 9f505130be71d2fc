#include "actors/network_actors.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace loom {

Network::Tag ReceiveSlotTag(uint32_t receive_task_index, int32_t slot) {
  return (static_cast<Network::Tag>(receive_task_index) << 20) | static_cast<Network::Tag>(slot);
}

namespace {

ActorId PeerId(const plan::Task& task) {
  return ActorId::Make(task.peer().stream(), task.peer().index());
}

// Hands a network completion to `actor`'s thread; `status` is the transfer's, kept in `result`.
std::function<void(absl::Status)> CompletionFor(const ActorInit& init, ActorId actor, int32_t slot,
                                                std::shared_ptr<absl::Status> result) {
  return [deliver = init.deliver_from_any_thread, actor, slot,
          result = std::move(result)](absl::Status status) {
    *result = std::move(status);
    ActorMessage message;
    message.type = MessageType::kTransferDone;
    message.slot = slot;
    message.source = actor;
    message.destination = actor;
    deliver(message);
  };
}

}  // namespace

// --- SendActor -----------------------------------------------------------------------------------

absl::Status SendActor::Initialize() {
  peer_ = PeerId(task());
  return absl::OkStatus();
}

bool SendActor::CanAct() const {
  return transfer_done_ || (!in_flight_ && InputReady(0) && !credits_.empty());
}

bool SendActor::IsExhausted() const {
  return InputEnded(0) && !InputReady(0) && !in_flight_ && !transfer_done_;
}

absl::Status SendActor::CheckNetworkMessage(const ActorMessage& message) const {
  if (message.type != MessageType::kCredit) {
    return BadMessage(message, absl::StrCat("send task '", name(), "' takes only credits"));
  }
  if (message.source != peer_) {
    return BadMessage(message, absl::StrCat("send task '", name(), "' takes credits only from '",
                                            task().peer().task(), "' (", peer_.ToString(), ")"));
  }
  if (message.slot < 0 || message.slot >= kMaxReceiveSlots) {
    return BadMessage(message, absl::StrCat("a receive register has at most ",
                                            kMaxReceiveSlots - 1, " slots"));
  }
  return absl::OkStatus();
}

absl::Status SendActor::HandlePeerMessage(const ActorMessage& message) {
  if (message.type == MessageType::kCredit) {
    if (absl::Status status = CheckNetworkMessage(message); !status.ok()) return status;
    if ((in_flight_ && in_flight_slot_ == message.slot) ||
        std::find(credits_.begin(), credits_.end(), message.slot) != credits_.end()) {
      return BadMessage(message, "a second credit for a slot already credited");
    }
    credits_.push_back(message.slot);
    return absl::OkStatus();
  }
  if (message.type == MessageType::kTransferDone && message.source == id()) {
    transfer_done_ = true;
    return absl::OkStatus();
  }
  return Actor::HandlePeerMessage(message);
}

absl::Status SendActor::DoAct() {
  if (transfer_done_) {
    transfer_done_ = false;
    in_flight_ = false;
    int64_t piece = InputPiece(0);
    set_current_piece(piece);
    if (!transfer_status_->ok()) {
      return absl::Status(transfer_status_->code(),
                          absl::StrCat("sending to '", task().peer().task(), "' on node ",
                                       peer_.node(), ": ", transfer_status_->message()));
    }
    ConsumeInput(0);
    SendPeerMessage(MessageType::kSent, peer_, in_flight_slot_, piece);
    ++sent_;
  }
  if (in_flight_ || !InputReady(0) || credits_.empty()) return absl::OkStatus();
  set_current_piece(InputPiece(0));
  in_flight_slot_ = credits_.front();
  credits_.pop_front();
  TensorView view = InputView(0);
  transfer_status_ = std::make_shared<absl::Status>();
  absl::Status queued =
      init().network->SendData(peer_.node(), ReceiveSlotTag(peer_.task_index(), in_flight_slot_),
                               view.data, static_cast<size_t>(view.ByteSize()),
                               CompletionFor(init(), id(), in_flight_slot_, transfer_status_));
  if (!queued.ok()) {
    return absl::Status(queued.code(),
                        absl::StrCat("sending to '", task().peer().task(), "' on node ",
                                     peer_.node(), ": ", queued.message()));
  }
  in_flight_ = true;
  return absl::OkStatus();
}

absl::Status SendActor::OnExhausted() {
  SendPeerMessage(MessageType::kPeerEnd, peer_, 0, sent_);
  return absl::OkStatus();
}

std::string SendActor::DescribeWait() const {
  if (in_flight_ && !transfer_done_) {
    return absl::StrCat("  '", name(), "' waits for its transfer to '", task().peer().task(),
                        "' on node ", peer_.node(), " to complete\n");
  }
  if (InputReady(0) && credits_.empty()) {
    return absl::StrCat("  '", name(), "' waits for a free slot (credit) of '",
                        task().peer().task(), "' on node ", peer_.node(), "\n");
  }
  return Actor::DescribeWait();
}

// --- ReceiveActor --------------------------------------------------------------------------------

absl::Status ReceiveActor::Initialize() {
  peer_ = PeerId(task());
  const int32_t num_slots = static_cast<int32_t>(FreeSlots(0).size());
  if (num_slots >= kMaxReceiveSlots) {
    return absl::InvalidArgumentError(absl::StrCat("task '", name(), "': ", num_slots,
                                                   " slots; a receive register has at most ",
                                                   kMaxReceiveSlots - 1));
  }
  slots_.resize(num_slots);
  return absl::OkStatus();
}

bool ReceiveActor::HasUnpostedSlot() const {
  for (int32_t slot : FreeSlots(0)) {
    if (!slots_[slot].posted) return true;
  }
  return false;
}

bool ReceiveActor::FrontArrived() const {
  return !announced_.empty() && slots_[announced_.front().slot].arrived;
}

bool ReceiveActor::CanAct() const {
  return failed_slot_ >= 0 || HasUnpostedSlot() || FrontArrived();
}

absl::Status ReceiveActor::FailedReceive() const {
  const absl::Status& status = *slots_[failed_slot_].status;
  return absl::Status(status.code(),
                      absl::StrCat("receiving from '", task().peer().task(), "' on node ",
                                   peer_.node(), ": ", status.message()));
}

bool ReceiveActor::IsExhausted() const {
  return peer_ended_ && announced_.empty() && received_ == peer_sent_;
}

absl::Status ReceiveActor::CheckNetworkMessage(const ActorMessage& message) const {
  if (message.type != MessageType::kSent && message.type != MessageType::kPeerEnd) {
    return BadMessage(message, absl::StrCat("receive task '", name(),
                                            "' takes only announcements and the end"));
  }
  if (message.source != peer_) {
    return BadMessage(message, absl::StrCat("receive task '", name(), "' takes messages only from '",
                                            task().peer().task(), "' (", peer_.ToString(), ")"));
  }
  if (message.type == MessageType::kSent &&
      (message.slot < 0 || message.slot >= static_cast<int32_t>(slots_.size()))) {
    return BadMessage(message, absl::StrCat("the register of '", name(), "' has ", slots_.size(),
                                            " slots"));
  }
  if (message.piece < 0) return BadMessage(message, "a negative piece");
  return absl::OkStatus();
}

absl::Status ReceiveActor::HandlePeerMessage(const ActorMessage& message) {
  switch (message.type) {
    case MessageType::kSent: {
      if (absl::Status status = CheckNetworkMessage(message); !status.ok()) return status;
      Slot& slot = slots_[message.slot];
      if (peer_ended_) return BadMessage(message, "an announcement after the sender's end");
      if (!slot.posted || slot.announced) {
        return BadMessage(message, slot.posted ? "the slot was announced already"
                                               : "the slot has no receive posted (no credit)");
      }
      slot.announced = true;
      announced_.push_back(Announced{message.slot, message.piece});
      return absl::OkStatus();
    }
    case MessageType::kTransferDone:
      if (message.source == id() && message.slot >= 0 &&
          message.slot < static_cast<int32_t>(slots_.size())) {
        Slot& slot = slots_[message.slot];
        slot.arrived = true;
        // Fail at once: no kSent may ever come for this slot.
        if (!slot.status->ok() && failed_slot_ < 0) failed_slot_ = message.slot;
        return absl::OkStatus();
      }
      break;
    case MessageType::kPeerEnd: {
      if (absl::Status status = CheckNetworkMessage(message); !status.ok()) return status;
      if (peer_ended_) return BadMessage(message, "a second end");
      const int64_t announced = received_ + static_cast<int64_t>(announced_.size());
      if (message.piece < announced) {
        return BadMessage(message, absl::StrCat("an end after ", message.piece, " pieces, but ",
                                                announced, " were announced"));
      }
      peer_ended_ = true;
      peer_sent_ = message.piece;
      return absl::OkStatus();
    }
    default:
      break;
  }
  return Actor::HandlePeerMessage(message);
}

absl::Status ReceiveActor::PostReceive(int32_t slot) {
  Slot& state = slots_[slot];
  state.posted = true;
  state.arrived = false;
  state.announced = false;
  state.status = std::make_shared<absl::Status>();
  TensorView view = OutputSlotView(0, slot);
  absl::Status queued = init().network->ReceiveData(
      ReceiveSlotTag(id().task_index(), slot), view.data, static_cast<size_t>(view.ByteSize()),
      CompletionFor(init(), id(), slot, state.status));
  if (!queued.ok()) {
    return absl::Status(queued.code(),
                        absl::StrCat("posting a receive for slot ", slot, ": ", queued.message()));
  }
  SendPeerMessage(MessageType::kCredit, peer_, slot, 0);
  return absl::OkStatus();
}

absl::Status ReceiveActor::DoAct() {
  if (failed_slot_ >= 0) return FailedReceive();
  // An act that only grants credits belongs with the last piece published (the first with the
  // first piece), not with its act count: its trace event and step say so.
  set_current_piece(std::max<int64_t>(received_ - 1, 0));
  // Publish what arrived, in the order it was sent.
  while (FrontArrived()) {
    Announced front = announced_.front();
    Slot& state = slots_[front.slot];
    set_current_piece(front.piece);
    announced_.pop_front();
    state.posted = false;
    state.arrived = false;
    state.announced = false;
    if (absl::Status status = ProduceOutputSlot(0, front.slot, front.piece); !status.ok()) {
      return status;
    }
    ++received_;
  }
  // Grant a credit for every free slot not yet posted (at the start: all of them).
  std::vector<int32_t> unposted;
  for (int32_t slot : FreeSlots(0)) {
    if (!slots_[slot].posted) unposted.push_back(slot);
  }
  for (int32_t slot : unposted) {
    if (absl::Status status = PostReceive(slot); !status.ok()) return status;
  }
  return absl::OkStatus();
}

std::string ReceiveActor::DescribeWait() const {
  if (!announced_.empty()) {
    return absl::StrCat("  '", name(), "' waits for the bytes of piece ", announced_.front().piece,
                        " from '", task().peer().task(), "' on node ", peer_.node(), "\n");
  }
  if (!FreeSlots(0).empty()) {
    return absl::StrCat("  '", name(), "' waits for a piece from '", task().peer().task(),
                        "' on node ", peer_.node(), " (", FreeSlots(0).size(), " slots granted)\n");
  }
  return Actor::DescribeWait();
}

}  // namespace loom
