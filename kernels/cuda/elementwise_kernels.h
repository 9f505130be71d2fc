#ifndef LOOM_KERNELS_CUDA_ELEMENTWISE_KERNELS_H_
#define LOOM_KERNELS_CUDA_ELEMENTWISE_KERNELS_H_

// The registration of the element-wise CUDA kernels in two groups:
// RegisterCudaElementwiseArithmeticKernels (relu, gelu, tanh, scale, add, subtract, multiply,
// divide, bias_add) and RegisterCudaFillAndCopyKernels (fill, zeros_like, ones_like, identity,
// reshape, cast), and RegisterCudaElementwiseKernels, both, which RegisterCudaKernels calls.

#include "absl/status/status.h"
#include "kernels/kernel_registry.h"

namespace loom::cuda {

// The element-wise kernels, each with the attributes, shapes and build-time errors of its CPU
// kernel (kernels/cpu/). Real-valued tensors are float32 or bfloat16 (one type for all of an op's
// tensors; bfloat16 is computed in float32 and rounded to nearest even on store).

// Registers under plan::CUDA (elementwise_arithmetic_kernels.cu):
//   unary:  relu, gelu (exact erf form), tanh, scale (float attribute "scale", finite);
//   binary: add, subtract, multiply, divide, with NumPy broadcasting (divide is IEEE);
//   bias_add: x [..., n] + bias [n].
// Broadcast index tables live in GPU memory allocated when the kernel is built.
absl::Status RegisterCudaElementwiseArithmeticKernels(KernelRegistry* registry);

// Registers under plan::CUDA (fill_and_copy_kernels.cu):
//   fill (attribute "value"), zeros_like, ones_like;
//   identity and reshape: a copy of the bytes on the stream;
//   cast: float32 <-> bfloat16 (rounded to nearest even), a copy between equal types.
// fill also writes int32 and int64; zeros_like, identity and reshape take any data type, as on
// the CPU; ones_like writes float32 or bfloat16 for an input of any type.
absl::Status RegisterCudaFillAndCopyKernels(KernelRegistry* registry);

// Registers all of the above.
inline absl::Status RegisterCudaElementwiseKernels(KernelRegistry* registry) {
  if (absl::Status status = RegisterCudaElementwiseArithmeticKernels(registry); !status.ok()) {
    return status;
  }
  return RegisterCudaFillAndCopyKernels(registry);
}

}  // namespace loom::cuda

#endif  // LOOM_KERNELS_CUDA_ELEMENTWISE_KERNELS_H_
