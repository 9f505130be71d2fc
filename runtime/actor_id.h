#ifndef LOOM_RUNTIME_ACTOR_ID_H_
#define LOOM_RUNTIME_ACTOR_ID_H_

// ActorId: a 64-bit id that packs an actor's node, device, stream and task index, so that stream
// threads, JobRuntime and the network route messages by arithmetic on it. Its stream part
// (stream_key()) names the stream, and so the thread, the actor runs on.

#include <cstdint>
#include <string>

#include "proto/plan.pb.h"

namespace loom {

// An actor id packs where the actor lives, so that routing a message is arithmetic:
//
//   bits 63..48  node            (16 bits)
//   bits 47..44  device type     (4 bits)
//   bits 43..32  device index    (12 bits)
//   bits 31..28  stream kind     (4 bits)
//   bits 27..24  stream index    (4 bits)
//   bits 23..0   task index      (24 bits, unique within the job)
//
// The upper 40 bits identify the stream (and so the thread) the actor runs on.
class ActorId {
 public:
  static constexpr int kTaskIndexBits = 24;
  static constexpr uint32_t kMaxTaskIndex = (1u << kTaskIndexBits) - 1;
  static constexpr int kMaxNode = (1 << 16) - 1;
  static constexpr int kMaxDeviceIndex = (1 << 12) - 1;
  static constexpr int kMaxStreamIndex = (1 << 4) - 1;

  constexpr ActorId() = default;
  static constexpr ActorId FromValue(uint64_t value) {
    ActorId id;
    id.value_ = value;
    return id;
  }
  // The caller guarantees every field is in range (plan validation checks it).
  static ActorId Make(const plan::Stream& stream, uint32_t task_index);

  uint64_t value() const { return value_; }
  int node() const { return static_cast<int>(value_ >> 48); }
  plan::DeviceType device_type() const {
    return static_cast<plan::DeviceType>((value_ >> 44) & 0xF);
  }
  int device_index() const { return static_cast<int>((value_ >> 32) & 0xFFF); }
  plan::StreamKind stream_kind() const {
    return static_cast<plan::StreamKind>((value_ >> 28) & 0xF);
  }
  int stream_index() const { return static_cast<int>((value_ >> 24) & 0xF); }
  uint32_t task_index() const { return static_cast<uint32_t>(value_ & kMaxTaskIndex); }
  // The stream part: equal for actors that share a thread.
  uint64_t stream_key() const { return value_ >> kTaskIndexBits; }

  bool operator==(const ActorId& other) const { return value_ == other.value_; }
  bool operator!=(const ActorId& other) const { return value_ != other.value_; }

  std::string ToString() const;

 private:
  uint64_t value_ = 0;
};

}  // namespace loom

#endif  // LOOM_RUNTIME_ACTOR_ID_H_
