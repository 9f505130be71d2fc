#include "runtime/actor_id.h"

#include "absl/strings/str_cat.h"
#include "core/device_name.h"

namespace loom {

ActorId ActorId::Make(const plan::Stream& stream, uint32_t task_index) {
  plan::StreamKind kind =
      stream.kind() == plan::STREAM_KIND_UNSPECIFIED ? plan::STREAM_COMPUTE : stream.kind();
  uint64_t value = (static_cast<uint64_t>(stream.device().node()) << 48) |
                   (static_cast<uint64_t>(stream.device().type()) << 44) |
                   (static_cast<uint64_t>(stream.device().index()) << 32) |
                   (static_cast<uint64_t>(kind) << 28) |
                   (static_cast<uint64_t>(stream.index()) << 24) | task_index;
  return FromValue(value);
}

std::string ActorId::ToString() const {
  plan::Stream stream;
  stream.mutable_device()->set_node(node());
  stream.mutable_device()->set_type(device_type());
  stream.mutable_device()->set_index(device_index());
  stream.set_kind(stream_kind());
  stream.set_index(stream_index());
  return absl::StrCat(StreamName(stream), "#", task_index());
}

}  // namespace loom
