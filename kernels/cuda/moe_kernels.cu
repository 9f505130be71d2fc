#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>
#include <limits>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "kernels/attributes.h"
#include "kernels/cpu/kernel_checks.h"
#include "kernels/cpu/moe_route_kernel.h"
#include "kernels/cpu/moe_slot_kernels.h"
#include "kernels/cuda/cuda_kernel_util.h"
#include "kernels/cuda/device_values.cuh"
#include "kernels/cuda/moe_kernels.h"
#include "runtime/cuda/cuda_status.h"
#include "runtime/data_type.h"
#include "runtime/tensor.h"

namespace loom::cuda {
namespace {

constexpr char kRoute[] = "moe_route";
constexpr char kRouteGrad[] = "moe_route_grad";
constexpr char kDispatch[] = "moe_dispatch";
constexpr char kCombine[] = "moe_combine";
constexpr char kDispatchGrad[] = "moe_dispatch_grad";

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
// What the device-side report holds while no bad slot was found.
constexpr unsigned long long kNoBadSlot = ~0ull;

// ---------------------------------------------------------------------------------------------
// Routing, as the CPU kernel computes it (the same float operations in the same order).

// The `k` largest of p[0, experts) in order (ties to the lower index), as the CPU's TopExperts.
template <typename T>
__device__ void TopExperts(const T* p, int64_t experts, int k, int64_t top[2]) {
  top[0] = -1;
  top[1] = -1;
  for (int rank = 0; rank < k; ++rank) {
    int64_t best = -1;
    float best_value = 0.0f;
    for (int64_t e = 0; e < experts; ++e) {
      if (e == top[0]) continue;
      const float value = ToFloat(p[e]);
      if (best < 0 || value > best_value) {
        best = e;
        best_value = value;
      }
    }
    top[rank] = best;
  }
}

template <typename T>
__device__ float ChosenSum(const T* p, const int64_t top[2], int k) {
  float sum = 0.0f;
  for (int rank = 0; rank < k; ++rank) sum = __fadd_rn(sum, ToFloat(p[top[rank]]));
  return sum;
}

// Each token's choices and weights, stored in GShard's assignment order: group b's assignment
// rank * T + t at b * k * T + rank * T + t.
template <typename T>
__global__ void ChooseExpertsKernel(const T* __restrict__ probs, int64_t groups, int64_t tokens,
                                    int64_t experts, int k, int32_t* __restrict__ choices,
                                    float* __restrict__ weights) {
  const int64_t rows = groups * tokens;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; row < rows;
       row += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t b = row / tokens;
    const int64_t t = row % tokens;
    const T* p = probs + row * experts;
    int64_t top[2];
    TopExperts(p, experts, k, top);
    const float sum = ChosenSum(p, top, k);
    for (int rank = 0; rank < k; ++rank) {
      const int64_t assignment = (b * k + rank) * tokens + t;
      choices[assignment] = static_cast<int32_t>(top[rank]);
      weights[assignment] = k == 1 ? 1.0f : __fdiv_rn(ToFloat(p[top[rank]]), sum);
    }
  }
}

// One block per (group, expert): its slots filled in assignment order. An assignment's slot is
// the number of earlier assignments of the group to the same expert (a block-wide prefix count
// over chunks of kThreads assignments); one at or past the capacity is dropped.
template <typename T>
__global__ void AssignSlotsKernel(const int32_t* __restrict__ choices,
                                  const float* __restrict__ weights, int64_t groups, int64_t tokens,
                                  int64_t experts, int k, int64_t capacity,
                                  int32_t* __restrict__ slot_token, T* __restrict__ slot_weight,
                                  T* __restrict__ expert_fraction,
                                  int32_t* __restrict__ expert_dropped) {
  __shared__ int warp_counts[kWarps];
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int64_t assignments = k * tokens;
  for (int64_t block = blockIdx.x; block < groups * experts; block += gridDim.x) {
    const int64_t b = block / experts;
    const int64_t e = block % experts;
    const int32_t* sequence = choices + b * assignments;
    const float* sequence_weights = weights + b * assignments;
    int32_t* tokens_of_slots = slot_token + block * capacity;
    T* weights_of_slots = slot_weight + block * capacity;
    int64_t filled = 0;
    for (int64_t start = 0; start < assignments; start += kThreads) {
      const int64_t i = start + threadIdx.x;
      const bool mine = i < assignments && sequence[i] == e;
      const unsigned ballot = __ballot_sync(0xffffffffu, mine);
      if (lane == 0) warp_counts[warp] = __popc(ballot);
      __syncthreads();
      int64_t before = filled;
      int chunk = 0;
      for (int other = 0; other < kWarps; ++other) {
        if (other < warp) before += warp_counts[other];
        chunk += warp_counts[other];
      }
      if (mine) {
        const int64_t position = before + __popc(ballot & ((1u << lane) - 1u));
        if (position < capacity) {
          tokens_of_slots[position] = static_cast<int32_t>(i % tokens);
          weights_of_slots[position] = FromFloat<T>(sequence_weights[i]);
        }
      }
      filled += chunk;
      __syncthreads();
    }
    for (int64_t c = (filled < capacity ? filled : capacity) + threadIdx.x; c < capacity;
         c += kThreads) {
      tokens_of_slots[c] = -1;
      weights_of_slots[c] = FromFloat<T>(0.0f);
    }
    if (threadIdx.x == 0) {
      // As the CPU: the count (exact in float) over k * T.
      expert_fraction[block] =
          FromFloat<T>(__fdiv_rn(static_cast<float>(filled), static_cast<float>(assignments)));
      expert_dropped[block] = static_cast<int32_t>(filled > capacity ? filled - capacity : 0);
    }
  }
}

template <typename T>
__global__ void SumDroppedKernel(const int32_t* __restrict__ expert_dropped, int64_t groups,
                                 int64_t experts, T* __restrict__ dropped) {
  for (int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; b < groups;
       b += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t total = 0;
    for (int64_t e = 0; e < experts; ++e) total += expert_dropped[b * experts + e];
    dropped[b] = FromFloat<T>(static_cast<float>(total));
  }
}

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

// out[slot] = the slot's token row of x, zeros for an empty (or bad) slot.
template <typename T>
__global__ void DispatchKernel(const T* __restrict__ x, const int32_t* __restrict__ slot_token,
                               int64_t tokens, int64_t slots_per_group, int64_t width,
                               int64_t count, T* __restrict__ out) {
  for (int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; index < count;
       index += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t slot = index / width;
    const int64_t column = index % width;
    const int32_t t = slot_token[slot];
    if (t >= 0 && t < tokens) {
      out[index] = x[(slot / slots_per_group * tokens + t) * width + column];
    } else {
      out[index] = FromFloat<T>(0.0f);
    }
  }
}

// y[row] = the sum over the row's slots, in slot order, of weight * the slot's row (weight 1
// without `weights`); zeros for a token in no slot. Rounded as the CPU's y += weight * row.
template <typename T>
__global__ void GatherSlotsKernel(const T* __restrict__ slot_rows, const T* __restrict__ weights,
                                  const int32_t* __restrict__ row_start,
                                  const int32_t* __restrict__ sorted_slots, int64_t width,
                                  int64_t count, T* __restrict__ y) {
  for (int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; index < count;
       index += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = index / width;
    const int64_t column = index % width;
    const int32_t end = row_start[row + 1];
    float sum = 0.0f;
    for (int32_t position = row_start[row]; position < end; ++position) {
      const int64_t slot = sorted_slots[position];
      const float weight = weights != nullptr ? ToFloat(weights[slot]) : 1.0f;
      sum = __fadd_rn(sum, __fmul_rn(weight, ToFloat(slot_rows[slot * width + column])));
    }
    y[index] = FromFloat<T>(sum);
  }
}

// One thread per token of a group that holds slots: for each of its slots (in slot order), with
// e the slot's expert and s the sum of the token's chosen p, dprobs[t, j] += dw * ([j == e] - w_e)
// / s for its chosen j, as the CPU. dprobs was zeroed before.
template <typename T>
__global__ void RouteGradKernel(const T* __restrict__ probs, const T* __restrict__ dweight,
                                const int32_t* __restrict__ row_start,
                                const int32_t* __restrict__ sorted_slots, int64_t rows,
                                int64_t experts, int64_t capacity, int k, T* __restrict__ dprobs) {
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; row < rows;
       row += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int32_t begin = row_start[row];
    const int32_t end = row_start[row + 1];
    if (begin == end) continue;
    const T* p = probs + row * experts;
    int64_t top[2];
    TopExperts(p, experts, k, top);
    const float sum = ChosenSum(p, top, k);
    float gradient[2] = {0.0f, 0.0f};
    for (int32_t position = begin; position < end; ++position) {
      const int64_t slot = sorted_slots[position];
      const int64_t e = slot / capacity % experts;
      const float weight = k == 1 ? 1.0f : __fdiv_rn(ToFloat(p[e]), sum);
      const float dw = ToFloat(dweight[slot]);
      for (int rank = 0; rank < k; ++rank) {
        const float indicator = top[rank] == e ? 1.0f : 0.0f;
        gradient[rank] =
            __fadd_rn(gradient[rank], __fdiv_rn(__fmul_rn(dw, __fsub_rn(indicator, weight)), sum));
      }
    }
    for (int rank = 0; rank < k; ++rank) {
      dprobs[row * experts + top[rank]] = FromFloat<T>(gradient[rank]);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Host side.

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
  ~BadSlotReport() {
    if (event_ != nullptr) cudaEventDestroy(event_);
    if (host_ != nullptr) cudaFreeHost(host_);
    if (device_ != nullptr) cudaFree(device_);
  }

  absl::Status Allocate(cudaStream_t stream, const std::string& what) {
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

  unsigned long long* device() const { return device_; }

  // INVALID_ARGUMENT naming the slot when an earlier act found a bad one and its copy landed.
  absl::Status Check(const std::string& task_name, const char* op_type,
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

  // After an act's kernels: brings the device's report to the host mirror.
  absl::Status Publish(cudaStream_t stream, const std::string& what) {
    if (absl::Status status = CudaStatus(
            cudaMemcpyAsync(host_, device_, sizeof(*host_), cudaMemcpyDeviceToHost, stream), what);
        !status.ok()) {
      return status;
    }
    return CudaStatus(cudaEventRecord(event_, stream), what);
  }

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
  ~SlotIndex() {
    for (void* buffer :
         {static_cast<void*>(keys_), static_cast<void*>(sorted_keys_), static_cast<void*>(values_),
          static_cast<void*>(sorted_slots_), static_cast<void*>(row_start_), temporary_}) {
      if (buffer != nullptr) cudaFree(buffer);
    }
  }

  absl::Status Allocate(const std::string& what) {
    const int64_t slots = extents_.slots();
    if (slots > 0) {
      for (void** buffer :
           {reinterpret_cast<void**>(&keys_), reinterpret_cast<void**>(&sorted_keys_),
            reinterpret_cast<void**>(&values_), reinterpret_cast<void**>(&sorted_slots_)}) {
        if (absl::Status status = CudaStatus(cudaMalloc(buffer, slots * 4), what); !status.ok()) {
          return status;
        }
      }
      if (absl::Status status =
              CudaStatus(cub::DeviceRadixSort::SortPairs(nullptr, temporary_bytes_, keys_,
                                                         sorted_keys_, values_, sorted_slots_,
                                                         static_cast<int>(slots), 0, KeyBits()),
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

  // Enqueues the validation of slot_token and the index.
  absl::Status Build(const int32_t* slot_token, unsigned long long* bad_slot, cudaStream_t stream,
                     const std::string& what) {
    const int64_t slots = extents_.slots();
    if (slots == 0) {
      return CudaStatus(
          cudaMemsetAsync(row_start_, 0, (extents_.rows() + 1) * sizeof(int32_t), stream), what);
    }
    PrepareSlotsKernel<<<static_cast<int>(BlocksFor(slots, kThreads)), kThreads, 0, stream>>>(
        slot_token, slots, extents_.slots_per_group(), extents_.tokens, bad_slot, keys_, values_,
        static_cast<uint32_t>(extents_.rows()));
    if (absl::Status status = LaunchStatus(what); !status.ok()) return status;
    size_t bytes = temporary_bytes_;
    if (absl::Status status =
            CudaStatus(cub::DeviceRadixSort::SortPairs(
                           temporary_, bytes, keys_, sorted_keys_, values_, sorted_slots_,
                           static_cast<int>(slots), 0, KeyBits(), stream),
                       what);
        !status.ok()) {
      return status;
    }
    RowStartsKernel<<<static_cast<int>(BlocksFor(extents_.rows() + 1, kThreads)), kThreads, 0,
                      stream>>>(sorted_keys_, slots, extents_.rows(), row_start_);
    return LaunchStatus(what);
  }

  const int32_t* row_start() const { return row_start_; }
  const int32_t* sorted_slots() const { return sorted_slots_; }

 private:
  // Bits of the keys, which go up to rows() (an empty slot).
  int KeyBits() const {
    int bits = 1;
    while (bits < 32 && (int64_t{1} << bits) <= extents_.rows()) ++bits;
    return bits;
  }

  const MoeExtents extents_;
  uint32_t* keys_ = nullptr;
  uint32_t* sorted_keys_ = nullptr;
  int32_t* values_ = nullptr;
  int32_t* sorted_slots_ = nullptr;
  int32_t* row_start_ = nullptr;
  void* temporary_ = nullptr;
  size_t temporary_bytes_ = 0;
};

// The float tensors' common type: float32 or bfloat16 (the CPU checks the rest).
absl::StatusOr<plan::DataType> CommonFloatType(const char* op_type, const KernelInit& init) {
  absl::StatusOr<bool> bfloat16 = IsBfloat16(op_type, init);
  if (!bfloat16.ok()) return bfloat16.status();
  return *bfloat16 ? plan::BFLOAT16 : plan::FLOAT32;
}

// The CUDA kernels index slots and tokens with 32 bits.
absl::Status CheckIndexable(const char* op_type, const MoeExtents& extents) {
  constexpr int64_t kLimit = std::numeric_limits<int32_t>::max();
  if (extents.slots() >= kLimit || extents.rows() >= kLimit) {
    return absl::InvalidArgumentError(
        absl::StrCat(op_type, ": the CUDA kernel handles fewer than 2^31 slots and tokens, not ",
                     extents.slots(), " slots and ", extents.rows(), " tokens"));
  }
  return absl::OkStatus();
}

class MoeRouteKernel final : public Kernel {
 public:
  MoeRouteKernel(const KernelInit& init, CudaStreamContext* stream, const MoeExtents& extents,
                 int k, bool bfloat16)
      : task_name_(init.task_name),
        signature_(init),
        stream_(stream),
        extents_(extents),
        k_(k),
        bfloat16_(bfloat16) {}
  ~MoeRouteKernel() override {
    for (void* buffer : {static_cast<void*>(choices_), static_cast<void*>(weights_),
                         static_cast<void*>(expert_dropped_)}) {
      if (buffer != nullptr) cudaFree(buffer);
    }
  }

  absl::Status Allocate() {
    const std::string what = What(task_name_, kRoute);
    const int64_t assignments = std::max<int64_t>(extents_.groups * k_ * extents_.tokens, 1);
    const int64_t experts = std::max<int64_t>(extents_.groups * extents_.experts, 1);
    if (absl::Status status = CudaStatus(cudaMalloc(&choices_, assignments * 4), what);
        !status.ok()) {
      return status;
    }
    if (absl::Status status = CudaStatus(cudaMalloc(&weights_, assignments * 4), what);
        !status.ok()) {
      return status;
    }
    return CudaStatus(cudaMalloc(&expert_dropped_, experts * 4), what);
  }

  absl::Status Compute(const KernelContext& context) override {
    if (absl::Status status = signature_.Check(kRoute, context); !status.ok()) return status;
    return bfloat16_ ? Run<__nv_bfloat16>(context) : Run<float>(context);
  }

 private:
  template <typename T>
  absl::Status Run(const KernelContext& context) {
    const MoeExtents& x = extents_;
    if (x.groups == 0) return absl::OkStatus();
    const cudaStream_t stream = stream_->stream();
    const std::string what = What(task_name_, kRoute);
    if (x.rows() > 0) {
      ChooseExpertsKernel<T>
          <<<static_cast<int>(BlocksFor(x.rows(), kThreads)), kThreads, 0, stream>>>(
              context.inputs[0].Data<const T>(), x.groups, x.tokens, x.experts, k_, choices_,
              weights_);
      if (absl::Status status = LaunchStatus(what); !status.ok()) return status;
    }
    AssignSlotsKernel<T>
        <<<static_cast<int>(BlocksFor(x.groups * x.experts, 1)), kThreads, 0, stream>>>(
            choices_, weights_, x.groups, x.tokens, x.experts, k_, x.capacity,
            context.outputs[0].Data<int32_t>(), context.outputs[1].Data<T>(),
            context.outputs[2].Data<T>(), expert_dropped_);
    if (absl::Status status = LaunchStatus(what); !status.ok()) return status;
    SumDroppedKernel<T><<<static_cast<int>(BlocksFor(x.groups, kThreads)), kThreads, 0, stream>>>(
        expert_dropped_, x.groups, x.experts, context.outputs[3].Data<T>());
    return LaunchStatus(what);
  }

  const std::string task_name_;
  const cpu::TensorSignature signature_;
  CudaStreamContext* const stream_;
  const MoeExtents extents_;
  const int k_;
  const bool bfloat16_;
  // Scratch: each group's assignments (expert and weight) in GShard's order, and each (group,
  // expert)'s dropped assignments.
  int32_t* choices_ = nullptr;
  float* weights_ = nullptr;
  int32_t* expert_dropped_ = nullptr;
};

class MoeRouteGradKernel final : public Kernel {
 public:
  MoeRouteGradKernel(const KernelInit& init, CudaStreamContext* stream, const MoeExtents& extents,
                     int k, bool bfloat16)
      : task_name_(init.task_name),
        signature_(init),
        stream_(stream),
        extents_(extents),
        k_(k),
        bfloat16_(bfloat16),
        index_(extents) {}

  absl::Status Allocate() {
    const std::string what = What(task_name_, kRouteGrad);
    if (absl::Status status = report_.Allocate(stream_->stream(), what); !status.ok()) {
      return status;
    }
    return index_.Allocate(what);
  }

  absl::Status Compute(const KernelContext& context) override {
    if (absl::Status status = report_.Check(task_name_, kRouteGrad, extents_); !status.ok()) {
      return status;
    }
    if (absl::Status status = signature_.Check(kRouteGrad, context); !status.ok()) return status;
    return bfloat16_ ? Run<__nv_bfloat16>(context) : Run<float>(context);
  }

 private:
  template <typename T>
  absl::Status Run(const KernelContext& context) {
    const MoeExtents& x = extents_;
    const cudaStream_t stream = stream_->stream();
    const std::string what = What(task_name_, kRouteGrad);
    if (absl::Status status =
            index_.Build(context.inputs[1].Data<const int32_t>(), report_.device(), stream, what);
        !status.ok()) {
      return status;
    }
    T* dprobs = context.outputs[0].Data<T>();
    const int64_t bytes = x.rows() * x.experts * static_cast<int64_t>(sizeof(T));
    if (bytes > 0) {
      // Zero bits are 0 in both float types.
      if (absl::Status status = CudaStatus(cudaMemsetAsync(dprobs, 0, bytes, stream), what);
          !status.ok()) {
        return status;
      }
    }
    if (x.rows() > 0 && x.slots() > 0) {
      RouteGradKernel<T><<<static_cast<int>(BlocksFor(x.rows(), kThreads)), kThreads, 0, stream>>>(
          context.inputs[0].Data<const T>(), context.inputs[2].Data<const T>(), index_.row_start(),
          index_.sorted_slots(), x.rows(), x.experts, x.capacity, k_, dprobs);
      if (absl::Status status = LaunchStatus(what); !status.ok()) return status;
    }
    return report_.Publish(stream, what);
  }

  const std::string task_name_;
  const cpu::TensorSignature signature_;
  CudaStreamContext* const stream_;
  const MoeExtents extents_;
  const int k_;
  const bool bfloat16_;
  BadSlotReport report_;
  SlotIndex index_;
};

class MoeDispatchKernel final : public Kernel {
 public:
  MoeDispatchKernel(const KernelInit& init, CudaStreamContext* stream, const MoeExtents& extents,
                    bool bfloat16)
      : task_name_(init.task_name),
        signature_(init),
        stream_(stream),
        extents_(extents),
        bfloat16_(bfloat16) {}

  absl::Status Allocate() {
    return report_.Allocate(stream_->stream(), What(task_name_, kDispatch));
  }

  absl::Status Compute(const KernelContext& context) override {
    if (absl::Status status = report_.Check(task_name_, kDispatch, extents_); !status.ok()) {
      return status;
    }
    if (absl::Status status = signature_.Check(kDispatch, context); !status.ok()) return status;
    return bfloat16_ ? Run<__nv_bfloat16>(context) : Run<float>(context);
  }

 private:
  template <typename T>
  absl::Status Run(const KernelContext& context) {
    const MoeExtents& x = extents_;
    const cudaStream_t stream = stream_->stream();
    const std::string what = What(task_name_, kDispatch);
    const int32_t* slot_token = context.inputs[1].Data<const int32_t>();
    if (x.slots() > 0) {
      PrepareSlotsKernel<<<static_cast<int>(BlocksFor(x.slots(), kThreads)), kThreads, 0, stream>>>(
          slot_token, x.slots(), x.slots_per_group(), x.tokens, report_.device(), nullptr, nullptr,
          0);
      if (absl::Status status = LaunchStatus(what); !status.ok()) return status;
    }
    const int64_t count = x.slots() * x.width;
    if (count > 0) {
      DispatchKernel<T><<<static_cast<int>(BlocksFor(count, kThreads)), kThreads, 0, stream>>>(
          context.inputs[0].Data<const T>(), slot_token, x.tokens, x.slots_per_group(), x.width,
          count, context.outputs[0].Data<T>());
      if (absl::Status status = LaunchStatus(what); !status.ok()) return status;
    }
    return report_.Publish(stream, what);
  }

  const std::string task_name_;
  const cpu::TensorSignature signature_;
  CudaStreamContext* const stream_;
  const MoeExtents extents_;
  const bool bfloat16_;
  BadSlotReport report_;
};

// moe_combine (with weights) and moe_dispatch_grad (without).
class MoeGatherKernel final : public Kernel {
 public:
  MoeGatherKernel(const KernelInit& init, const char* op_type, CudaStreamContext* stream,
                  const MoeExtents& extents, bool weighted, bool bfloat16)
      : task_name_(init.task_name),
        op_type_(op_type),
        signature_(init),
        stream_(stream),
        extents_(extents),
        weighted_(weighted),
        bfloat16_(bfloat16),
        index_(extents) {}

  absl::Status Allocate() {
    const std::string what = What(task_name_, op_type_);
    if (absl::Status status = report_.Allocate(stream_->stream(), what); !status.ok()) {
      return status;
    }
    return index_.Allocate(what);
  }

  absl::Status Compute(const KernelContext& context) override {
    if (absl::Status status = report_.Check(task_name_, op_type_, extents_); !status.ok()) {
      return status;
    }
    if (absl::Status status = signature_.Check(op_type_, context); !status.ok()) return status;
    return bfloat16_ ? Run<__nv_bfloat16>(context) : Run<float>(context);
  }

 private:
  template <typename T>
  absl::Status Run(const KernelContext& context) {
    const MoeExtents& x = extents_;
    const cudaStream_t stream = stream_->stream();
    const std::string what = What(task_name_, op_type_);
    if (absl::Status status =
            index_.Build(context.inputs[1].Data<const int32_t>(), report_.device(), stream, what);
        !status.ok()) {
      return status;
    }
    const int64_t count = x.rows() * x.width;
    if (count > 0) {
      GatherSlotsKernel<T><<<static_cast<int>(BlocksFor(count, kThreads)), kThreads, 0, stream>>>(
          context.inputs[0].Data<const T>(),
          weighted_ ? context.inputs[2].Data<const T>() : nullptr, index_.row_start(),
          index_.sorted_slots(), x.width, count, context.outputs[0].Data<T>());
      if (absl::Status status = LaunchStatus(what); !status.ok()) return status;
    }
    return report_.Publish(stream, what);
  }

  const std::string task_name_;
  const char* const op_type_;
  const cpu::TensorSignature signature_;
  CudaStreamContext* const stream_;
  const MoeExtents extents_;
  const bool weighted_;
  const bool bfloat16_;
  BadSlotReport report_;
  SlotIndex index_;
};

// The CPU factory's verdict on the configuration seen in float32, and the float type.
absl::StatusOr<plan::DataType> CheckLikeCpu(
    const char* op_type, const KernelInit& init,
    absl::StatusOr<std::unique_ptr<Kernel>> (*cpu_factory)(const KernelInit&)) {
  absl::StatusOr<plan::DataType> type = CommonFloatType(op_type, init);
  if (!type.ok()) return type.status();
  if (absl::StatusOr<std::unique_ptr<Kernel>> checked = cpu_factory(Float32View(init));
      !checked.ok()) {
    return checked.status();
  }
  return type;
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateMoeRouteKernel(const KernelInit& init) {
  absl::StatusOr<plan::DataType> type = CheckLikeCpu(kRoute, init, cpu::CreateMoeRouteKernel);
  if (!type.ok()) return type.status();
  absl::StatusOr<int64_t> k = Attributes(*init.conf).GetInt("k");
  if (!k.ok()) return cpu::WithOpType(kRoute, k.status());
  const Shape probs = Shape::FromProto(init.inputs[0]);
  MoeExtents extents;
  extents.groups = probs.dimension(0);
  extents.tokens = probs.dimension(1);
  extents.experts = probs.dimension(2);
  extents.capacity = init.outputs[0].shape(2);
  if (absl::Status status = CheckIndexable(kRoute, extents); !status.ok()) return status;
  absl::StatusOr<CudaStreamContext*> stream = StreamOf(init);
  if (!stream.ok()) return stream.status();
  return Allocated(std::make_unique<MoeRouteKernel>(init, *stream, extents, static_cast<int>(*k),
                                                    *type == plan::BFLOAT16));
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateMoeRouteGradKernel(const KernelInit& init) {
  absl::StatusOr<plan::DataType> type =
      CheckLikeCpu(kRouteGrad, init, cpu::CreateMoeRouteGradKernel);
  if (!type.ok()) return type.status();
  absl::StatusOr<int64_t> k = Attributes(*init.conf).GetInt("k");
  if (!k.ok()) return cpu::WithOpType(kRouteGrad, k.status());
  const Shape probs = Shape::FromProto(init.inputs[0]);
  MoeExtents extents;
  extents.groups = probs.dimension(0);
  extents.tokens = probs.dimension(1);
  extents.experts = probs.dimension(2);
  extents.capacity = init.inputs[1].shape(2);
  if (absl::Status status = CheckIndexable(kRouteGrad, extents); !status.ok()) return status;
  absl::StatusOr<CudaStreamContext*> stream = StreamOf(init);
  if (!stream.ok()) return stream.status();
  return Allocated(std::make_unique<MoeRouteGradKernel>(
      init, *stream, extents, static_cast<int>(*k), *type == plan::BFLOAT16));
}

// tokens [B, T, W], slots [B, E, C, W] (shapes the CPU factory checked).
MoeExtents SlotExtents(const plan::TensorDesc& tokens, const plan::TensorDesc& slots) {
  MoeExtents extents;
  extents.groups = tokens.shape(0);
  extents.tokens = tokens.shape(1);
  extents.width = tokens.shape(2);
  extents.experts = slots.shape(1);
  extents.capacity = slots.shape(2);
  return extents;
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateMoeDispatchKernel(const KernelInit& init) {
  absl::StatusOr<plan::DataType> type = CheckLikeCpu(kDispatch, init, cpu::CreateMoeDispatchKernel);
  if (!type.ok()) return type.status();
  const MoeExtents extents = SlotExtents(init.inputs[0], init.outputs[0]);
  if (absl::Status status = CheckIndexable(kDispatch, extents); !status.ok()) return status;
  absl::StatusOr<CudaStreamContext*> stream = StreamOf(init);
  if (!stream.ok()) return stream.status();
  return Allocated(
      std::make_unique<MoeDispatchKernel>(init, *stream, extents, *type == plan::BFLOAT16));
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateGatherKernel(
    const KernelInit& init, const char* op_type, bool weighted,
    absl::StatusOr<std::unique_ptr<Kernel>> (*cpu_factory)(const KernelInit&)) {
  absl::StatusOr<plan::DataType> type = CheckLikeCpu(op_type, init, cpu_factory);
  if (!type.ok()) return type.status();
  const MoeExtents extents = SlotExtents(init.outputs[0], init.inputs[0]);
  if (absl::Status status = CheckIndexable(op_type, extents); !status.ok()) return status;
  absl::StatusOr<CudaStreamContext*> stream = StreamOf(init);
  if (!stream.ok()) return stream.status();
  return Allocated(std::make_unique<MoeGatherKernel>(init, op_type, *stream, extents, weighted,
                                                     *type == plan::BFLOAT16));
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateMoeCombineKernel(const KernelInit& init) {
  return CreateGatherKernel(init, kCombine, /*weighted=*/true, cpu::CreateMoeCombineKernel);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateMoeDispatchGradKernel(const KernelInit& init) {
  return CreateGatherKernel(init, kDispatchGrad, /*weighted=*/false,
                            cpu::CreateMoeDispatchGradKernel);
}

}  // namespace

absl::Status RegisterCudaMoeKernels(KernelRegistry* registry) {
  struct Entry {
    const char* op_type;
    absl::StatusOr<std::unique_ptr<Kernel>> (*factory)(const KernelInit&);
  };
  static constexpr Entry kEntries[] = {
      {kRoute, CreateMoeRouteKernel},
      {kRouteGrad, CreateMoeRouteGradKernel},
      {kDispatch, CreateMoeDispatchKernel},
      {kCombine, CreateMoeCombineKernel},
      {kDispatchGrad, CreateMoeDispatchGradKernel},
  };
  for (const Entry& entry : kEntries) {
    if (absl::Status status = registry->Register(entry.op_type, plan::CUDA, entry.factory);
        !status.ok()) {
      return status;
    }
  }
  return absl::OkStatus();
}

}  // namespace loom::cuda
