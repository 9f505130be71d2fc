#include "core/tensor.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/checked_arithmetic.h"
#include "core/data_type.h"

namespace loom {
namespace {

constexpr int64_t kUnrepresentable = std::numeric_limits<int64_t>::max();

// The product of dimensions[begin, end), or nullopt for a negative extent or an overflow. An
// extent of 0 makes it 0, whatever the others.
std::optional<int64_t> CheckedProduct(absl::Span<const int64_t> dimensions, int begin, int end) {
  bool has_zero = false;
  for (int i = begin; i < end; ++i) {
    if (dimensions[i] < 0) return std::nullopt;
    has_zero = has_zero || dimensions[i] == 0;
  }
  if (has_zero) return 0;
  int64_t product = 1;
  for (int i = begin; i < end; ++i) {
    std::optional<int64_t> next = CheckedMultiply(product, dimensions[i]);
    if (!next.has_value()) return std::nullopt;
    product = *next;
  }
  return product;
}

}  // namespace

std::optional<int64_t> Shape::CheckedNumElements() const {
  return CheckedProduct(dimensions_, 0, rank());
}

int64_t Shape::NumElements() const { return CheckedNumElements().value_or(kUnrepresentable); }

int64_t Shape::ElementsBefore(int axis) const {
  return CheckedProduct(dimensions_, 0, axis).value_or(kUnrepresentable);
}

int64_t Shape::ElementsAfter(int axis) const {
  return CheckedProduct(dimensions_, axis + 1, rank()).value_or(kUnrepresentable);
}

std::string Shape::ToString() const {
  return absl::StrCat("[", absl::StrJoin(dimensions_, ", "), "]");
}

absl::StatusOr<int64_t> CheckedTensorBytes(absl::Span<const int64_t> shape,
                                           plan::DataType data_type) {
  auto text = [shape] { return absl::StrCat("shape [", absl::StrJoin(shape, ", "), "]"); };
  const int64_t element_bytes = DataTypeSize(data_type);
  if (element_bytes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(text(), " has no data type"));
  }
  // Extents of 0 count as 1: the bound holds for every sub-product that kernels compute.
  int64_t bound = 1;
  bool has_zero = false;
  for (int64_t extent : shape) {
    if (extent < 0) {
      return absl::InvalidArgumentError(absl::StrCat(text(), " has a negative extent"));
    }
    if (extent == 0) has_zero = true;
    std::optional<int64_t> next = CheckedMultiply(bound, extent == 0 ? 1 : extent);
    if (!next.has_value() || *next > kMaxTensorElements) {
      return absl::InvalidArgumentError(absl::StrCat(
          text(), " has more than 2^48 (", kMaxTensorElements,
          ") elements, the most a tensor may have", next.has_value() ? "" : " (beyond int64)"));
    }
    bound = *next;
  }
  const int64_t elements = has_zero ? 0 : bound;
  // elements <= 2^48 and element_bytes <= 8: the product fits.
  std::optional<int64_t> bytes = CheckedMultiply(elements, element_bytes);
  if (!bytes.has_value() || *bytes > kMaxTensorBytes) {
    return absl::InvalidArgumentError(absl::StrCat(text(), " of ", DataTypeName(data_type),
                                                   " has more than 2^51 (", kMaxTensorBytes,
                                                   ") bytes, the most a tensor may have"));
  }
  return *bytes;
}

int64_t TensorView::ByteSize() const {
  return CheckedMultiply(NumElements(), DataTypeSize(data_type)).value_or(kUnrepresentable);
}

}  // namespace loom
