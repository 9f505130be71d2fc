#ifndef LOOM_KERNELS_CUDA_ROW_KERNELS_H_
#define LOOM_KERNELS_CUDA_ROW_KERNELS_H_

// The registration of the CUDA row-wise kernels and reductions in four groups, one per file
// (row_normalization_kernels.cu, cross_entropy_kernels.cu, embedding_kernels.cu,
// reduce_kernels.cu), and RegisterCudaRowKernels, all four, which RegisterCudaKernels calls. They
// have their CPU kernels' semantics and checks and sum in a fixed order.

#include <initializer_list>

#include "absl/status/status.h"
#include "kernels/kernel_registry.h"

namespace loom::cuda {

// The row-wise kernels and reductions, each with the attributes, shapes, outputs and build-time
// errors of its CPU kernel (kernels/cpu/). Float tensors are float32 or bfloat16 (one type for
// all of an op's float tensors, mean and rstd included; bfloat16 is computed in float32 and
// rounded to nearest even on store); labels and ids are int32 or int64 as on the CPU. One warp
// per row for rows of up to 256 elements, one block per row above (row_launch.cuh); every sum is
// taken in a fixed order (no float atomics), so that acts on the same inputs give the same bits.

// Registers under plan::CUDA (row_normalization_kernels.cu):
//   softmax, log_softmax: over the last axis of an input of rank >= 1, stable (the row's
//     maximum is subtracted before exponentiating);
//   layer_norm: x [..., n], gamma [n], beta [n] (float attribute "epsilon", default 1e-5, finite
//     and >= 0) to y [..., n] and, with 3 outputs, the rows' mean and rstd [...] (biased
//     variance, as PyTorch).
absl::Status RegisterCudaRowNormalizationKernels(KernelRegistry* registry);

// Registers under plan::CUDA (cross_entropy_kernels.cu):
//   sparse_cross_entropy: logits [..., classes] and int32 or int64 labels [...] to the loss per
//     sample [...] (int attribute "ignore_index", default -100: such samples get 0).
// A label out of range found on the GPU makes that sample's loss NaN, and the kernel's next act
// fails with the CPU's message, naming the task and the value.
absl::Status RegisterCudaCrossEntropyKernels(KernelRegistry* registry);

// Registers under plan::CUDA (embedding_kernels.cu):
//   embedding: table [rows, width] and int32 or int64 ids [...] to [..., width], with the
//     vocabulary-parallel attributes "row_offset" and "logical_rows" (ids of other shards give
//     rows of zeros).
// An id out of range found on the GPU makes that position's row NaN, and the kernel's next act
// fails with the CPU's message, naming the task and the value.
absl::Status RegisterCudaEmbeddingKernels(KernelRegistry* registry);

// Registers under plan::CUDA (reduce_kernels.cu):
//   reduce_sum, reduce_mean: over attribute "axes" (default all) with "keep_dims", and for
//     reduce_mean an optional "divisor".
// Reductions walk the input through the CPU's merged-axes plan (index table in GPU memory, made
// when the kernel is built); long reductions are split into chunks whose partial sums are added
// in order.
absl::Status RegisterCudaReduceKernels(KernelRegistry* registry);

// Registers all of the above.
inline absl::Status RegisterCudaRowKernels(KernelRegistry* registry) {
  for (absl::Status (*group)(KernelRegistry*) :
       {RegisterCudaRowNormalizationKernels, RegisterCudaCrossEntropyKernels,
        RegisterCudaEmbeddingKernels, RegisterCudaReduceKernels}) {
    if (absl::Status status = group(registry); !status.ok()) return status;
  }
  return absl::OkStatus();
}

}  // namespace loom::cuda

#endif  // LOOM_KERNELS_CUDA_ROW_KERNELS_H_
