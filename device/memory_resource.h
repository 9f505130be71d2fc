#ifndef LOOM_DEVICE_MEMORY_RESOURCE_H_
#define LOOM_DEVICE_MEMORY_RESOURCE_H_

// MemoryResource, where the bytes of one device come from (allocate, free, and the footprint an
// allocation charges to the budget), and HostMemoryResource, the CPU devices' resource, which lays
// buffers out by LayOutHostBuffer. DeviceMemory (runtime/device_memory.h) keeps the accounts; the
// CUDA resources are in device/cuda/cuda_memory_resource.h.

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
  // What an allocation of `bytes` (> 0) takes from the device, rounding included: what
  // DeviceMemory charges to the budget.
  virtual int64_t Footprint(int64_t bytes) const { return bytes; }
};

// Host memory (CPU devices), laid out by LayOutHostBuffer: buffers of 1 MiB or more start on a
// huge page boundary and are backed by transparent huge pages where the kernel allows them
// (`madvise` or `always` in /sys/kernel/mm/transparent_hugepage/enabled).
class HostMemoryResource final : public MemoryResource {
 public:
  absl::StatusOr<void*> Allocate(int64_t bytes) override;
  void Free(void* pointer, int64_t bytes) override;
  int64_t Footprint(int64_t bytes) const override;
};

}  // namespace loom

#endif  // LOOM_DEVICE_MEMORY_RESOURCE_H_
