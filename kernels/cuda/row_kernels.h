#ifndef LOOM_KERNELS_CUDA_ROW_KERNELS_H_
#define LOOM_KERNELS_CUDA_ROW_KERNELS_H_

#include "absl/status/status.h"
#include "kernels/kernel_registry.h"

namespace loom::cuda {

// Registers under plan::CUDA the row-wise kernels and reductions, each with the attributes,
// shapes, outputs and build-time errors of its CPU kernel (kernels/cpu/):
//   softmax, log_softmax: over the last axis of an input of rank >= 1, stable (the row's
//     maximum is subtracted before exponentiating);
//   layer_norm: x [..., n], gamma [n], beta [n] (float attribute "epsilon", default 1e-5, finite
//     and >= 0) to y [..., n] and, with 3 outputs, the rows' mean and rstd [...] (biased
//     variance, as PyTorch);
//   sparse_cross_entropy: logits [..., classes] and int32 or int64 labels [...] to the loss per
//     sample [...] (int attribute "ignore_index", default -100: such samples get 0);
//   embedding: table [rows, width] and int32 or int64 ids [...] to [..., width], with the
//     vocabulary-parallel attributes "row_offset" and "logical_rows" (ids of other shards give
//     rows of zeros);
//   reduce_sum, reduce_mean: over attribute "axes" (default all) with "keep_dims", and for
//     reduce_mean an optional "divisor".
// Float tensors are float32 or bfloat16 (one type for all of an op's float tensors, mean and rstd
// included; bfloat16 is computed in float32 and rounded to nearest even on store); labels and ids
// are int32 or int64 as on the CPU. One warp per row for rows of up to 256 elements, one block per
// row above; every sum is taken in a fixed order (no float atomics), so that acts on the same
// inputs give the same bits. A label or id out of range found on the GPU makes that sample's loss
// or that position's row NaN, and the kernel's next act fails with the CPU's message, naming the
// task and the value. Reductions walk the input through the CPU's merged-axes plan (index table
// in GPU memory, made when the kernel is built); long reductions are split into chunks whose
// partial sums are added in order.
absl::Status RegisterCudaRowKernels(KernelRegistry* registry);

}  // namespace loom::cuda

#endif  // LOOM_KERNELS_CUDA_ROW_KERNELS_H_
