#include "kernels/cpu/embedding_shapes.h"

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace loom::cpu {

absl::StatusOr<EmbeddingTableShape> CheckEmbeddingShapes(absl::string_view op_type,
                                                         absl::string_view table_name,
                                                         const Shape& table, const Shape& ids,
                                                         absl::string_view gathered_name,
                                                         const Shape& gathered) {
  if (table.rank() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        op_type, ": ", table_name, " must have rank 2 [rows, width], got ", table.ToString()));
  }
  EmbeddingTableShape table_shape;
  table_shape.rows = table.dimension(0);
  table_shape.width = table.dimension(1);
  std::vector<int64_t> expected_dimensions(ids.dimensions().begin(), ids.dimensions().end());
  expected_dimensions.push_back(table_shape.width);
  const Shape expected(expected_dimensions);
  if (gathered != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        op_type, ": ", gathered_name, " has shape ", gathered.ToString(), " but ids ",
        ids.ToString(), " of table ", table.ToString(), " give ", expected.ToString()));
  }
  return table_shape;
}

}  // namespace loom::cpu
