#ifndef LOOM_RUNTIME_MESSAGE_H_
#define LOOM_RUNTIME_MESSAGE_H_

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
};

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
