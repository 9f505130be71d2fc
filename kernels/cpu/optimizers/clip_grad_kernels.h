#ifndef LOOM_KERNELS_CPU_OPTIMIZERS_CLIP_GRAD_KERNELS_H_
#define LOOM_KERNELS_CPU_OPTIMIZERS_CLIP_GRAD_KERNELS_H_

// The CPU kernels of gradient clipping by global L2 norm, in three steps: "squared_norm" of each
// gradient slice, "clip_coefficient" from their all-reduced sum, and "scale_by" that coefficient.
// RegisterCpuOptimizerKernels registers them.

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/kernel.h"

namespace loom::cpu {

// Gradient clipping by global L2 norm, as torch.nn.utils.clip_grad_norm_ (norm_type 2) does it,
// in three float32 steps: the squared norm of each gradient slice, summed over all gradients and
// ranks by the compiler (an all-reduce with "add"), becomes one coefficient that scales every
// gradient.

// "squared_norm": one input of any shape -> output [1] holding the sum of its squared elements
// (accumulated in double; 0 for an empty input).
absl::StatusOr<std::unique_ptr<Kernel>> CreateSquaredNormKernel(const KernelInit& init);

// "clip_coefficient": input total_squared_norm [1] -> output [1] holding
// min(1, max_norm / (sqrt(total_squared_norm) + 1e-6)). Attribute "max_norm" (required, > 0). A
// NaN or infinite norm gives a NaN or 0 coefficient, as in PyTorch (error_if_nonfinite=False).
absl::StatusOr<std::unique_ptr<Kernel>> CreateClipCoefficientKernel(const KernelInit& init);

// "scale_by": inputs x (any shape) and coefficient [1] -> output x * coefficient[0], of x's shape.
// The output may be the same buffer as x.
absl::StatusOr<std::unique_ptr<Kernel>> CreateScaleByKernel(const KernelInit& init);

}  // namespace loom::cpu

#endif  // LOOM_KERNELS_CPU_OPTIMIZERS_CLIP_GRAD_KERNELS_H_
