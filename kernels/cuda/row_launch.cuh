#ifndef LOOM_KERNELS_CUDA_ROW_LAUNCH_CUH_
#define LOOM_KERNELS_CUDA_ROW_LAUNCH_CUH_

// Device code only (include from .cu files): how the row kernels (softmax and layer_norm,
// sparse_cross_entropy, embedding, the reductions) share a row among threads: a warp per short
// row, a block per long one. RowGroup is that group on the device; RowLaunchFor picks the launch
// on the host.

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/row_reductions.cuh"

namespace loom::cuda {

// Threads of a block whose warps take a row each (and of the row kernels' thread-per-element
// launches).
inline constexpr int kRowKernelThreads = 256;
inline constexpr int kRowKernelWarps = kRowKernelThreads / 32;
// Rows of up to this many elements get one warp each; longer rows a block.
inline constexpr int64_t kWarpRowLimit = 256;

// The threads that work on one row together: a warp (kWarp; the block's warps take different
// rows) or the whole block. Rows are visited from `first` in steps of `stride`; each thread takes
// the row's elements lane, lane + size, ...
template <bool kWarp>
struct RowGroup {
  int64_t first;
  int64_t stride;
  int lane;
  int size;

  __device__ __forceinline__ RowGroup() {
    if constexpr (kWarp) {
      const int warps = static_cast<int>(blockDim.x >> 5);
      first = static_cast<int64_t>(blockIdx.x) * warps + (threadIdx.x >> 5);
      stride = static_cast<int64_t>(gridDim.x) * warps;
      lane = static_cast<int>(threadIdx.x & 31);
      size = 32;
    } else {
      first = blockIdx.x;
      stride = gridDim.x;
      lane = static_cast<int>(threadIdx.x);
      size = static_cast<int>(blockDim.x);
    }
  }

  __device__ __forceinline__ float Sum(float value, float* shared) const {
    if constexpr (kWarp) {
      return WarpSum(value);
    } else {
      return BlockSum(value, shared);
    }
  }

  __device__ __forceinline__ float Max(float value, float* shared) const {
    if constexpr (kWarp) {
      return WarpMax(value);
    } else {
      return BlockMax(value, shared);
    }
  }
};

// How `rows` rows of n are launched: a warp per row for short rows (kRowKernelThreads-thread
// blocks), a block per row otherwise.
struct RowLaunch {
  bool warp;
  int blocks;
  int threads;
};

inline RowLaunch RowLaunchFor(int64_t rows, int64_t n) {
  if (n <= kWarpRowLimit) {
    const int64_t blocks = (rows + kRowKernelWarps - 1) / kRowKernelWarps;
    return {true, static_cast<int>(std::clamp<int64_t>(blocks, 1, kMaxRowBlocks)),
            kRowKernelThreads};
  }
  return {false, static_cast<int>(std::clamp<int64_t>(rows, 1, kMaxRowBlocks)), RowThreads(n)};
}

}  // namespace loom::cuda

#endif  // LOOM_KERNELS_CUDA_ROW_LAUNCH_CUH_
