#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/tensor.h"
#include "device/cuda/cuda_status.h"
#include "kernels/cpu/kernel_checks.h"
#include "kernels/cpu/moe_slot_kernels.h"
#include "kernels/cuda/cuda_kernel_util.h"
#include "kernels/cuda/device_values.cuh"
#include "kernels/cuda/moe_kernels.h"
#include "kernels/cuda/moe_slot_index.h"
#include "kernels/kernel_table.h"

namespace loom::cuda {
namespace {

constexpr char kDispatch[] = "moe_dispatch";
constexpr char kCombine[] = "moe_combine";
constexpr char kDispatchGrad[] = "moe_dispatch_grad";

// ---------------------------------------------------------------------------------------------
// Slots to tokens and back.

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

// ---------------------------------------------------------------------------------------------
// Host side.

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
      if (absl::Status status = report_.Validate(slot_token, x, stream, what); !status.ok()) {
        return status;
      }
    }
    const int64_t count = x.slots() * x.width;
    if (count > 0) {
      DispatchKernel<T>
          <<<static_cast<int>(BlocksFor(count, kMoeThreads)), kMoeThreads, 0, stream>>>(
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
      GatherSlotsKernel<T>
          <<<static_cast<int>(BlocksFor(count, kMoeThreads)), kMoeThreads, 0, stream>>>(
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
  absl::StatusOr<bool> bfloat16 = CheckLikeCpu(kDispatch, init, cpu::CreateMoeDispatchKernel);
  if (!bfloat16.ok()) return bfloat16.status();
  const MoeExtents extents = SlotExtents(init.inputs[0], init.outputs[0]);
  if (absl::Status status = CheckIndexable(kDispatch, extents); !status.ok()) return status;
  absl::StatusOr<CudaStreamContext*> stream = StreamOf(init);
  if (!stream.ok()) return stream.status();
  return Allocated(std::make_unique<MoeDispatchKernel>(init, *stream, extents, *bfloat16));
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateGatherKernel(
    const KernelInit& init, const char* op_type, bool weighted,
    absl::StatusOr<std::unique_ptr<Kernel>> (*cpu_factory)(const KernelInit&)) {
  absl::StatusOr<bool> bfloat16 = CheckLikeCpu(op_type, init, cpu_factory);
  if (!bfloat16.ok()) return bfloat16.status();
  const MoeExtents extents = SlotExtents(init.outputs[0], init.inputs[0]);
  if (absl::Status status = CheckIndexable(op_type, extents); !status.ok()) return status;
  absl::StatusOr<CudaStreamContext*> stream = StreamOf(init);
  if (!stream.ok()) return stream.status();
  return Allocated(
      std::make_unique<MoeGatherKernel>(init, op_type, *stream, extents, weighted, *bfloat16));
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateMoeCombineKernel(const KernelInit& init) {
  return CreateGatherKernel(init, kCombine, /*weighted=*/true, cpu::CreateMoeCombineKernel);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateMoeDispatchGradKernel(const KernelInit& init) {
  return CreateGatherKernel(init, kDispatchGrad, /*weighted=*/false,
                            cpu::CreateMoeDispatchGradKernel);
}

}  // namespace

absl::Status RegisterCudaMoeSlotKernels(KernelRegistry* registry) {
  static constexpr KernelTableEntry kEntries[] = {
      {kDispatch, CreateMoeDispatchKernel},
      {kCombine, CreateMoeCombineKernel},
      {kDispatchGrad, CreateMoeDispatchGradKernel},
  };
  return RegisterKernelTable(registry, plan::CUDA, kEntries);
}

}  // namespace loom::cuda
