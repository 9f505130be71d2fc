#ifndef LOOM_NODE_TENSOR_STATISTICS_H_
#define LOOM_NODE_TENSOR_STATISTICS_H_

// TensorStatistics (ComputeStatistics): the element count, mean and largest magnitude of a host
// tensor, over every element converted to double. `loomctl run` prints them per step for the
// tensors it fetches.

#include <cstdint>

#include "absl/status/statusor.h"
#include "core/tensor.h"

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

#endif  // LOOM_NODE_TENSOR_STATISTICS_H_
