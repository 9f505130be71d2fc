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
#include "kernels/attributes.h"
#include "kernels/cpu/cross_entropy_kernel.h"
#include "kernels/cpu/cross_entropy_rows.h"
#include "kernels/cpu/kernel_checks.h"
#include "kernels/cuda/bad_value_report.cuh"
#include "kernels/cuda/cuda_kernel_util.h"
#include "kernels/cuda/device_values.cuh"
#include "kernels/cuda/row_kernels.h"
#include "kernels/cuda/row_launch.cuh"
#include "kernels/cuda/row_reductions.cuh"
#include "kernels/kernel_table.h"

namespace loom::cuda {
namespace {

constexpr char kCrossEntropy[] = "sparse_cross_entropy";

// ---------------------------------------------------------------------------------------------
// Device side.

// sparse_cross_entropy, one row of logits per sample: loss = (max - logits[label]) + log(sum of
// exp(logits - max)); 0 for ignored samples. A label out of range records its sample in `act_bad`
// (the smallest such sample wins, as the CPU reports the first) and gets a NaN loss: the next act
// reports it.
template <typename T, typename Label, bool kWarp>
__global__ void __launch_bounds__(kMaxRowThreads)
    CrossEntropyKernel(const T* __restrict__ logits, const Label* __restrict__ labels,
                       int64_t samples, int64_t classes, int64_t ignore_index, T* __restrict__ loss,
                       unsigned long long* act_bad) {
  __shared__ float shared[32];
  const RowGroup<kWarp> group;
  for (int64_t sample = group.first; sample < samples; sample += group.stride) {
    const int64_t label = static_cast<int64_t>(labels[sample]);
    if (label == ignore_index) {
      if (group.lane == 0) loss[sample] = FromFloat<T>(0.0f);
      continue;
    }
    if (label < 0 || label >= classes) {
      if (group.lane == 0) {
        atomicMin(act_bad, static_cast<unsigned long long>(sample));
        loss[sample] = FromFloat<T>(NAN);
      }
      continue;
    }
    const T* row = logits + sample * classes;
    float partial = -INFINITY;
    for (int64_t i = group.lane; i < classes; i += group.size) {
      partial = fmaxf(partial, ToFloat(row[i]));
    }
    const float maximum = group.Max(partial, shared);
    partial = 0.0f;
    for (int64_t i = group.lane; i < classes; i += group.size) {
      partial += expf(ToFloat(row[i]) - maximum);
    }
    const float sum = group.Sum(partial, shared);
    if (group.lane == 0) {
      const double value =
          (static_cast<double>(maximum) - static_cast<double>(ToFloat(row[label]))) +
          log(static_cast<double>(sum));
      loss[sample] = FromFloat<T>(static_cast<float>(value));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Host side.

// sparse_cross_entropy.
template <typename Label>
class CrossEntropyKernelImpl final : public Kernel {
 public:
  CrossEntropyKernelImpl(const KernelInit& init, int64_t classes, int64_t ignore_index,
                         bool bfloat16, CudaStreamContext* stream)
      : task_name_(init.task_name),
        signature_(init),
        labels_shape_(Shape::FromProto(init.inputs[1])),
        samples_(labels_shape_.NumElements()),
        classes_(classes),
        ignore_index_(ignore_index),
        bfloat16_(bfloat16),
        stream_(stream) {}

  absl::Status Allocate() {
    return report_.Allocate(stream_->stream(), What(task_name_, kCrossEntropy));
  }

  absl::Status Compute(const KernelContext& context) override {
    if (absl::Status status = report_.Check(task_name_, stream_->stream(),
                                            [this](int64_t sample, int64_t label) {
                                              return cpu::CheckSparseLabel(kCrossEntropy, label,
                                                                           classes_, ignore_index_,
                                                                           labels_shape_, sample);
                                            });
        !status.ok()) {
      return status;
    }
    if (absl::Status status = signature_.Check(kCrossEntropy, context); !status.ok()) {
      return status;
    }
    if (samples_ == 0) return absl::OkStatus();
    return bfloat16_ ? Run<__nv_bfloat16>(context) : Run<float>(context);
  }

 private:
  template <typename T>
  absl::Status Run(const KernelContext& context) {
    const std::string what = What(task_name_, kCrossEntropy);
    const cudaStream_t stream = stream_->stream();
    const RowLaunch launch = RowLaunchFor(samples_, classes_);
    const T* logits = context.inputs[0].Data<const T>();
    const Label* labels = context.inputs[1].Data<const Label>();
    T* loss = context.outputs[0].Data<T>();
    if (launch.warp) {
      CrossEntropyKernel<T, Label, true><<<launch.blocks, launch.threads, 0, stream>>>(
          logits, labels, samples_, classes_, ignore_index_, loss, report_.act());
    } else {
      CrossEntropyKernel<T, Label, false><<<launch.blocks, launch.threads, 0, stream>>>(
          logits, labels, samples_, classes_, ignore_index_, loss, report_.act());
    }
    if (absl::Status status = LaunchStatus(what); !status.ok()) return status;
    return report_.Publish(labels, stream, what);
  }

  const std::string task_name_;
  const cpu::TensorSignature signature_;
  const Shape labels_shape_;
  const int64_t samples_;
  const int64_t classes_;
  const int64_t ignore_index_;
  const bool bfloat16_;
  CudaStreamContext* const stream_;
  BadValueReport report_;
};

// ---------------------------------------------------------------------------------------------
// Factories.

absl::StatusOr<std::unique_ptr<Kernel>> CreateSparseCrossEntropyKernel(const KernelInit& init) {
  absl::StatusOr<bool> bfloat16 =
      CheckLikeCpu(kCrossEntropy, init, cpu::CreateSparseCrossEntropyKernel);
  if (!bfloat16.ok()) return bfloat16.status();
  absl::StatusOr<int64_t> ignore_index = Attributes(*init.conf).GetInt("ignore_index", -100);
  if (!ignore_index.ok()) return cpu::WithOpType(kCrossEntropy, ignore_index.status());
  absl::StatusOr<CudaStreamContext*> stream = StreamOf(init);
  if (!stream.ok()) return stream.status();
  const Shape logits = Shape::FromProto(init.inputs[0]);
  const int64_t classes = logits.dimension(logits.rank() - 1);
  if (init.inputs[1].data_type() == plan::INT32) {
    return Allocated(std::make_unique<CrossEntropyKernelImpl<int32_t>>(init, classes, *ignore_index,
                                                                       *bfloat16, *stream));
  }
  return Allocated(std::make_unique<CrossEntropyKernelImpl<int64_t>>(init, classes, *ignore_index,
                                                                     *bfloat16, *stream));
}

}  // namespace

absl::Status RegisterCudaCrossEntropyKernels(KernelRegistry* registry) {
  static constexpr KernelTableEntry kEntries[] = {
      {kCrossEntropy, CreateSparseCrossEntropyKernel},
  };
  return RegisterKernelTable(registry, plan::CUDA, kEntries);
}

}  // namespace loom::cuda
