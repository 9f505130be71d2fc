#include "device/memory_resource.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/format_bytes.h"
#include "core/host_buffer_layout.h"

namespace loom {

absl::StatusOr<void*> HostMemoryResource::Allocate(int64_t bytes) {
  const HostBufferLayout layout = LayOutHostBuffer(bytes);
  // In whole 64-byte lines, as host buffers always were.
  constexpr int64_t kLine = HostBufferLayout::kSmallAlignment;
  const int64_t size = (layout.footprint_bytes + kLine - 1) / kLine * kLine;
  // posix_memalign: aligned_alloc wants a size that is a multiple of the alignment.
  void* pointer = nullptr;
  if (posix_memalign(&pointer, static_cast<size_t>(layout.alignment), static_cast<size_t>(size)) !=
      0) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the host is out of memory allocating ", FormatBytes(bytes)));
  }
  // The huge pages are asked for before the first touch (the memset below faults them in). Best
  // effort: where the kernel has them off, madvise fails or does nothing, and the buffer has small
  // pages. Nothing beyond the footprint is touched, so the memory used stays what the device's
  // accounts say.
  if (layout.huge_page_bytes > 0) {
    madvise(pointer, static_cast<size_t>(layout.huge_page_bytes), MADV_HUGEPAGE);
  }
  std::memset(pointer, 0, static_cast<size_t>(bytes));
  return pointer;
}

int64_t HostMemoryResource::Footprint(int64_t bytes) const {
  return LayOutHostBuffer(bytes).footprint_bytes;
}

void HostMemoryResource::Free(void* pointer, int64_t bytes) { std::free(pointer); }

}  // namespace loom
