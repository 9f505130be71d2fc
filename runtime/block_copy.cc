#include "runtime/block_copy.h"

#include <cstddef>
#include <cstring>

#include "core/data_type.h"

namespace loom {

void CopyBlock(const TensorView& source, absl::Span<const int64_t> source_origin,
               const TensorView& destination, absl::Span<const int64_t> destination_origin,
               const Shape& block) {
  DCHECK_EQ(source.data_type, destination.data_type);
  const int64_t element_size = DataTypeSize(source.data_type);
  const auto* from = static_cast<const std::byte*>(source.data);
  auto* to = static_cast<std::byte*>(destination.data);
  ForEachBlockRun(block, source.shape, source_origin, destination.shape, destination_origin,
                  [&](int64_t source_offset, int64_t destination_offset, int64_t count) {
                    std::memcpy(to + destination_offset * element_size,
                                from + source_offset * element_size,
                                static_cast<size_t>(count * element_size));
                  });
}

}  // namespace loom
