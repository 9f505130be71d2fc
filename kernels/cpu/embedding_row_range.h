#ifndef LOOM_KERNELS_CPU_EMBEDDING_ROW_RANGE_H_
#define LOOM_KERNELS_CPU_EMBEDDING_ROW_RANGE_H_

// EmbeddingRowRange: the rows of a (possibly vocabulary-parallel) embedding table that one kernel
// holds, read from 'row_offset' and 'logical_rows' by ReadEmbeddingRowRange, with the check of an
// id and the local row that holds it. Shared by the CPU and CUDA embedding kernels and their
// gradients.

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/tensor.h"
#include "kernels/kernel.h"

namespace loom::cpu {

// The rows of an embedding table that one kernel holds, shared by the embedding kernel and its
// gradient: a shard holds `rows` rows starting at logical row `row_offset`; ids at or above
// `logical_rows` are rejected (int64 max when unknown).
struct EmbeddingRowRange {
  int64_t rows = 0;
  int64_t row_offset = 0;
  int64_t logical_rows = 0;

  // OK when `id` (at flat index `position` of ids of shape `ids_shape`) is in
  // [0, logical_rows); otherwise an InvalidArgument error prefixed by `op_type`.
  absl::Status CheckId(absl::string_view op_type, int64_t id, const Shape& ids_shape,
                       int64_t position) const;

  // The row of the local table that holds `id`, or -1 when another shard holds it.
  int64_t LocalRow(int64_t id) const;
};

// Reads the attributes 'row_offset' (default 0) and 'logical_rows' (default `rows` when
// 'row_offset' is 0, unknown otherwise) of a kernel whose local table has `rows` rows.
absl::StatusOr<EmbeddingRowRange> ReadEmbeddingRowRange(absl::string_view op_type,
                                                        const KernelInit& init, int64_t rows);

}  // namespace loom::cpu

#endif  // LOOM_KERNELS_CPU_EMBEDDING_ROW_RANGE_H_
