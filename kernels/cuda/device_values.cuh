#ifndef LOOM_KERNELS_CUDA_DEVICE_VALUES_CUH_
#define LOOM_KERNELS_CUDA_DEVICE_VALUES_CUH_

// Device code only (include from .cu files): how CUDA kernels read and write the element types
// they compute on. bfloat16 values are computed on as float and stored rounded to the nearest
// even bfloat16, as the CPU reference rounds.

#include <cuda_bf16.h>

namespace loom::cuda {

__device__ __forceinline__ float ToFloat(float value) { return value; }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 value) { return __bfloat162float(value); }

template <typename T>
__device__ __forceinline__ T FromFloat(float value);
template <>
__device__ __forceinline__ float FromFloat<float>(float value) {
  return value;
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float value) {
  return __float2bfloat16_rn(value);
}

}  // namespace loom::cuda

#endif  // LOOM_KERNELS_CUDA_DEVICE_VALUES_CUH_
