#ifndef LOOM_KERNELS_CPU_BIAS_ADD_KERNEL_H_
#define LOOM_KERNELS_CPU_BIAS_ADD_KERNEL_H_

// The CPU kernel of "bias_add" (CreateBiasAddKernel): float32 x plus a bias along x's last axis.
// RegisterCpuKernels registers it; its gradient with respect to the bias is "reduce_sum_to"
// (gradients/broadcast_grad_kernels.h).

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/kernel.h"

namespace loom::cpu {

// "bias_add": float32 inputs x [..., n] (rank >= 1) and bias [n]; the output has x's shape and
// is x + bias along the last axis.
absl::StatusOr<std::unique_ptr<Kernel>> CreateBiasAddKernel(const KernelInit& init);

}  // namespace loom::cpu

#endif  // LOOM_KERNELS_CPU_BIAS_ADD_KERNEL_H_
