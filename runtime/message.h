#ifndef LOOM_RUNTIME_MESSAGE_H_
#define LOOM_RUNTIME_MESSAGE_H_

// The messages between actors: MessageType (READY, FREE and END_OF_DATA, commands to threads,
// wake-ups, the SEND/RECEIVE protocol and network completions) and ActorMessage, the small
// fixed-size message that stream threads route and the Network carries between nodes.

#include <cstdint>

#include "runtime/actor_id.h"

namespace loom {

enum class MessageType : uint8_t {
  // Producer -> consumer: slot `slot` of register `register_index` holds piece `piece`.
  kReady,
  // Consumer -> producer: the consumer is done reading slot `slot` of register `register_index`.
  kFree,
  // Producer -> consumer: no more pieces will come in register `register_index`.
  kEndOfData,
  // Job -> thread: stop acting (the job failed or was cancelled).
  kAbort,
  // Job -> thread: describe what every unfinished actor waits for.
  kDiagnose,
  // Actor -> actor of the same thread: a condition outside the act rule changed (for example a
  // collective's turn came); look again whether you can act or are exhausted. Carries no data.
  kWake,
  // Between the two halves of a register moved across nodes (SEND and RECEIVE tasks):
  // Receive -> send: slot `slot` of the receiver's register is free and its receive is posted
  // (one credit).
  kCredit,
  // Send -> receive: the bytes of piece `piece` were sent into slot `slot`.
  kSent,
  // Send -> receive: no more pieces will come (`piece` is how many were sent).
  kPeerEnd,
  // Network -> an actor of this node: a transfer of slot `slot` completed (the actor keeps the
  // transfer's status).
  kTransferDone,
};

// Whether a message of this type may arrive from another node.
inline bool IsNetworkMessageType(MessageType type) {
  switch (type) {
    case MessageType::kReady:
    case MessageType::kFree:
    case MessageType::kEndOfData:
    case MessageType::kCredit:
    case MessageType::kSent:
    case MessageType::kPeerEnd:
      return true;
    default:
      return false;
  }
}

// The type's name for messages ("READY", "CREDIT"); "type N" for a value no type has.
inline const char* MessageTypeName(MessageType type) {
  switch (type) {
    case MessageType::kReady:
      return "READY";
    case MessageType::kFree:
      return "FREE";
    case MessageType::kEndOfData:
      return "END_OF_DATA";
    case MessageType::kAbort:
      return "ABORT";
    case MessageType::kDiagnose:
      return "DIAGNOSE";
    case MessageType::kWake:
      return "WAKE";
    case MessageType::kCredit:
      return "CREDIT";
    case MessageType::kSent:
      return "SENT";
    case MessageType::kPeerEnd:
      return "PEER_END";
    case MessageType::kTransferDone:
      return "TRANSFER_DONE";
  }
  return "of an unknown type";
}

// A small fixed-size message. Slots are opaque handles: never a pointer the receiver dereferences.
struct ActorMessage {
  MessageType type = MessageType::kReady;
  int32_t slot = 0;
  uint32_t register_index = 0;
  int64_t piece = 0;
  ActorId source;
  ActorId destination;
};

}  // namespace loom

#endif  // LOOM_RUNTIME_MESSAGE_H_
