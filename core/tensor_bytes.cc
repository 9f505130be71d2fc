#include "core/tensor_bytes.h"

#include "core/data_type.h"

namespace loom {

bool BytesHoldTensor(plan::DataType data_type, absl::Span<const int64_t> shape, int64_t bytes) {
  const int64_t element_bytes = DataTypeSize(data_type);
  if (element_bytes == 0 || bytes < 0) return false;
  int64_t elements = 1;
  for (int64_t extent : shape) {
    // elements * extent would exceed bytes (and then not match): stop before it overflows.
    if (extent < 0 || (extent > 0 && elements > bytes / extent)) return false;
    elements *= extent;
  }
  return bytes % element_bytes == 0 && elements == bytes / element_bytes;
}

}  // namespace loom
