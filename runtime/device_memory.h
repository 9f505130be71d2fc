#ifndef LOOM_RUNTIME_DEVICE_MEMORY_H_
#define LOOM_RUNTIME_DEVICE_MEMORY_H_

// DeviceMemory: the memory of one device of a job, an allocator over a MemoryResource that charges
// every byte (registers, staging buffers, sink copies) to the device's budget and answers a request
// over the budget with RESOURCE_EXHAUSTED instead of crashing. JobRuntime makes one per device of
// the plan.

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "core/format_bytes.h"
#include "device/memory_resource.h"

namespace loom {

// The memory of one device: an allocator that accounts for every byte against a budget. The bytes
// come from a MemoryResource (host memory unless told otherwise; the CUDA backend brings GPU
// memory). Exceeding the budget is a RESOURCE_EXHAUSTED error naming the device, the request and
// the largest holders, never a crash. Thread-safe.
class DeviceMemory {
 public:
  // budget_bytes == 0 means no limit. A null resource means host memory.
  DeviceMemory(std::string device_name, int64_t budget_bytes,
               std::unique_ptr<MemoryResource> resource = nullptr);
  ~DeviceMemory();

  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  // 64-byte aligned, zero-filled memory. `owner` says what it is for ("register 'x' slot 1"). The
  // budget is charged the resource's footprint of `bytes` (host buffers of 1 MiB or more are
  // rounded to huge pages: core/host_buffer_layout.h).
  absl::StatusOr<void*> Allocate(int64_t bytes, const std::string& owner);
  void Free(void* pointer);

  // Accounts for memory held elsewhere (for example host copies a sink keeps for the job).
  absl::Status Charge(int64_t bytes, const std::string& owner);
  void Release(int64_t bytes, const std::string& owner);

  const std::string& device_name() const { return device_name_; }
  int64_t budget_bytes() const { return budget_bytes_; }
  int64_t used_bytes() const;
  int64_t peak_bytes() const;
  // What its allocations take: used_bytes less what Charge accounts for.
  int64_t allocated_bytes() const;

 private:
  // Requires mutex_. `requested_bytes`: what the caller asked for, when `bytes` is the resource's
  // rounding of it (the error then says so).
  absl::Status Reserve(int64_t bytes, const std::string& owner, int64_t requested_bytes);

  const std::string device_name_;
  const int64_t budget_bytes_;
  const std::unique_ptr<MemoryResource> resource_;
  mutable std::mutex mutex_;
  int64_t used_bytes_ = 0;
  int64_t peak_bytes_ = 0;
  struct Allocation {
    int64_t requested_bytes = 0;  // what Allocate was asked for
    int64_t charged_bytes = 0;    // what the resource takes for it (MemoryResource::Footprint)
    std::string owner;
  };
  absl::flat_hash_map<void*, Allocation> allocations_;  // live allocations by pointer
  // Charges by owner.
  absl::flat_hash_map<std::string, int64_t> charges_;
};

}  // namespace loom

#endif  // LOOM_RUNTIME_DEVICE_MEMORY_H_
