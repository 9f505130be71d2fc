#ifndef LOOM_KERNELS_CPU_UNARY_KERNELS_H_
#define LOOM_KERNELS_CPU_UNARY_KERNELS_H_

// The CPU kernels of the element-wise float32 ops with one input: "relu", "gelu" (exact erf form),
// "tanh" and "scale". RegisterCpuKernels registers them; the gradients of relu, gelu and tanh are
// in gradients/activation_grad_kernels.h.

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/kernel.h"

namespace loom::cpu {

// Element-wise float32 ops with one input and one output of the same shape.
// "relu": max(x, 0).
absl::StatusOr<std::unique_ptr<Kernel>> CreateReluKernel(const KernelInit& init);
// "gelu": the exact form 0.5 * x * (1 + erf(x / sqrt(2))).
absl::StatusOr<std::unique_ptr<Kernel>> CreateGeluKernel(const KernelInit& init);
// "tanh".
absl::StatusOr<std::unique_ptr<Kernel>> CreateTanhKernel(const KernelInit& init);
// "scale": x * the float attribute "scale" (required).
absl::StatusOr<std::unique_ptr<Kernel>> CreateScaleKernel(const KernelInit& init);

}  // namespace loom::cpu

#endif  // LOOM_KERNELS_CPU_UNARY_KERNELS_H_
