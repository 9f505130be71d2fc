#ifndef LOOM_KERNELS_CPU_OPTIMIZERS_ADAMW_KERNEL_H_
#define LOOM_KERNELS_CPU_OPTIMIZERS_ADAMW_KERNEL_H_

// The CPU kernel of "adamw" (CreateAdamWKernel): one step of PyTorch 1.13's AdamW on float32
// parameters and moments, in place or not, resuming at a given step. RegisterCpuOptimizerKernels
// registers it; the CUDA kernel (kernels/cuda/optimizer_kernels.h) computes the same bits.

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/kernel.h"

namespace loom::cpu {

// "adamw": one step of torch.optim.AdamW (PyTorch 1.13, amsgrad=False, maximize=False, the
// single-tensor path) on float32 tensors of one shape. Inputs param, grad, exp_avg, exp_avg_sq;
// outputs param_out, exp_avg_out, exp_avg_sq_out. Piece p is step t = first_step + p + 1.
// Attributes: "lr" (required, >= 0), "beta1" (0.9) and "beta2" (0.999) in [0, 1), "epsilon"
// (1e-8, >= 0), "weight_decay" (0.01, >= 0), "first_step" (0, >= 0: the steps already taken, when
// a job resumes with its saved moments). Per element:
//   param *= 1 - lr * weight_decay
//   exp_avg = beta1 * exp_avg + (1 - beta1) * grad
//   exp_avg_sq = beta2 * exp_avg_sq + (1 - beta2) * grad * grad
//   param -= lr / (1 - beta1^t) * exp_avg / (sqrt(exp_avg_sq) / sqrt(1 - beta2^t) + epsilon)
// The scalar factors are computed in double and the element math in float32, in PyTorch's order.
// Each output may be the same buffer as its input (param_out as param, exp_avg_out as exp_avg,
// exp_avg_sq_out as exp_avg_sq): every element is read before it is written.
absl::StatusOr<std::unique_ptr<Kernel>> CreateAdamWKernel(const KernelInit& init);

}  // namespace loom::cpu

#endif  // LOOM_KERNELS_CPU_OPTIMIZERS_ADAMW_KERNEL_H_
