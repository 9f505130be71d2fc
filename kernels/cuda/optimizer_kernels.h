#ifndef LOOM_KERNELS_CUDA_OPTIMIZER_KERNELS_H_
#define LOOM_KERNELS_CUDA_OPTIMIZER_KERNELS_H_

// RegisterCudaOptimizerKernels: the CUDA kernels of "sgd", "adamw", "squared_norm",
// "clip_coefficient" and "scale_by", float32 only, with the CPU kernels' semantics and checks and,
// but for the last bit of squared_norm, their exact results. RegisterCudaKernels calls it;
// optimizer_kernels.cu defines them.

#include "absl/status/status.h"
#include "kernels/kernel_registry.h"

namespace loom::cuda {

// Registers the CUDA kernels of parameter updates under (op type, plan::CUDA): "sgd", "adamw",
// and the steps of gradient clipping by global norm, "squared_norm", "clip_coefficient" and
// "scale_by". Each has exactly the semantics, attributes and build-time checks of its CPU kernel
// (kernels/cpu/optimizers/).
//
// Data types: float32 only, as on the CPU. Parameters and optimizer state are float32 master
// weights, and the CPU kernels' signatures take float32 gradients too, so every other type is
// refused at build time with INVALID_ARGUMENT.
//
// Numerics:
//   - "sgd" and "adamw" perform the CPU kernels' float32 operations in the same order, with the
//     same fused multiply-adds (__fmaf_rn where the CPU calls std::fma) and no other contraction
//     (__fmul_rn, __fadd_rn, __fdiv_rn, __fsqrt_rn are all correctly rounded, as on the CPU); the
//     scalar factors are computed on the host in double exactly as the CPU kernels do. The
//     results are bit-identical to the CPU kernels' (and so to PyTorch 1.13's).
//   - "clip_coefficient" and "scale_by" are single correctly rounded float32 operations, also
//     bit-identical.
//   - "squared_norm" accumulates in double, as the CPU does, but in a different order: each block
//     sums a grid-strided share into a partial (a fixed tree within the block), then one block
//     sums the partials in a fixed order. It is deterministic (the same input on the same GPU
//     gives the same bits) and the float32 result is nearly always identical to the CPU's
//     (sequential double sum); it can differ in the last bit.
// Each output may be the buffer of the corresponding input (in-place updates).
absl::Status RegisterCudaOptimizerKernels(KernelRegistry* registry);

}  // namespace loom::cuda

#endif  // LOOM_KERNELS_CUDA_OPTIMIZER_KERNELS_H_
