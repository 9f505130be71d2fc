#ifndef LOOM_KERNELS_CPU_GRADIENTS_SOFTMAX_GRAD_KERNELS_H_
#define LOOM_KERNELS_CPU_GRADIENTS_SOFTMAX_GRAD_KERNELS_H_

// The CPU kernels of "softmax_grad" and "log_softmax_grad": float32 dx from the forward output y
// and dy, row by row over the last axis, with row sums in double. RegisterCpuGradientKernels
// registers them.

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/kernel.h"

namespace loom::cpu {

// Gradients of the row-wise softmaxes over the last axis, from the forward OUTPUT: float32 inputs
// y and dy of one shape of rank >= 1, float32 output dx of that shape. Row sums are accumulated in
// double.

// "softmax_grad"(y, dy) -> dx = y * (dy - sum(dy * y)), y = softmax(x).
absl::StatusOr<std::unique_ptr<Kernel>> CreateSoftmaxGradKernel(const KernelInit& init);

// "log_softmax_grad"(y, dy) -> dx = dy - exp(y) * sum(dy), y = log_softmax(x).
absl::StatusOr<std::unique_ptr<Kernel>> CreateLogSoftmaxGradKernel(const KernelInit& init);

}  // namespace loom::cpu

#endif  // LOOM_KERNELS_CPU_GRADIENTS_SOFTMAX_GRAD_KERNELS_H_
