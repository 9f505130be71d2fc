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
#include "kernels/cpu/kernel_checks.h"
#include "kernels/cpu/layer_norm_kernel.h"
#include "kernels/cpu/softmax_kernel.h"
#include "kernels/cuda/cuda_kernel_util.h"
#include "kernels/cuda/device_values.cuh"
#include "kernels/cuda/row_kernels.h"
#include "kernels/cuda/row_launch.cuh"
#include "kernels/cuda/row_reductions.cuh"
#include "kernels/kernel_table.h"

namespace loom::cuda {
namespace {

constexpr char kSoftmax[] = "softmax";
constexpr char kLogSoftmax[] = "log_softmax";
constexpr char kLayerNorm[] = "layer_norm";

// ---------------------------------------------------------------------------------------------
// Device side.

// softmax (y = exp(x - max) / sum) or log_softmax (y = (x - max) - log(sum)) of rows of n > 0.
template <typename T, bool kLog, bool kWarp>
__global__ void __launch_bounds__(kMaxRowThreads)
    SoftmaxKernel(const T* __restrict__ x, int64_t rows, int64_t n, T* __restrict__ y) {
  __shared__ float shared[32];
  const RowGroup<kWarp> group;
  for (int64_t row = group.first; row < rows; row += group.stride) {
    const T* x_row = x + row * n;
    T* y_row = y + row * n;
    float partial = -INFINITY;
    for (int64_t i = group.lane; i < n; i += group.size)
      partial = fmaxf(partial, ToFloat(x_row[i]));
    const float maximum = group.Max(partial, shared);
    partial = 0.0f;
    for (int64_t i = group.lane; i < n; i += group.size) {
      partial += expf(ToFloat(x_row[i]) - maximum);
    }
    const float sum = group.Sum(partial, shared);
    if constexpr (kLog) {
      // As the CPU: the shift first, so that large inputs keep their precision.
      const float log_sum = static_cast<float>(log(static_cast<double>(sum)));
      for (int64_t i = group.lane; i < n; i += group.size) {
        y_row[i] = FromFloat<T>((ToFloat(x_row[i]) - maximum) - log_sum);
      }
    } else {
      const float inverse_sum = static_cast<float>(1.0 / static_cast<double>(sum));
      for (int64_t i = group.lane; i < n; i += group.size) {
        y_row[i] = FromFloat<T>(expf(ToFloat(x_row[i]) - maximum) * inverse_sum);
      }
    }
  }
}

// layer_norm of rows of n: the mean, then the biased variance from the squared deviations (two
// passes, as the CPU), y = (x - mean) * rstd * gamma + beta. `means` and `rstds` (when not null)
// get the rows' statistics; rows of n = 0 have mean 0 and rstd 1 / sqrt(epsilon), as on the CPU.
template <typename T, bool kWarp>
__global__ void __launch_bounds__(kMaxRowThreads)
    LayerNormKernel(const T* __restrict__ x, const T* __restrict__ gamma,
                    const T* __restrict__ beta, int64_t rows, int64_t n, double epsilon,
                    T* __restrict__ y, T* __restrict__ means, T* __restrict__ rstds) {
  __shared__ float shared[32];
  const RowGroup<kWarp> group;
  for (int64_t row = group.first; row < rows; row += group.stride) {
    const T* x_row = x + row * n;
    T* y_row = y + row * n;
    float mean = 0.0f;
    float rstd = static_cast<float>(1.0 / sqrt(epsilon));
    if (n > 0) {
      float partial = 0.0f;
      for (int64_t i = group.lane; i < n; i += group.size) partial += ToFloat(x_row[i]);
      const float sum = group.Sum(partial, shared);
      mean = static_cast<float>(static_cast<double>(sum) / static_cast<double>(n));
      partial = 0.0f;
      for (int64_t i = group.lane; i < n; i += group.size) {
        const float centred = ToFloat(x_row[i]) - mean;
        partial += centred * centred;
      }
      const float squares = group.Sum(partial, shared);
      rstd = static_cast<float>(
          1.0 / sqrt(static_cast<double>(squares) / static_cast<double>(n) + epsilon));
      for (int64_t i = group.lane; i < n; i += group.size) {
        y_row[i] =
            FromFloat<T>((ToFloat(x_row[i]) - mean) * rstd * ToFloat(gamma[i]) + ToFloat(beta[i]));
      }
    }
    if (means != nullptr && group.lane == 0) {
      means[row] = FromFloat<T>(mean);
      rstds[row] = FromFloat<T>(rstd);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Host side.

// softmax and log_softmax.
class SoftmaxKernelImpl final : public Kernel {
 public:
  SoftmaxKernelImpl(const KernelInit& init, const char* op_type, bool log, int64_t n, bool bfloat16,
                    CudaStreamContext* stream)
      : task_name_(init.task_name),
        signature_(init),
        op_type_(op_type),
        log_(log),
        n_(n),
        rows_(n == 0 ? 0 : Shape::FromProto(init.inputs[0]).NumElements() / n),
        bfloat16_(bfloat16),
        stream_(stream) {}

  absl::Status Compute(const KernelContext& context) override {
    if (absl::Status status = signature_.Check(op_type_, context); !status.ok()) return status;
    if (rows_ == 0) return absl::OkStatus();
    if (bfloat16_) {
      return log_ ? Run<__nv_bfloat16, true>(context) : Run<__nv_bfloat16, false>(context);
    }
    return log_ ? Run<float, true>(context) : Run<float, false>(context);
  }

 private:
  template <typename T, bool kLog>
  absl::Status Run(const KernelContext& context) {
    const RowLaunch launch = RowLaunchFor(rows_, n_);
    const T* x = context.inputs[0].Data<const T>();
    T* y = context.outputs[0].Data<T>();
    if (launch.warp) {
      SoftmaxKernel<T, kLog, true>
          <<<launch.blocks, launch.threads, 0, stream_->stream()>>>(x, rows_, n_, y);
    } else {
      SoftmaxKernel<T, kLog, false>
          <<<launch.blocks, launch.threads, 0, stream_->stream()>>>(x, rows_, n_, y);
    }
    return LaunchStatus(What(task_name_, op_type_));
  }

  const std::string task_name_;
  const cpu::TensorSignature signature_;
  const char* const op_type_;
  const bool log_;
  const int64_t n_;
  const int64_t rows_;
  const bool bfloat16_;
  CudaStreamContext* const stream_;
};

// layer_norm.
class LayerNormKernelImpl final : public Kernel {
 public:
  LayerNormKernelImpl(const KernelInit& init, int64_t rows, int64_t n, double epsilon,
                      bool bfloat16, CudaStreamContext* stream)
      : task_name_(init.task_name),
        signature_(init),
        rows_(rows),
        n_(n),
        epsilon_(epsilon),
        statistics_(init.outputs.size() == 3),
        bfloat16_(bfloat16),
        stream_(stream) {}

  absl::Status Compute(const KernelContext& context) override {
    if (absl::Status status = signature_.Check(kLayerNorm, context); !status.ok()) return status;
    // Rows of nothing still have statistics when they are written.
    if (rows_ == 0 || (n_ == 0 && !statistics_)) return absl::OkStatus();
    return bfloat16_ ? Run<__nv_bfloat16>(context) : Run<float>(context);
  }

 private:
  template <typename T>
  absl::Status Run(const KernelContext& context) {
    const RowLaunch launch = RowLaunchFor(rows_, n_);
    const T* x = context.inputs[0].Data<const T>();
    const T* gamma = context.inputs[1].Data<const T>();
    const T* beta = context.inputs[2].Data<const T>();
    T* y = context.outputs[0].Data<T>();
    T* means = statistics_ ? context.outputs[1].Data<T>() : nullptr;
    T* rstds = statistics_ ? context.outputs[2].Data<T>() : nullptr;
    if (launch.warp) {
      LayerNormKernel<T, true><<<launch.blocks, launch.threads, 0, stream_->stream()>>>(
          x, gamma, beta, rows_, n_, epsilon_, y, means, rstds);
    } else {
      LayerNormKernel<T, false><<<launch.blocks, launch.threads, 0, stream_->stream()>>>(
          x, gamma, beta, rows_, n_, epsilon_, y, means, rstds);
    }
    return LaunchStatus(What(task_name_, kLayerNorm));
  }

  const std::string task_name_;
  const cpu::TensorSignature signature_;
  const int64_t rows_;
  const int64_t n_;
  const double epsilon_;
  // Whether outputs 1 and 2 (mean and rstd) are written.
  const bool statistics_;
  const bool bfloat16_;
  CudaStreamContext* const stream_;
};

// ---------------------------------------------------------------------------------------------
// Factories.

absl::StatusOr<std::unique_ptr<Kernel>> CreateSoftmaxLike(
    const KernelInit& init, const char* op_type, bool log,
    absl::StatusOr<std::unique_ptr<Kernel>> (*cpu_factory)(const KernelInit&)) {
  absl::StatusOr<bool> bfloat16 = CheckLikeCpu(op_type, init, cpu_factory);
  if (!bfloat16.ok()) return bfloat16.status();
  absl::StatusOr<CudaStreamContext*> stream = StreamOf(init);
  if (!stream.ok()) return stream.status();
  const Shape x = Shape::FromProto(init.inputs[0]);
  return std::make_unique<SoftmaxKernelImpl>(init, op_type, log, x.dimension(x.rank() - 1),
                                             *bfloat16, *stream);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateSoftmaxKernel(const KernelInit& init) {
  return CreateSoftmaxLike(init, kSoftmax, /*log=*/false, cpu::CreateSoftmaxKernel);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateLogSoftmaxKernel(const KernelInit& init) {
  return CreateSoftmaxLike(init, kLogSoftmax, /*log=*/true, cpu::CreateLogSoftmaxKernel);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateLayerNormKernel(const KernelInit& init) {
  absl::StatusOr<bool> bfloat16 = CheckLikeCpu(kLayerNorm, init, cpu::CreateLayerNormKernel);
  if (!bfloat16.ok()) return bfloat16.status();
  absl::StatusOr<double> epsilon = Attributes(*init.conf).GetFloat("epsilon", 1e-5);
  if (!epsilon.ok()) return cpu::WithOpType(kLayerNorm, epsilon.status());
  absl::StatusOr<CudaStreamContext*> stream = StreamOf(init);
  if (!stream.ok()) return stream.status();
  const Shape x = Shape::FromProto(init.inputs[0]);
  const int64_t n = x.dimension(x.rank() - 1);
  const int64_t rows = Shape(x.dimensions().subspan(0, x.rank() - 1)).NumElements();
  return std::make_unique<LayerNormKernelImpl>(init, rows, n, *epsilon, *bfloat16, *stream);
}

}  // namespace

absl::Status RegisterCudaRowNormalizationKernels(KernelRegistry* registry) {
  static constexpr KernelTableEntry kEntries[] = {
      {kSoftmax, CreateSoftmaxKernel},
      {kLogSoftmax, CreateLogSoftmaxKernel},
      {kLayerNorm, CreateLayerNormKernel},
  };
  return RegisterKernelTable(registry, plan::CUDA, kEntries);
}

}  // namespace loom::cuda
