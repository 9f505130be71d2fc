#ifndef LOOM_KERNELS_CPU_EMBEDDING_SHAPES_H_
#define LOOM_KERNELS_CPU_EMBEDDING_SHAPES_H_

// EmbeddingTableShape and CheckEmbeddingShapes: the shape checks that the CPU embedding kernel and
// its gradient share (a [rows, width] table, and gathered rows of the ids' shape with width
// appended).

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/tensor.h"

namespace loom::cpu {

// The local table of an embedding kernel or its gradient: [rows, width].
struct EmbeddingTableShape {
  int64_t rows = 0;
  int64_t width = 0;
};

// Checks the shapes shared by the embedding kernel and its gradient: `table` has rank 2
// [rows, width], and `gathered` (the rows looked up, one per id: the embedding's output, or the
// gradient's dy) has the shape of `ids` with `width` appended. `table_name` and `gathered_name`
// name the tensors in messages, for example "input 'table'" and "output".
absl::StatusOr<EmbeddingTableShape> CheckEmbeddingShapes(absl::string_view op_type,
                                                         absl::string_view table_name,
                                                         const Shape& table, const Shape& ids,
                                                         absl::string_view gathered_name,
                                                         const Shape& gathered);

}  // namespace loom::cpu

#endif  // LOOM_KERNELS_CPU_EMBEDDING_SHAPES_H_
