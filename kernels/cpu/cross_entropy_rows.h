#ifndef LOOM_KERNELS_CPU_CROSS_ENTROPY_ROWS_H_
#define LOOM_KERNELS_CPU_CROSS_ENTROPY_ROWS_H_

// What the sparse cross-entropy kernels share per row of logits: SampleShapeOfLogits,
// CheckSparseLabel and ComputeShiftedExponentialSum (the parts of a row's stable log-sum-exp). The
// CPU kernel and its gradient use them, and the CUDA ones use CheckSparseLabel for their messages.

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/tensor.h"

namespace loom::cpu {

// Per-row pieces shared by the sparse cross-entropy kernel and its gradient: one row is the
// logits of one sample over `classes` classes.

// The shape of the samples of `logits`: all its axes but the last (the classes). An
// InvalidArgument error, prefixed by `op_type`, when `logits` is a scalar.
absl::StatusOr<Shape> SampleShapeOfLogits(absl::string_view op_type, const Shape& logits);

// OK when `label` (at flat index `sample` of labels of shape `labels_shape`) is `ignore_index` or
// in [0, classes); otherwise an InvalidArgument error prefixed by `op_type`.
absl::Status CheckSparseLabel(absl::string_view op_type, int64_t label, int64_t classes,
                              int64_t ignore_index, const Shape& labels_shape, int64_t sample);

// The parts of a row's stable log-sum-exp: log(sum_i exp(row[i])) = maximum + log(sum).
struct ShiftedExponentialSum {
  // The largest logit of the row.
  float maximum;
  // sum_i exp(row[i] - maximum), accumulated in double.
  double sum;
};

// Computes the shifted exponential sum of `row` (`classes` > 0 logits). When `exponentials` is
// not null, writes each exp(row[i] - maximum), as float, to exponentials[i].
ShiftedExponentialSum ComputeShiftedExponentialSum(const float* row, int64_t classes,
                                                   float* exponentials);

}  // namespace loom::cpu

#endif  // LOOM_KERNELS_CPU_CROSS_ENTROPY_ROWS_H_
