#ifndef LOOM_CLIENT_TENSOR_STATISTICS_H_
#define LOOM_CLIENT_TENSOR_STATISTICS_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "runtime/tensor.h"

namespace loom {

// What `loomctl run`'s per-step lines say of a tensor (and, for a scalar fetch, its value in the
// step lines of training jobs). Over every element, converted to double (bfloat16 widened); NaN
// when the tensor is empty or holds a NaN.
struct TensorStatistics {
  int64_t elements = 0;
  double mean = 0;
  double max_abs = 0;
};
// INVALID_ARGUMENT when the bytes do not match the shape and data type.
absl::StatusOr<TensorStatistics> ComputeStatistics(const HostTensor& tensor);

}  // namespace loom

#endif  // LOOM_CLIENT_TENSOR_STATISTICS_H_
