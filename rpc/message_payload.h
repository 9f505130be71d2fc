#ifndef LOOM_RPC_MESSAGE_PAYLOAD_H_
#define LOOM_RPC_MESSAGE_PAYLOAD_H_

// MessagePayloadBytes: the room a gRPC response leaves for its one large field under a message
// size limit. loomd's job service sizes the parts of a trace by it and refuses a plan larger than
// it; the cluster client asks for trace parts of that size.

#include <algorithm>
#include <cstdint>

namespace loom {

// The most bytes a response's one large field (a part of a trace, a plan) may take in a message
// of at most `max_message_bytes`: gRPC's framing and the response's other fields take a few dozen
// bytes, so 4 KiB (or half of a tiny limit) are left to them. At least 1.
inline int64_t MessagePayloadBytes(int64_t max_message_bytes) {
  return std::max<int64_t>(max_message_bytes - std::min<int64_t>(4 << 10, max_message_bytes / 2),
                           1);
}

}  // namespace loom

#endif  // LOOM_RPC_MESSAGE_PAYLOAD_H_
