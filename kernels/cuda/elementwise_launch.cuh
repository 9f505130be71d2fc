#ifndef LOOM_KERNELS_CUDA_ELEMENTWISE_LAUNCH_CUH_
#define LOOM_KERNELS_CUDA_ELEMENTWISE_LAUNCH_CUH_

// Device code only (include from .cu files): what the element-wise CUDA kernels
// (elementwise_arithmetic_kernels.cu, fill_and_copy_kernels.cu) share: packs of elements moved as
// one 16-byte access, the grid-stride loop's first thread and stride, and the launch shape of
// their element loops.

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/cuda_kernel_util.h"

namespace loom::cuda {

// Threads of a block of the element-wise kernels.
inline constexpr int kElementwiseThreads = 256;

// `kCount` elements moved as one access (16 bytes for the vectorised paths).
template <typename T, int kCount>
struct alignas(sizeof(T) * kCount) Pack {
  T values[kCount];
};

// Elements of T in one 16-byte access.
template <typename T>
inline constexpr int kVectorWidth = static_cast<int>(16 / sizeof(T));

__device__ __forceinline__ int64_t FirstThread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ int64_t GridThreads() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

inline bool IsAligned(const void* pointer, size_t alignment) {
  return reinterpret_cast<uintptr_t>(pointer) % alignment == 0;
}

// Blocks of kElementwiseThreads covering `count` elements (see BlocksFor).
inline unsigned int ElementwiseBlocks(int64_t count) {
  return static_cast<unsigned int>(BlocksFor(count, kElementwiseThreads));
}

}  // namespace loom::cuda

#endif  // LOOM_KERNELS_CUDA_ELEMENTWISE_LAUNCH_CUH_
