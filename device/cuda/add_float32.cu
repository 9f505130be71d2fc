#include <algorithm>

#include "device/cuda/add_float32.h"

namespace loom::cuda {
namespace {

__global__ void AddFloat32Kernel(float* sum, const float* values, int64_t count) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    sum[i] += values[i];
  }
}

}  // namespace

cudaError_t LaunchAddFloat32(float* sum, const float* values, int64_t count, cudaStream_t stream) {
  constexpr int kThreads = 256;
  const int64_t blocks = std::min<int64_t>((count + kThreads - 1) / kThreads, 4096);
  AddFloat32Kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(sum, values, count);
  return cudaGetLastError();
}

}  // namespace loom::cuda
