#include "core/host_buffer_layout.h"

#include <algorithm>

namespace loom {

HostBufferLayout LayOutHostBuffer(int64_t bytes) {
  constexpr int64_t kHuge = HostBufferLayout::kHugePageBytes;
  HostBufferLayout layout;
  layout.footprint_bytes = bytes;
  if (bytes < kHuge / 2) return layout;
  layout.alignment = kHuge;
  layout.huge_page_bytes = bytes / kHuge * kHuge;
  if (bytes - layout.huge_page_bytes >= kHuge / 2) layout.huge_page_bytes += kHuge;
  layout.footprint_bytes = std::max(bytes, layout.huge_page_bytes);
  return layout;
}

}  // namespace loom
