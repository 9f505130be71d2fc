#ifndef LOOM_KERNELS_CPU_GRADIENTS_EMBEDDING_GRAD_KERNEL_H_
#define LOOM_KERNELS_CPU_GRADIENTS_EMBEDDING_GRAD_KERNEL_H_

// The CPU kernel of "embedding_grad" (CreateEmbeddingGradKernel): the gradient of "embedding" with
// respect to its table, dy's rows added into a zeroed dtable at each id's row (repeated ids add
// up), with the forward's vocabulary-parallel attributes. RegisterCpuGradientKernels registers it.

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/kernel.h"

namespace loom::cpu {

// "embedding_grad": the gradient of "embedding" with respect to its table. Inputs ids (int32 or
// int64) of any shape S and dy [S..., D] float32; output dtable [V, D] float32: zeroed, then
// dtable[ids[s] - row_offset] += dy[s] for every position s (repeated ids add up).
// Attributes, as the forward's:
//   "row_offset" (int >= 0, default 0): dtable holds rows [row_offset, row_offset + V) of a
//     larger logical table (vocab-parallel embedding); ids outside those rows are skipped;
//   "logical_rows" (int >= 0): every id must lie in [0, logical_rows). Default: V when row_offset
//     is 0; otherwise unknown, and only negative ids are rejected.
// A rejected id fails Compute with INVALID_ARGUMENT naming the id and its position in ids.
absl::StatusOr<std::unique_ptr<Kernel>> CreateEmbeddingGradKernel(const KernelInit& init);

}  // namespace loom::cpu

#endif  // LOOM_KERNELS_CPU_GRADIENTS_EMBEDDING_GRAD_KERNEL_H_
