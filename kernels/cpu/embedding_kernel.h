#ifndef LOOM_KERNELS_CPU_EMBEDDING_KERNEL_H_
#define LOOM_KERNELS_CPU_EMBEDDING_KERNEL_H_

// The CPU kernel of "embedding" (CreateEmbeddingKernel): a row lookup in a float32 table by
// integer ids, with the vocabulary-parallel attributes "row_offset" and "logical_rows" (ids of
// other shards give rows of zeros). RegisterCpuKernels registers it; the CUDA embedding kernel
// checks its configuration with this factory.

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/kernel.h"

namespace loom::cpu {

// "embedding": a row lookup. Inputs table [V, D] float32 and ids (int32 or int64) of any shape S;
// output [S..., D] float32, output[s] = table[ids[s] - row_offset].
// Attributes:
//   "row_offset" (int >= 0, default 0): the table holds rows [row_offset, row_offset + V) of a
//     larger logical table (vocab-parallel embedding); an id outside those rows gives a row of
//     zeros, so that the partial results of all ranks sum to the full lookup;
//   "logical_rows" (int >= 0): the logical table's row count; every id must lie in
//     [0, logical_rows). Default: V when row_offset is 0 (a whole table); otherwise unknown, and
//     only negative ids are rejected.
// A rejected id fails Compute with INVALID_ARGUMENT naming the id and its position in ids.
absl::StatusOr<std::unique_ptr<Kernel>> CreateEmbeddingKernel(const KernelInit& init);

}  // namespace loom::cpu

#endif  // LOOM_KERNELS_CPU_EMBEDDING_KERNEL_H_
