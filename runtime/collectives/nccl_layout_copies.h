#ifndef LOOM_RUNTIME_COLLECTIVES_NCCL_LAYOUT_COPIES_H_
#define LOOM_RUNTIME_COLLECTIVES_NCCL_LAYOUT_COPIES_H_

// The layout copies of the NCCL collective backend (nccl_collectives.h): how a shape splits
// around one axis, stream-ordered scratch memory for staging a collective's blocks, and the
// strided device copies that pack blocks into that memory or place them into the output. NCCL
// moves contiguous blocks only; these turn slices along an inner axis into such blocks and back.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "core/tensor.h"

namespace loom::cuda {

// A shape seen around one axis: the elements before it (outer), along it and after it (inner).
// A scalar is one element on every side.
struct AxisSplit {
  int64_t outer = 1;
  int64_t length = 1;
  int64_t inner = 1;
};

AxisSplit SplitAt(const Shape& shape, int axis);

inline std::byte* ByteAt(void* base, int64_t offset) {
  return static_cast<std::byte*>(base) + offset;
}

// Device memory for one collective's staging, taken and given back in the stream's order.
class StreamScratch {
 public:
  explicit StreamScratch(cudaStream_t stream) : stream_(stream) {}
  ~StreamScratch();
  StreamScratch(const StreamScratch&) = delete;
  StreamScratch& operator=(const StreamScratch&) = delete;

  absl::Status Allocate(int64_t bytes, absl::string_view what);
  std::byte* data() const { return static_cast<std::byte*>(data_); }

 private:
  cudaStream_t stream_;
  void* data_ = nullptr;
};

// Copies `height` rows of `width` bytes between buffers whose rows are `source_pitch` and
// `destination_pitch` bytes apart, on `stream`.
absl::Status CopyRows(void* destination, int64_t destination_pitch, const void* source,
                      int64_t source_pitch, int64_t width, int64_t height, cudaStream_t stream,
                      absl::string_view what);

}  // namespace loom::cuda

#endif  // LOOM_RUNTIME_COLLECTIVES_NCCL_LAYOUT_COPIES_H_
