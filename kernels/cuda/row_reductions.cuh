#ifndef LOOM_KERNELS_CUDA_ROW_REDUCTIONS_CUH_
#define LOOM_KERNELS_CUDA_ROW_REDUCTIONS_CUH_

// Device code only (include from .cu files): what the row kernels (softmax, layer_norm, cross
// entropy and their gradients) share: warp and block reductions and the launch shape of a row.

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace loom::cuda {

inline constexpr int kMaxRowThreads = 1024;
// Row kernels stride over the rows past this many blocks.
inline constexpr int64_t kMaxRowBlocks = 65536;

__device__ __forceinline__ float WarpSum(float value) {
  // Lane i adds v[i] + v[i ^ offset] and lane i ^ offset the same two values: every lane ends
  // with the same bits.
  for (int offset = 16; offset > 0; offset >>= 1) {
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  }
  return value;
}

__device__ __forceinline__ float WarpMax(float value) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
  }
  return value;
}

// The sum of `value` over the block (blockDim.x a multiple of 32, every thread calling), the same
// in every thread and the same for the same inputs: each warp sums in a fixed tree, then every
// thread adds the warps' sums in warp order. `shared` holds 32 floats.
__device__ __forceinline__ float BlockSum(float value, float* shared) {
  value = WarpSum(value);
  // Earlier readers of `shared` are done before it is written again.
  __syncthreads();
  if ((threadIdx.x & 31) == 0) shared[threadIdx.x >> 5] = value;
  __syncthreads();
  const int warps = static_cast<int>(blockDim.x >> 5);
  float sum = 0.0f;
  for (int warp = 0; warp < warps; ++warp) sum += shared[warp];
  return sum;
}

__device__ __forceinline__ float BlockMax(float value, float* shared) {
  value = WarpMax(value);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) shared[threadIdx.x >> 5] = value;
  __syncthreads();
  const int warps = static_cast<int>(blockDim.x >> 5);
  float maximum = -INFINITY;
  for (int warp = 0; warp < warps; ++warp) maximum = fmaxf(maximum, shared[warp]);
  return maximum;
}

// Threads of a block per row of n: about four elements each, 32 to 1024.
inline int RowThreads(int64_t n) {
  const int64_t quarter = (n + 3) / 4;
  const int64_t rounded = (quarter + 31) / 32 * 32;
  return static_cast<int>(std::clamp<int64_t>(rounded, 32, kMaxRowThreads));
}

}  // namespace loom::cuda

#endif  // LOOM_KERNELS_CUDA_ROW_REDUCTIONS_CUH_
