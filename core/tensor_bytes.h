#ifndef LOOM_CORE_TENSOR_BYTES_H_
#define LOOM_CORE_TENSOR_BYTES_H_

// BytesHoldTensor: whether a byte count is exactly that of a dense tensor of a data type and shape.
// The daemon's job run and the client's fetched tensors check it before they read a tensor that
// came from another process.

#include <cstdint>

#include "absl/types/span.h"
#include "proto/plan.pb.h"

namespace loom {

// Whether `bytes` is exactly the size of a dense tensor of `data_type` and `shape`: false for an
// unspecified data type, a negative extent, or a size beyond int64. For tensors that come from
// another process (a node's forwarded piece, a daemon's event), before they are read.
bool BytesHoldTensor(plan::DataType data_type, absl::Span<const int64_t> shape, int64_t bytes);

}  // namespace loom

#endif  // LOOM_CORE_TENSOR_BYTES_H_
