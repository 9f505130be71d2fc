#ifndef LOOM_KERNELS_CPU_OPTIMIZERS_SGD_KERNEL_H_
#define LOOM_KERNELS_CPU_OPTIMIZERS_SGD_KERNEL_H_

// The CPU kernel of "sgd" (CreateSgdKernel): one step of PyTorch 1.13's SGD (momentum, dampening,
// weight decay, Nesterov) on float32 parameters and a momentum buffer, in place or not, resuming
// at a given step. RegisterCpuOptimizerKernels registers it.

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/kernel.h"

namespace loom::cpu {

// "sgd": one step of torch.optim.SGD (PyTorch 1.13, maximize=False) on float32 tensors of one
// shape. Inputs param, grad, momentum_buffer; outputs param_out, momentum_buffer_out. Piece p is
// step first_step + p + 1. Attributes: "lr" (required, >= 0), "momentum" (0, >= 0), "dampening"
// (0), "weight_decay" (0, >= 0), "nesterov" (false; needs momentum > 0 and dampening 0),
// "first_step" (0, >= 0: the steps already taken, when a job resumes with its saved momentum
// buffer). Per element:
//   g = grad + weight_decay * param                       (when weight_decay != 0)
//   buf = g on step 1 (piece 0 with first_step 0),
//         else momentum * buf + (1 - dampening) * g       (when momentum != 0)
//   g = nesterov ? g + momentum * buf : buf                (when momentum != 0)
//   param -= lr * g
// With momentum 0 the buffer is passed through unchanged. Each output may be the same buffer as
// its input (param_out as param, momentum_buffer_out as momentum_buffer): every element is read
// before it is written.
absl::StatusOr<std::unique_ptr<Kernel>> CreateSgdKernel(const KernelInit& init);

}  // namespace loom::cpu

#endif  // LOOM_KERNELS_CPU_OPTIMIZERS_SGD_KERNEL_H_
