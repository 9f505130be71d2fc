#ifndef LOOM_RUNTIME_MEMORY_RESOURCE_H_
#define LOOM_RUNTIME_MEMORY_RESOURCE_H_

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

// Host memory (CPU devices).
class HostMemoryResource final : public MemoryResource {
 public:
  absl::StatusOr<void*> Allocate(int64_t bytes) override;
  void Free(void* pointer, int64_t bytes) override;
};

}  // namespace loom

#endif  // LOOM_RUNTIME_MEMORY_RESOURCE_H_
