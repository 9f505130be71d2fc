#ifndef LOOM_DEVICE_CUDA_CUDA_MEMORY_RESOURCE_H_
#define LOOM_DEVICE_CUDA_CUDA_MEMORY_RESOURCE_H_

// The MemoryResources of a node's CUDA backend (node/cuda_backend.cc): CachingCudaMemoryResource,
// GPU memory of one device with a cache of freed blocks by size class, and
// PinnedHostMemoryResource, page-locked host memory for the CPU devices of a job with GPUs.
// DeviceMemory keeps the budget; these only supply the bytes.

#include <cstdint>
#include <map>
#include <mutex>

#include "absl/status/statusor.h"
#include "device/memory_resource.h"

namespace loom::cuda {

// GPU memory of one device, with a cache: freed blocks are kept by size class and handed out
// again instead of going back to cudaFree (which synchronizes the whole device). When cudaMalloc
// runs out, the cache is returned to the driver and the allocation tried once more. The budget
// is DeviceMemory's (the plan's per-device memory budget); this class only supplies the bytes.
// Blocks are zero-filled before they are handed out, like every MemoryResource's.
class CachingCudaMemoryResource final : public MemoryResource {
 public:
  explicit CachingCudaMemoryResource(int device) : device_(device) {}
  ~CachingCudaMemoryResource() override;

  absl::StatusOr<void*> Allocate(int64_t bytes) override;
  void Free(void* pointer, int64_t bytes) override;

  // Sizes are rounded up to 512 bytes, and above 1 MiB to 2 MiB, so that cached blocks fit
  // later requests of about the same size.
  static int64_t SizeClass(int64_t bytes);

  int64_t cached_bytes() const;
  int64_t driver_allocations() const;

 private:
  void ReleaseCacheLocked();  // requires mutex_

  const int device_;
  mutable std::mutex mutex_;
  std::multimap<int64_t, void*> cache_;  // size class -> block
  int64_t cached_bytes_ = 0;
  int64_t driver_allocations_ = 0;
};

// Page-locked host memory (cudaHostAlloc), so that copies between it and a GPU are DMA transfers
// that run asynchronously on a stream. CPU devices of a job with GPUs use it.
class PinnedHostMemoryResource final : public MemoryResource {
 public:
  absl::StatusOr<void*> Allocate(int64_t bytes) override;
  void Free(void* pointer, int64_t bytes) override;
};

}  // namespace loom::cuda

#endif  // LOOM_DEVICE_CUDA_CUDA_MEMORY_RESOURCE_H_
