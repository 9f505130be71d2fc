#ifndef LOOM_RUNTIME_MEMORY_RESOURCE_H_
#define LOOM_RUNTIME_MEMORY_RESOURCE_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"

namespace loom {

// Where the bytes of one device come from. DeviceMemory keeps the accounts (budget, owners,
// peak); a resource only hands out and takes back memory. Thread-safe.
class MemoryResource {
 public:
  virtual ~MemoryResource() = default;
  // Zero-filled memory of at least `bytes` (> 0) bytes, aligned to at least 64 bytes, or
  // RESOURCE_EXHAUSTED saying what ran out.
  virtual absl::StatusOr<void*> Allocate(int64_t bytes) = 0;
  // `bytes` is what Allocate was asked for.
  virtual void Free(void* pointer, int64_t bytes) = 0;
};

// Host memory (CPU devices). Buffers of kHugePageBytes or more are aligned to it and backed by
// transparent huge pages where the kernel allows them (`madvise` or `always` in
// /sys/kernel/mm/transparent_hugepage/enabled): fewer TLB misses, page faults and page pins for
// the large registers that kernels stream through and that same-host transfers read with
// process_vm_readv (docs/PERFORMANCE.md, alltoall).
class HostMemoryResource final : public MemoryResource {
 public:
  static constexpr size_t kHugePageBytes = size_t{2} << 20;

  absl::StatusOr<void*> Allocate(int64_t bytes) override;
  void Free(void* pointer, int64_t bytes) override;
};

}  // namespace loom

#endif  // LOOM_RUNTIME_MEMORY_RESOURCE_H_
