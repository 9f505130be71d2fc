#include "device/cuda/cuda_memory_resource.h"

#include <cuda_runtime_api.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/format_bytes.h"
#include "device/cuda/cuda_status.h"
#include "glog/logging.h"

namespace loom::cuda {

CachingCudaMemoryResource::~CachingCudaMemoryResource() {
  std::lock_guard<std::mutex> lock(mutex_);
  ReleaseCacheLocked();
}

int64_t CachingCudaMemoryResource::SizeClass(int64_t bytes) {
  constexpr int64_t kSmall = 512;
  constexpr int64_t kLarge = 2 << 20;
  const int64_t unit = bytes <= (1 << 20) ? kSmall : kLarge;
  return (bytes + unit - 1) / unit * unit;
}

absl::StatusOr<void*> CachingCudaMemoryResource::Allocate(int64_t bytes) {
  const int64_t size = SizeClass(bytes);
  void* pointer = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto cached = cache_.find(size);
    if (cached != cache_.end()) {
      pointer = cached->second;
      cache_.erase(cached);
      cached_bytes_ -= size;
    } else {
      if (absl::Status status = CudaStatus(cudaSetDevice(device_), "selecting the device");
          !status.ok()) {
        return status;
      }
      cudaError_t error = cudaMalloc(&pointer, static_cast<size_t>(size));
      if (error == cudaErrorMemoryAllocation && !cache_.empty()) {
        cudaGetLastError();
        ReleaseCacheLocked();
        error = cudaMalloc(&pointer, static_cast<size_t>(size));
      }
      if (error != cudaSuccess) {
        cudaGetLastError();
        return CudaStatus(error,
                          absl::StrCat("the GPU is out of memory allocating ", FormatBytes(bytes)));
      }
      ++driver_allocations_;
    }
  }
  // The legacy stream, then a wait: the zeros are in place before any stream of the job (all
  // non-blocking) touches the block.
  absl::Status status =
      CudaStatus(cudaMemset(pointer, 0, static_cast<size_t>(size)), "zero-filling GPU memory");
  if (status.ok()) {
    status = CudaStatus(cudaStreamSynchronize(cudaStreamLegacy), "zero-filling GPU memory");
  }
  if (!status.ok()) {
    Free(pointer, bytes);
    return status;
  }
  return pointer;
}

void CachingCudaMemoryResource::Free(void* pointer, int64_t bytes) {
  if (pointer == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  const int64_t size = SizeClass(bytes);
  cache_.emplace(size, pointer);
  cached_bytes_ += size;
}

void CachingCudaMemoryResource::ReleaseCacheLocked() {
  if (cache_.empty()) return;
  cudaSetDevice(device_);
  for (const auto& [size, pointer] : cache_) {
    if (cudaError_t error = cudaFree(pointer); error != cudaSuccess) {
      LOG(ERROR) << "cuda:" << device_ << ": cudaFree: " << cudaGetErrorString(error);
    }
  }
  cache_.clear();
  cached_bytes_ = 0;
}

int64_t CachingCudaMemoryResource::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cached_bytes_;
}

int64_t CachingCudaMemoryResource::driver_allocations() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return driver_allocations_;
}

absl::StatusOr<void*> PinnedHostMemoryResource::Allocate(int64_t bytes) {
  void* pointer = nullptr;
  cudaError_t error = cudaHostAlloc(&pointer, static_cast<size_t>(bytes), cudaHostAllocPortable);
  if (error != cudaSuccess) {
    cudaGetLastError();
    return CudaStatus(error, absl::StrCat("pinning ", FormatBytes(bytes), " of host memory"));
  }
  std::memset(pointer, 0, static_cast<size_t>(bytes));
  return pointer;
}

void PinnedHostMemoryResource::Free(void* pointer, int64_t bytes) {
  if (cudaError_t error = cudaFreeHost(pointer); error != cudaSuccess) {
    LOG(ERROR) << "cudaFreeHost: " << cudaGetErrorString(error);
  }
}

}  // namespace loom::cuda
