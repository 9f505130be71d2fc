#include "device/stream_context.h"

namespace loom {

absl::StatusOr<HostTensor> EnqueueCopyToHost(StreamContext& stream, const TensorView& view) {
  HostTensor tensor;
  tensor.data_type = view.data_type;
  tensor.shape = view.shape;
  tensor.bytes.resize(static_cast<size_t>(view.ByteSize()));
  if (absl::Status status =
          stream.Copy(tensor.bytes.data(), view.data, static_cast<int64_t>(tensor.bytes.size()));
      !status.ok()) {
    return status;
  }
  return tensor;
}

}  // namespace loom
