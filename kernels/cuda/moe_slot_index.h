#ifndef LOOM_KERNELS_CUDA_MOE_SLOT_INDEX_H_
#define LOOM_KERNELS_CUDA_MOE_SLOT_INDEX_H_

// What the CUDA mixture-of-experts kernels (moe_route_kernels.cu, moe_slot_kernels.cu) share: the
// extents of the slot tensors, the report of a bad slot_token found on the GPU (BadSlotReport),
// the slots of each token in slot order (SlotIndex, a stable sort of the slots by token), and the
// factories' check that slots and tokens fit the kernels' 32-bit indices. Defined in
// moe_slot_index.cu.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace loom::cuda {

// Threads of a block of the MoE kernels.
inline constexpr int kMoeThreads = 256;

// The extents of the slot tensors: groups B, tokens T, experts E, capacity C, row width W.
struct MoeExtents {
  int64_t groups = 0, tokens = 0, experts = 0, capacity = 0, width = 0;

  int64_t slots_per_group() const { return experts * capacity; }
  int64_t slots() const { return groups * experts * capacity; }
  int64_t rows() const { return groups * tokens; }
};

// A slot_token outside [-1, T), found on the GPU by one act and reported by the next: the device
// keeps the first bad slot (sticky), each act copies it to a pinned host mirror, and Compute
// reads the mirror once the copy of an earlier act has landed (an event says so).
class BadSlotReport {
 public:
  BadSlotReport() = default;
  BadSlotReport(const BadSlotReport&) = delete;
  BadSlotReport& operator=(const BadSlotReport&) = delete;
  ~BadSlotReport();

  absl::Status Allocate(cudaStream_t stream, const std::string& what);

  unsigned long long* device() const { return device_; }

  // Enqueues the validation of slot_token alone (no index; extents.slots() > 0): a bad slot is
  // recorded on the device.
  absl::Status Validate(const int32_t* slot_token, const MoeExtents& extents, cudaStream_t stream,
                        const std::string& what);

  // INVALID_ARGUMENT naming the slot when an earlier act found a bad one and its copy landed.
  absl::Status Check(const std::string& task_name, const char* op_type,
                     const MoeExtents& extents) const;

  // After an act's kernels: brings the device's report to the host mirror.
  absl::Status Publish(cudaStream_t stream, const std::string& what);

 private:
  unsigned long long* device_ = nullptr;
  unsigned long long* host_ = nullptr;
  cudaEvent_t event_ = nullptr;
};

// The slots of each token (row b * T + t), in slot order: the slots stably sorted by row, and
// where each row's run starts. Also validates slot_token into a BadSlotReport.
class SlotIndex {
 public:
  explicit SlotIndex(const MoeExtents& extents) : extents_(extents) {}
  SlotIndex(const SlotIndex&) = delete;
  SlotIndex& operator=(const SlotIndex&) = delete;
  ~SlotIndex();

  absl::Status Allocate(const std::string& what);

  // Enqueues the validation of slot_token and the index.
  absl::Status Build(const int32_t* slot_token, unsigned long long* bad_slot, cudaStream_t stream,
                     const std::string& what);

  const int32_t* row_start() const { return row_start_; }
  const int32_t* sorted_slots() const { return sorted_slots_; }

 private:
  // Bits of the keys, which go up to rows() (an empty slot).
  int KeyBits() const;

  const MoeExtents extents_;
  uint32_t* keys_ = nullptr;
  uint32_t* sorted_keys_ = nullptr;
  int32_t* values_ = nullptr;
  int32_t* sorted_slots_ = nullptr;
  int32_t* row_start_ = nullptr;
  void* temporary_ = nullptr;
  size_t temporary_bytes_ = 0;
};

// The CUDA kernels index slots and tokens with 32 bits.
absl::Status CheckIndexable(const char* op_type, const MoeExtents& extents);

}  // namespace loom::cuda

#endif  // LOOM_KERNELS_CUDA_MOE_SLOT_INDEX_H_
