#ifndef LOOM_KERNELS_CUDA_ELEMENTWISE_KERNELS_H_
#define LOOM_KERNELS_CUDA_ELEMENTWISE_KERNELS_H_

#include "absl/status/status.h"
#include "kernels/kernel_registry.h"

namespace loom::cuda {

// Registers under plan::CUDA the element-wise kernels, each with the attributes, shapes and
// build-time errors of its CPU kernel (kernels/cpu/):
//   unary:  relu, gelu (exact erf form), tanh, scale (float attribute "scale", finite);
//   binary: add, subtract, multiply, divide, with NumPy broadcasting (divide is IEEE);
//   bias_add: x [..., n] + bias [n];
//   fill (attribute "value"), zeros_like, ones_like;
//   identity and reshape: a copy of the bytes on the stream;
//   cast: float32 <-> bfloat16 (rounded to nearest even), a copy between equal types.
// Real-valued tensors are float32 or bfloat16 (one type for all of an op's tensors; bfloat16 is
// computed in float32 and rounded to nearest even on store). fill also writes int32 and int64;
// zeros_like, identity and reshape take any data type, as on the CPU; ones_like writes float32 or
// bfloat16 for an input of any type. Broadcast index tables live in GPU memory allocated when the
// kernel is built.
absl::Status RegisterCudaElementwiseKernels(KernelRegistry* registry);

}  // namespace loom::cuda

#endif  // LOOM_KERNELS_CUDA_ELEMENTWISE_KERNELS_H_
