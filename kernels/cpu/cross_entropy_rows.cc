#include "kernels/cpu/cross_entropy_rows.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/kernel_checks.h"

namespace loom::cpu {

absl::StatusOr<Shape> SampleShapeOfLogits(absl::string_view op_type, const Shape& logits) {
  if (logits.rank() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(op_type, ": input 'logits' must have rank >= 1, got a scalar"));
  }
  return Shape(logits.dimensions().subspan(0, logits.rank() - 1));
}

absl::Status CheckSparseLabel(absl::string_view op_type, int64_t label, int64_t classes,
                              int64_t ignore_index, const Shape& labels_shape, int64_t sample) {
  if (label == ignore_index || (label >= 0 && label < classes)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(op_type, ": label ", label, " at labels", DescribeIndex(labels_shape, sample),
                   " is outside [0, ", classes, ") (ignore_index is ", ignore_index, ")"));
}

ShiftedExponentialSum ComputeShiftedExponentialSum(const float* row, int64_t classes,
                                                   float* exponentials) {
  ShiftedExponentialSum result;
  result.maximum = *std::max_element(row, row + classes);
  result.sum = 0.0;
  for (int64_t i = 0; i < classes; ++i) {
    const double exponential = std::exp(static_cast<double>(row[i] - result.maximum));
    if (exponentials != nullptr) exponentials[i] = static_cast<float>(exponential);
    result.sum += exponential;
  }
  return result;
}

}  // namespace loom::cpu
