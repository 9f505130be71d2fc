#ifndef LOOM_RUNTIME_TENSOR_BYTES_H_
#define LOOM_RUNTIME_TENSOR_BYTES_H_

#include <cstdint>

#include "absl/types/span.h"
#include "proto/plan.pb.h"

namespace loom {

// Whether `bytes` is exactly the size of a dense tensor of `data_type` and `shape`: false for an
// unspecified data type, a negative extent, or a size beyond int64. For tensors that come from
// another process (a node's forwarded piece, a daemon's event), before they are read.
bool BytesHoldTensor(plan::DataType data_type, absl::Span<const int64_t> shape, int64_t bytes);

}  // namespace loom

#endif  // LOOM_RUNTIME_TENSOR_BYTES_H_
