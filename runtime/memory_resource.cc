#include "runtime/memory_resource.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "runtime/format_bytes.h"

namespace loom {

absl::StatusOr<void*> HostMemoryResource::Allocate(int64_t bytes) {
  constexpr size_t kAlignment = 64;
  const size_t rounded = (static_cast<size_t>(bytes) + kAlignment - 1) / kAlignment * kAlignment;
  // A buffer of a huge page or more starts on a huge page boundary, and its whole huge pages are
  // asked for as transparent huge pages before the first touch (the memset below faults them in).
  // Best effort: where the kernel has them off, madvise fails or does nothing, and the buffer has
  // small pages as before. Nothing beyond the buffer is touched, so the memory used stays what
  // the device's accounts say.
  const bool huge = rounded >= kHugePageBytes;
  // posix_memalign: aligned_alloc wants a size that is a multiple of the alignment.
  void* pointer = nullptr;
  if (posix_memalign(&pointer, huge ? kHugePageBytes : kAlignment, rounded) != 0) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the host is out of memory allocating ", FormatBytes(bytes)));
  }
  if (huge) madvise(pointer, rounded / kHugePageBytes * kHugePageBytes, MADV_HUGEPAGE);
  std::memset(pointer, 0, rounded);
  return pointer;
}

void HostMemoryResource::Free(void* pointer, int64_t bytes) { std::free(pointer); }

}  // namespace loom
