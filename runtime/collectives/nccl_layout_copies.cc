#include "runtime/collectives/nccl_layout_copies.h"

#include "absl/strings/str_cat.h"
#include "device/cuda/cuda_status.h"

namespace loom::cuda {

AxisSplit SplitAt(const Shape& shape, int axis) {
  AxisSplit split;
  if (shape.rank() == 0) return split;
  for (int dimension = 0; dimension < axis; ++dimension) split.outer *= shape.dimension(dimension);
  split.length = shape.dimension(axis);
  for (int dimension = axis + 1; dimension < shape.rank(); ++dimension) {
    split.inner *= shape.dimension(dimension);
  }
  return split;
}

StreamScratch::~StreamScratch() {
  if (data_ != nullptr) cudaFreeAsync(data_, stream_);
}

absl::Status StreamScratch::Allocate(int64_t bytes, absl::string_view what) {
  if (bytes <= 0) return absl::OkStatus();
  return CudaStatus(cudaMallocAsync(&data_, static_cast<size_t>(bytes), stream_),
                    absl::StrCat(what, ": allocating ", bytes, " bytes of scratch memory"));
}

absl::Status CopyRows(void* destination, int64_t destination_pitch, const void* source,
                      int64_t source_pitch, int64_t width, int64_t height, cudaStream_t stream,
                      absl::string_view what) {
  if (width <= 0 || height <= 0) return absl::OkStatus();
  if (height == 1 || (width == source_pitch && width == destination_pitch)) {
    return CudaStatus(cudaMemcpyAsync(destination, source, static_cast<size_t>(width * height),
                                      cudaMemcpyDefault, stream),
                      absl::StrCat(what, ": cudaMemcpyAsync"));
  }
  return CudaStatus(cudaMemcpy2DAsync(destination, static_cast<size_t>(destination_pitch), source,
                                      static_cast<size_t>(source_pitch), static_cast<size_t>(width),
                                      static_cast<size_t>(height), cudaMemcpyDefault, stream),
                    absl::StrCat(what, ": cudaMemcpy2DAsync"));
}

}  // namespace loom::cuda
