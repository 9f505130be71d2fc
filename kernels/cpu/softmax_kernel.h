#ifndef LOOM_KERNELS_CPU_SOFTMAX_KERNEL_H_
#define LOOM_KERNELS_CPU_SOFTMAX_KERNEL_H_

// The CPU kernels of "softmax" and "log_softmax" (CreateSoftmaxKernel, CreateLogSoftmaxKernel):
// float32, over the last axis, with each row's maximum subtracted first. Their gradients are in
// gradients/softmax_grad_kernels.h; the CUDA row kernels check their configurations with these
// factories.

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/kernel.h"

namespace loom::cpu {

// "softmax": float32 softmax over the last axis of an input of rank >= 1; the output has the
// input's shape. Numerically stable: each row's maximum is subtracted before exponentiating.
absl::StatusOr<std::unique_ptr<Kernel>> CreateSoftmaxKernel(const KernelInit& init);

// "log_softmax": float32 log(softmax(x)) over the last axis, computed stably as
// x - max - log(sum(exp(x - max))); same shapes and checks as "softmax".
absl::StatusOr<std::unique_ptr<Kernel>> CreateLogSoftmaxKernel(const KernelInit& init);

}  // namespace loom::cpu

#endif  // LOOM_KERNELS_CPU_SOFTMAX_KERNEL_H_
