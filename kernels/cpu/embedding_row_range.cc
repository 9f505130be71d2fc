#include "kernels/cpu/embedding_row_range.h"

#include <cstdint>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/attributes.h"
#include "kernels/cpu/kernel_checks.h"

namespace loom::cpu {

absl::Status EmbeddingRowRange::CheckId(absl::string_view op_type, int64_t id,
                                        const Shape& ids_shape, int64_t position) const {
  if (id >= 0 && id < logical_rows) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      op_type, ": id ", id, " at ids", DescribeIndex(ids_shape, position), " is outside [0, ",
      logical_rows == std::numeric_limits<int64_t>::max() ? "inf" : absl::StrCat(logical_rows),
      ")"));
}

int64_t EmbeddingRowRange::LocalRow(int64_t id) const {
  const int64_t local = id - row_offset;
  return local >= 0 && local < rows ? local : -1;
}

absl::StatusOr<EmbeddingRowRange> ReadEmbeddingRowRange(absl::string_view op_type,
                                                        const KernelInit& init, int64_t rows) {
  Attributes attributes(*init.conf);
  absl::StatusOr<int64_t> row_offset = attributes.GetInt("row_offset", 0);
  if (!row_offset.ok()) return WithOpType(op_type, row_offset.status());
  if (*row_offset < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op_type, ": attribute 'row_offset' must be >= 0, got ", *row_offset));
  }
  EmbeddingRowRange range;
  range.rows = rows;
  range.row_offset = *row_offset;
  range.logical_rows = *row_offset == 0 ? rows : std::numeric_limits<int64_t>::max();
  if (attributes.Has("logical_rows")) {
    absl::StatusOr<int64_t> given = attributes.GetInt("logical_rows");
    if (!given.ok()) return WithOpType(op_type, given.status());
    if (*given < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(op_type, ": attribute 'logical_rows' must be >= 0, got ", *given));
    }
    range.logical_rows = *given;
  }
  return range;
}

}  // namespace loom::cpu
