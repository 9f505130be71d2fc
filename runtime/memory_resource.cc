#include "runtime/memory_resource.h"

#include <cstdlib>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "runtime/format_bytes.h"

namespace loom {

absl::StatusOr<void*> HostMemoryResource::Allocate(int64_t bytes) {
  constexpr size_t kAlignment = 64;
  size_t rounded = (static_cast<size_t>(bytes) + kAlignment - 1) / kAlignment * kAlignment;
  void* pointer = std::aligned_alloc(kAlignment, rounded);
  if (pointer == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the host is out of memory allocating ", FormatBytes(bytes)));
  }
  std::memset(pointer, 0, rounded);
  return pointer;
}

void HostMemoryResource::Free(void* pointer, int64_t bytes) { std::free(pointer); }

}  // namespace loom
