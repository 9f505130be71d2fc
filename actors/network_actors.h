#ifndef LOOM_ACTORS_NETWORK_ACTORS_H_
#define LOOM_ACTORS_NETWORK_ACTORS_H_

// The two actors that move a register between nodes (SEND and RECEIVE tasks): SendActor on the
// producer's node and ReceiveActor on the consumer's, which trade credits (free, posted receive
// slots) and pieces over the job's Network. Also the transfer tag of a receive slot
// (ReceiveSlotTag) and the most slots a RECEIVE register may have (kMaxReceiveSlots).

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "runtime/actor.h"

namespace loom {

// The transfer tag of slot `slot` of a RECEIVE task's register: unique on the receiving node (task
// indices are unique in a job), and never with Network::kCollectiveTagBit set.
Network::Tag ReceiveSlotTag(uint32_t receive_task_index, int32_t slot);
// Slots a RECEIVE register may have (the tag keeps 20 bits for the slot).
inline constexpr int32_t kMaxReceiveSlots = 1 << 20;

// A register read on another node moves with two actors (DESIGN.md §4): a SEND on the producer's
// node reads it like any consumer; a RECEIVE on the consumer's node owns the destination register,
// whose slots are the credits that cross the network.
//
//   RECEIVE posts a receive for each free slot, then sends kCredit(slot) to SEND.
//   SEND, holding an input piece and a credit, transfers the piece into that remote slot; once
//   the transfer completed it returns the input slot to its producer and sends kSent(slot, piece).
//   RECEIVE publishes the slot to its consumers when both the bytes and kSent arrived; when the
//   consumers return it, it is posted again and its credit goes back.
//   At the end SEND sends kPeerEnd; RECEIVE ends its output once every announced piece arrived.
//
// So a sender only ever transfers into a free remote slot, and memory in flight is bounded by the
// receive register's slots. One transfer per SEND is in flight at a time (pieces arrive in order).
//
// Messages from the peer are untrusted (CheckNetworkMessage, HandlePeerMessage): a credit must name
// a slot a receive register may have and not one already credited; an announcement a slot of the
// register whose receive is posted and not yet announced; an end a count no smaller than what
// arrived. Anything else fails the job with DATA_LOSS naming the peer node.
class SendActor final : public Actor {
 public:
  using Actor::Actor;
  absl::Status Initialize() override;
  std::string DescribeWait() const override;
  absl::Status CheckNetworkMessage(const ActorMessage& message) const override;

 protected:
  bool CanAct() const override;
  absl::Status DoAct() override;
  bool IsExhausted() const override;
  absl::Status OnExhausted() override;
  absl::Status HandlePeerMessage(const ActorMessage& message) override;

 private:
  ActorId peer_;
  std::deque<int32_t> credits_;
  bool in_flight_ = false;
  bool transfer_done_ = false;
  int32_t in_flight_slot_ = 0;
  // Written by the network thread before it delivers kTransferDone.
  std::shared_ptr<absl::Status> transfer_status_;
  int64_t sent_ = 0;
};

class ReceiveActor final : public Actor {
 public:
  using Actor::Actor;
  absl::Status Initialize() override;
  std::string DescribeWait() const override;
  absl::Status CheckNetworkMessage(const ActorMessage& message) const override;

 protected:
  bool CanAct() const override;
  absl::Status DoAct() override;
  bool IsExhausted() const override;
  absl::Status HandlePeerMessage(const ActorMessage& message) override;

 private:
  struct Slot {
    bool posted = false;
    bool arrived = false;
    // A kSent named it since it was posted.
    bool announced = false;
    // Written by the network thread before it delivers kTransferDone.
    std::shared_ptr<absl::Status> status;
  };
  struct Announced {
    int32_t slot;
    int64_t piece;
  };

  bool HasUnpostedSlot() const;
  bool FrontArrived() const;
  // The error of a receive that failed (the peer or the network is lost), announced or not.
  absl::Status FailedReceive() const;
  absl::Status PostReceive(int32_t slot);

  ActorId peer_;
  std::vector<Slot> slots_;
  std::deque<Announced> announced_;  // kSent, in order
  int32_t failed_slot_ = -1;
  bool peer_ended_ = false;
  int64_t peer_sent_ = 0;
  int64_t received_ = 0;
};

}  // namespace loom

#endif  // LOOM_ACTORS_NETWORK_ACTORS_H_
