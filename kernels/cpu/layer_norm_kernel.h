#ifndef LOOM_KERNELS_CPU_LAYER_NORM_KERNEL_H_
#define LOOM_KERNELS_CPU_LAYER_NORM_KERNEL_H_

// The CPU kernel of "layer_norm" (CreateLayerNormKernel): float32 layer normalisation over the last
// axis with PyTorch's semantics, optionally also writing each row's mean and rstd for the backward
// pass. RegisterCpuKernels registers it; the CUDA layer_norm kernel checks its configuration with
// this factory.

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/kernel.h"

namespace loom::cpu {

// "layer_norm": float32 layer normalisation over the last axis (PyTorch's LayerNorm semantics).
// Inputs x [..., n], gamma [n] and beta [n]; output y of x's shape:
//   y = (x - mean) * rstd * gamma + beta, rstd = 1 / sqrt(var + epsilon),
// with the mean and the biased variance (divided by n) of each row, computed in double.
// Attribute "epsilon" (float >= 0, default 1e-5). With three outputs instead of one, outputs 1 and
// 2 are each row's mean and rstd, of shape [...] (x's shape without its last axis), for the
// backward pass. A row of length 0 has mean 0 and rstd 1 / sqrt(epsilon).
absl::StatusOr<std::unique_ptr<Kernel>> CreateLayerNormKernel(const KernelInit& init);

}  // namespace loom::cpu

#endif  // LOOM_KERNELS_CPU_LAYER_NORM_KERNEL_H_
