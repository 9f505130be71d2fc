#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "device/cuda/cuda_status.h"
#include "kernels/cuda/cuda_kernel_util.h"
#include "kernels/cuda/moe_slot_index.h"

namespace loom::cuda {
namespace {

// What the device-side report holds while no bad slot was found.
constexpr unsigned long long kNoBadSlot = ~0ull;

// ---------------------------------------------------------------------------------------------
// Slots: validation and the slots of each token.

// Records the first slot (lowest index) whose token is outside [-1, T): its index in the high
// 32 bits, its token in the low ones, so that atomicMin keeps the CPU's first bad slot. With
// `keys`, also writes each slot's sort key (its group's row of the token, or `rows` for an empty
// or bad slot) and its index.
__global__ void PrepareSlotsKernel(const int32_t* __restrict__ slot_token, int64_t slots,
                                   int64_t slots_per_group, int64_t tokens,
                                   unsigned long long* __restrict__ bad_slot,
                                   uint32_t* __restrict__ keys, int32_t* __restrict__ values,
                                   uint32_t rows) {
  for (int64_t slot = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; slot < slots;
       slot += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int32_t t = slot_token[slot];
    const bool valid = t >= 0 && t < tokens;
    if (t != -1 && !valid) {
      atomicMin(bad_slot, (static_cast<unsigned long long>(slot) << 32) | static_cast<uint32_t>(t));
    }
    if (keys != nullptr) {
      keys[slot] = valid ? static_cast<uint32_t>(slot / slots_per_group * tokens + t) : rows;
      values[slot] = static_cast<int32_t>(slot);
    }
  }
}

// row_start[r] = the first sorted slot of row r (a lower bound), for r in [0, rows].
__global__ void RowStartsKernel(const uint32_t* __restrict__ sorted_keys, int64_t slots,
                                int64_t rows, int32_t* __restrict__ row_start) {
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; row <= rows;
       row += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t low = 0;
    int64_t high = slots;
    while (low < high) {
      const int64_t middle = (low + high) / 2;
      if (sorted_keys[middle] < static_cast<uint64_t>(row)) {
        low = middle + 1;
      } else {
        high = middle;
      }
    }
    row_start[row] = static_cast<int32_t>(low);
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// BadSlotReport.

BadSlotReport::~BadSlotReport() {
  if (event_ != nullptr) cudaEventDestroy(event_);
  if (host_ != nullptr) cudaFreeHost(host_);
  if (device_ != nullptr) cudaFree(device_);
}

absl::Status BadSlotReport::Allocate(cudaStream_t stream, const std::string& what) {
  if (absl::Status status = CudaStatus(cudaMalloc(&device_, sizeof(*device_)), what);
      !status.ok()) {
    return status;
  }
  if (absl::Status status =
          CudaStatus(cudaHostAlloc(&host_, sizeof(*host_), cudaHostAllocDefault), what);
      !status.ok()) {
    return status;
  }
  *host_ = kNoBadSlot;
  if (absl::Status status =
          CudaStatus(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), what);
      !status.ok()) {
    return status;
  }
  // Ordered before every act on the stream.
  return CudaStatus(cudaMemsetAsync(device_, 0xff, sizeof(*device_), stream), what);
}

absl::Status BadSlotReport::Validate(const int32_t* slot_token, const MoeExtents& extents,
                                     cudaStream_t stream, const std::string& what) {
  PrepareSlotsKernel<<<static_cast<int>(BlocksFor(extents.slots(), kMoeThreads)), kMoeThreads, 0,
                       stream>>>(slot_token, extents.slots(), extents.slots_per_group(),
                                 extents.tokens, device_, nullptr, nullptr, 0);
  return LaunchStatus(what);
}

absl::Status BadSlotReport::Check(const std::string& task_name, const char* op_type,
                                  const MoeExtents& extents) const {
  const cudaError_t ready = cudaEventQuery(event_);
  if (ready == cudaErrorNotReady) {
    // Not an error: the report comes with a later act. Clear it from the thread's last error.
    (void)cudaGetLastError();
    return absl::OkStatus();
  }
  if (ready != cudaSuccess) {
    return CudaStatus(ready, absl::StrCat("task '", task_name, "': ", op_type));
  }
  const unsigned long long found = *static_cast<volatile unsigned long long*>(host_);
  if (found == kNoBadSlot || extents.slots() == 0) return absl::OkStatus();
  const int64_t slot = static_cast<int64_t>(found >> 32);
  const int32_t token = static_cast<int32_t>(static_cast<uint32_t>(found & 0xffffffffu));
  const int64_t c = slot % extents.capacity;
  const int64_t e = slot / extents.capacity % extents.experts;
  const int64_t b = slot / extents.slots_per_group();
  return absl::InvalidArgumentError(
      absl::StrCat("task '", task_name, "': ", op_type, ": slot_token[", b, ", ", e, ", ", c,
                   "] = ", token, " is not a token of the group (0 to ", extents.tokens - 1,
                   ") or -1 (found on the GPU by an earlier act)"));
}

absl::Status BadSlotReport::Publish(cudaStream_t stream, const std::string& what) {
  if (absl::Status status = CudaStatus(
          cudaMemcpyAsync(host_, device_, sizeof(*host_), cudaMemcpyDeviceToHost, stream), what);
      !status.ok()) {
    return status;
  }
  return CudaStatus(cudaEventRecord(event_, stream), what);
}

// ---------------------------------------------------------------------------------------------
// SlotIndex.

SlotIndex::~SlotIndex() {
  for (void* buffer :
       {static_cast<void*>(keys_), static_cast<void*>(sorted_keys_), static_cast<void*>(values_),
        static_cast<void*>(sorted_slots_), static_cast<void*>(row_start_), temporary_}) {
    if (buffer != nullptr) cudaFree(buffer);
  }
}

absl::Status SlotIndex::Allocate(const std::string& what) {
  const int64_t slots = extents_.slots();
  if (slots > 0) {
    for (void** buffer :
         {reinterpret_cast<void**>(&keys_), reinterpret_cast<void**>(&sorted_keys_),
          reinterpret_cast<void**>(&values_), reinterpret_cast<void**>(&sorted_slots_)}) {
      if (absl::Status status = CudaStatus(cudaMalloc(buffer, slots * 4), what); !status.ok()) {
        return status;
      }
    }
    if (absl::Status status = CudaStatus(
            cub::DeviceRadixSort::SortPairs(nullptr, temporary_bytes_, keys_, sorted_keys_, values_,
                                            sorted_slots_, static_cast<int>(slots), 0, KeyBits()),
            what);
        !status.ok()) {
      return status;
    }
    if (absl::Status status =
            CudaStatus(cudaMalloc(&temporary_, std::max<size_t>(temporary_bytes_, 1)), what);
        !status.ok()) {
      return status;
    }
  }
  return CudaStatus(cudaMalloc(&row_start_, (extents_.rows() + 1) * sizeof(int32_t)), what);
}

absl::Status SlotIndex::Build(const int32_t* slot_token, unsigned long long* bad_slot,
                              cudaStream_t stream, const std::string& what) {
  const int64_t slots = extents_.slots();
  if (slots == 0) {
    return CudaStatus(
        cudaMemsetAsync(row_start_, 0, (extents_.rows() + 1) * sizeof(int32_t), stream), what);
  }
  PrepareSlotsKernel<<<static_cast<int>(BlocksFor(slots, kMoeThreads)), kMoeThreads, 0, stream>>>(
      slot_token, slots, extents_.slots_per_group(), extents_.tokens, bad_slot, keys_, values_,
      static_cast<uint32_t>(extents_.rows()));
  if (absl::Status status = LaunchStatus(what); !status.ok()) return status;
  size_t bytes = temporary_bytes_;
  if (absl::Status status =
          CudaStatus(cub::DeviceRadixSort::SortPairs(temporary_, bytes, keys_, sorted_keys_,
                                                     values_, sorted_slots_,
                                                     static_cast<int>(slots), 0, KeyBits(), stream),
                     what);
      !status.ok()) {
    return status;
  }
  RowStartsKernel<<<static_cast<int>(BlocksFor(extents_.rows() + 1, kMoeThreads)), kMoeThreads, 0,
                    stream>>>(sorted_keys_, slots, extents_.rows(), row_start_);
  return LaunchStatus(what);
}

int SlotIndex::KeyBits() const {
  int bits = 1;
  while (bits < 32 && (int64_t{1} << bits) <= extents_.rows()) ++bits;
  return bits;
}

// ---------------------------------------------------------------------------------------------
// The factories' check.

absl::Status CheckIndexable(const char* op_type, const MoeExtents& extents) {
  constexpr int64_t kLimit = std::numeric_limits<int32_t>::max();
  if (extents.slots() >= kLimit || extents.rows() >= kLimit) {
    return absl::InvalidArgumentError(
        absl::StrCat(op_type, ": the CUDA kernel handles fewer than 2^31 slots and tokens, not ",
                     extents.slots(), " slots and ", extents.rows(), " tokens"));
  }
  return absl::OkStatus();
}

}  // namespace loom::cuda
