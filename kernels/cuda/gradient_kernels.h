#ifndef LOOM_KERNELS_CUDA_GRADIENT_KERNELS_H_
#define LOOM_KERNELS_CUDA_GRADIENT_KERNELS_H_

// RegisterCudaGradientKernels: the CUDA kernels of the element-wise gradients (relu_grad,
// gelu_grad, tanh_grad) and of broadcast_to and reduce_sum_to, with their CPU kernels' semantics
// and checks. RegisterCudaKernels calls it; gradient_kernels.cu defines them.

#include "absl/status/status.h"
#include "kernels/kernel_registry.h"

namespace loom::cuda {

// Registers under plan::CUDA the element-wise and broadcast gradient kernels, each with the
// attributes, shapes and build-time errors of its CPU kernel (kernels/cpu/gradients/):
//   relu_grad(x, dy), gelu_grad(x, dy) (exact erf form), tanh_grad(y, dy): dx of the same shape;
//   broadcast_to(x): x times the float attribute "scale" (default 1, finite) broadcast to the
//     output, by NumPy rules or with the int-list attribute "axes" naming the output axes that x
//     lacks (or keeps as 1);
//   reduce_sum_to(dy): dy summed down to the output shape, which broadcasts to dy's.
// Tensors are float32 or bfloat16 (one type for all of an op's tensors; bfloat16 is computed in
// float32 and rounded to nearest even on store). reduce_sum_to is deterministic: every output
// element is summed in a fixed order (float partial sums of at most a few thousand elements, added
// in double when a sum is split), without atomics. Index tables and scratch live in GPU memory
// allocated when the kernel is built.
absl::Status RegisterCudaGradientKernels(KernelRegistry* registry);

}  // namespace loom::cuda

#endif  // LOOM_KERNELS_CUDA_GRADIENT_KERNELS_H_
