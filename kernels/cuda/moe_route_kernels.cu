#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/tensor.h"
#include "device/cuda/cuda_status.h"
#include "kernels/attributes.h"
#include "kernels/cpu/kernel_checks.h"
#include "kernels/cpu/moe_route_kernel.h"
#include "kernels/cuda/cuda_kernel_util.h"
#include "kernels/cuda/device_values.cuh"
#include "kernels/cuda/moe_kernels.h"
#include "kernels/cuda/moe_slot_index.h"
#include "kernels/kernel_table.h"

namespace loom::cuda {
namespace {

constexpr char kRoute[] = "moe_route";
constexpr char kRouteGrad[] = "moe_route_grad";

constexpr int kWarps = kMoeThreads / 32;

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
// over chunks of kMoeThreads assignments); one at or past the capacity is dropped.
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
    for (int64_t start = 0; start < assignments; start += kMoeThreads) {
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
         c += kMoeThreads) {
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
// The routing's gradient, through the slots of each token (SlotIndex).

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
          <<<static_cast<int>(BlocksFor(x.rows(), kMoeThreads)), kMoeThreads, 0, stream>>>(
              context.inputs[0].Data<const T>(), x.groups, x.tokens, x.experts, k_, choices_,
              weights_);
      if (absl::Status status = LaunchStatus(what); !status.ok()) return status;
    }
    AssignSlotsKernel<T>
        <<<static_cast<int>(BlocksFor(x.groups * x.experts, 1)), kMoeThreads, 0, stream>>>(
            choices_, weights_, x.groups, x.tokens, x.experts, k_, x.capacity,
            context.outputs[0].Data<int32_t>(), context.outputs[1].Data<T>(),
            context.outputs[2].Data<T>(), expert_dropped_);
    if (absl::Status status = LaunchStatus(what); !status.ok()) return status;
    SumDroppedKernel<T>
        <<<static_cast<int>(BlocksFor(x.groups, kMoeThreads)), kMoeThreads, 0, stream>>>(
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
      RouteGradKernel<T>
          <<<static_cast<int>(BlocksFor(x.rows(), kMoeThreads)), kMoeThreads, 0, stream>>>(
              context.inputs[0].Data<const T>(), context.inputs[2].Data<const T>(),
              index_.row_start(), index_.sorted_slots(), x.rows(), x.experts, x.capacity, k_,
              dprobs);
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

absl::StatusOr<std::unique_ptr<Kernel>> CreateMoeRouteKernel(const KernelInit& init) {
  absl::StatusOr<bool> bfloat16 = CheckLikeCpu(kRoute, init, cpu::CreateMoeRouteKernel);
  if (!bfloat16.ok()) return bfloat16.status();
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
  return Allocated(
      std::make_unique<MoeRouteKernel>(init, *stream, extents, static_cast<int>(*k), *bfloat16));
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateMoeRouteGradKernel(const KernelInit& init) {
  absl::StatusOr<bool> bfloat16 = CheckLikeCpu(kRouteGrad, init, cpu::CreateMoeRouteGradKernel);
  if (!bfloat16.ok()) return bfloat16.status();
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
  return Allocated(std::make_unique<MoeRouteGradKernel>(init, *stream, extents,
                                                        static_cast<int>(*k), *bfloat16));
}

}  // namespace

absl::Status RegisterCudaMoeRouteKernels(KernelRegistry* registry) {
  static constexpr KernelTableEntry kEntries[] = {
      {kRoute, CreateMoeRouteKernel},
      {kRouteGrad, CreateMoeRouteGradKernel},
  };
  return RegisterKernelTable(registry, plan::CUDA, kEntries);
}

}  // namespace loom::cuda
