#ifndef LOOM_KERNELS_CPU_GRADIENTS_LAYER_NORM_GRAD_KERNEL_H_
#define LOOM_KERNELS_CPU_GRADIENTS_LAYER_NORM_GRAD_KERNEL_H_

// The CPU kernel of "layer_norm_grad" (CreateLayerNormGradKernel): dx, dgamma and dbeta of
// layer_norm, recomputing each row's mean and rstd as the forward does. dgamma and dbeta are
// partial sums over the local rows, which the compiler sums across ranks.
// RegisterCpuGradientKernels registers it.

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/kernel.h"

namespace loom::cpu {

// "layer_norm_grad": the gradient of "layer_norm" (PyTorch's LayerNorm over the last axis).
// Float32 inputs x [..., n] (rank >= 1), gamma [n] and dy (x's shape); float32 outputs dx (x's
// shape), dgamma [n] and dbeta [n]. Each row's mean and rstd = 1 / sqrt(var + epsilon) (biased
// variance) are recomputed from x in double, as the forward computes them; with
// xhat = (x - mean) * rstd and g = dy * gamma,
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),
//   dgamma = sum over rows of dy * xhat,  dbeta = sum over rows of dy.
// dgamma and dbeta sum over every leading row of the local slice only (a partial sum when x is
// split along a leading axis; the compiler sums them across ranks), accumulated in double.
// Attribute "epsilon" (float >= 0, default 1e-5), as the forward's.
absl::StatusOr<std::unique_ptr<Kernel>> CreateLayerNormGradKernel(const KernelInit& init);

}  // namespace loom::cpu

#endif  // LOOM_KERNELS_CPU_GRADIENTS_LAYER_NORM_GRAD_KERNEL_H_
