#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/tensor.h"
#include "device/cuda/cuda_status.h"
#include "kernels/cpu/embedding_kernel.h"
#include "kernels/cpu/embedding_row_range.h"
#include "kernels/cpu/kernel_checks.h"
#include "kernels/cuda/bad_value_report.cuh"
#include "kernels/cuda/cuda_kernel_util.h"
#include "kernels/cuda/device_values.cuh"
#include "kernels/cuda/row_kernels.h"
#include "kernels/cuda/row_launch.cuh"
#include "kernels/kernel_table.h"

namespace loom::cuda {
namespace {

constexpr char kEmbedding[] = "embedding";

// ---------------------------------------------------------------------------------------------
// Device side.

// embedding, one warp per position: the table's row for the id, zeros when another shard holds
// it. An id outside [0, logical_rows) records its position in `act_bad` (smallest wins) and gets
// a row of NaN: the next act reports it.
template <typename T, typename Id>
__global__ void EmbeddingKernel(const T* __restrict__ table, const Id* __restrict__ ids,
                                int64_t count, int64_t width, int64_t rows, int64_t row_offset,
                                int64_t logical_rows, T* __restrict__ output,
                                unsigned long long* act_bad) {
  const RowGroup<true> group;
  for (int64_t position = group.first; position < count; position += group.stride) {
    const int64_t id = static_cast<int64_t>(ids[position]);
    T* out = output + position * width;
    if (id < 0 || id >= logical_rows) {
      if (group.lane == 0) atomicMin(act_bad, static_cast<unsigned long long>(position));
      for (int64_t i = group.lane; i < width; i += 32) out[i] = FromFloat<T>(NAN);
      continue;
    }
    const int64_t local = id - row_offset;
    if (local >= 0 && local < rows) {
      const T* source = table + local * width;
      for (int64_t i = group.lane; i < width; i += 32) out[i] = source[i];
    } else {
      for (int64_t i = group.lane; i < width; i += 32) out[i] = FromFloat<T>(0.0f);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Host side.

// embedding.
template <typename Id>
class EmbeddingKernelImpl final : public Kernel {
 public:
  EmbeddingKernelImpl(const KernelInit& init, int64_t width,
                      const cpu::EmbeddingRowRange& row_range, bool bfloat16,
                      CudaStreamContext* stream)
      : task_name_(init.task_name),
        signature_(init),
        ids_shape_(Shape::FromProto(init.inputs[1])),
        count_(ids_shape_.NumElements()),
        width_(width),
        row_range_(row_range),
        bfloat16_(bfloat16),
        stream_(stream) {}

  absl::Status Allocate() {
    return report_.Allocate(stream_->stream(), What(task_name_, kEmbedding));
  }

  absl::Status Compute(const KernelContext& context) override {
    if (absl::Status status = report_.Check(task_name_, stream_->stream(),
                                            [this](int64_t position, int64_t id) {
                                              return row_range_.CheckId(kEmbedding, id, ids_shape_,
                                                                        position);
                                            });
        !status.ok()) {
      return status;
    }
    if (absl::Status status = signature_.Check(kEmbedding, context); !status.ok()) return status;
    if (count_ == 0) return absl::OkStatus();
    return bfloat16_ ? Run<__nv_bfloat16>(context) : Run<float>(context);
  }

 private:
  template <typename T>
  absl::Status Run(const KernelContext& context) {
    const std::string what = What(task_name_, kEmbedding);
    const cudaStream_t stream = stream_->stream();
    const Id* ids = context.inputs[1].Data<const Id>();
    // A warp per position.
    const int blocks = static_cast<int>(BlocksFor(count_ * 32, kRowKernelThreads));
    EmbeddingKernel<T, Id><<<blocks, kRowKernelThreads, 0, stream>>>(
        context.inputs[0].Data<const T>(), ids, count_, width_, row_range_.rows,
        row_range_.row_offset, row_range_.logical_rows, context.outputs[0].Data<T>(),
        report_.act());
    if (absl::Status status = LaunchStatus(what); !status.ok()) return status;
    return report_.Publish(ids, stream, what);
  }

  const std::string task_name_;
  const cpu::TensorSignature signature_;
  const Shape ids_shape_;
  const int64_t count_;
  const int64_t width_;
  const cpu::EmbeddingRowRange row_range_;
  const bool bfloat16_;
  CudaStreamContext* const stream_;
  BadValueReport report_;
};

// ---------------------------------------------------------------------------------------------
// Factories.

absl::StatusOr<std::unique_ptr<Kernel>> CreateEmbeddingKernel(const KernelInit& init) {
  absl::StatusOr<bool> bfloat16 = CheckLikeCpu(kEmbedding, init, cpu::CreateEmbeddingKernel);
  if (!bfloat16.ok()) return bfloat16.status();
  const Shape table = Shape::FromProto(init.inputs[0]);
  absl::StatusOr<cpu::EmbeddingRowRange> row_range =
      cpu::ReadEmbeddingRowRange(kEmbedding, init, table.dimension(0));
  if (!row_range.ok()) return row_range.status();
  absl::StatusOr<CudaStreamContext*> stream = StreamOf(init);
  if (!stream.ok()) return stream.status();
  const int64_t width = table.dimension(1);
  if (init.inputs[1].data_type() == plan::INT32) {
    return Allocated(std::make_unique<EmbeddingKernelImpl<int32_t>>(init, width, *row_range,
                                                                    *bfloat16, *stream));
  }
  return Allocated(
      std::make_unique<EmbeddingKernelImpl<int64_t>>(init, width, *row_range, *bfloat16, *stream));
}

}  // namespace

absl::Status RegisterCudaEmbeddingKernels(KernelRegistry* registry) {
  static constexpr KernelTableEntry kEntries[] = {
      {kEmbedding, CreateEmbeddingKernel},
  };
  return RegisterKernelTable(registry, plan::CUDA, kEntries);
}

}  // namespace loom::cuda
