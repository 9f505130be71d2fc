#include "kernels/cpu/gradients/softmax_grad_kernels.h"

#include <cmath>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/cpu/kernel_checks.h"
#include "runtime/tensor.h"

namespace loom::cpu {
namespace {

constexpr char kSoftmaxGrad[] = "softmax_grad";
constexpr char kLogSoftmaxGrad[] = "log_softmax_grad";

class SoftmaxGradKernel : public Kernel {
 public:
  SoftmaxGradKernel(const KernelInit& init, int64_t row_length)
      : signature_(init), row_length_(row_length) {}

  absl::Status Compute(const KernelContext& context) override {
    absl::Status status = signature_.Check(kSoftmaxGrad, context);
    if (!status.ok()) return status;
    if (row_length_ == 0) return absl::OkStatus();
    const float* y = context.inputs[0].Data<const float>();
    const float* dy = context.inputs[1].Data<const float>();
    float* dx = context.outputs[0].Data<float>();
    const int64_t n = row_length_;
    const int64_t rows = context.inputs[0].NumElements() / n;
    for (int64_t row = 0; row < rows; ++row) {
      const float* y_row = y + row * n;
      const float* dy_row = dy + row * n;
      float* dx_row = dx + row * n;
      double dot = 0.0;
      for (int64_t i = 0; i < n; ++i) dot += static_cast<double>(dy_row[i]) * y_row[i];
      const float dot_float = static_cast<float>(dot);
      for (int64_t i = 0; i < n; ++i) dx_row[i] = y_row[i] * (dy_row[i] - dot_float);
    }
    return absl::OkStatus();
  }

 private:
  TensorSignature signature_;
  int64_t row_length_;
};

class LogSoftmaxGradKernel : public Kernel {
 public:
  LogSoftmaxGradKernel(const KernelInit& init, int64_t row_length)
      : signature_(init), row_length_(row_length) {}

  absl::Status Compute(const KernelContext& context) override {
    absl::Status status = signature_.Check(kLogSoftmaxGrad, context);
    if (!status.ok()) return status;
    if (row_length_ == 0) return absl::OkStatus();
    const float* y = context.inputs[0].Data<const float>();
    const float* dy = context.inputs[1].Data<const float>();
    float* dx = context.outputs[0].Data<float>();
    const int64_t n = row_length_;
    const int64_t rows = context.inputs[0].NumElements() / n;
    for (int64_t row = 0; row < rows; ++row) {
      const float* y_row = y + row * n;
      const float* dy_row = dy + row * n;
      float* dx_row = dx + row * n;
      double sum = 0.0;
      for (int64_t i = 0; i < n; ++i) sum += dy_row[i];
      const float sum_float = static_cast<float>(sum);
      for (int64_t i = 0; i < n; ++i) dx_row[i] = dy_row[i] - std::exp(y_row[i]) * sum_float;
    }
    return absl::OkStatus();
  }

 private:
  TensorSignature signature_;
  int64_t row_length_;
};

// Float32 inputs y (rank >= 1) and dy and an output dx, all of one shape; returns the last
// dimension.
absl::StatusOr<int64_t> CheckRowGradOp(const char* op_type, const KernelInit& init) {
  absl::Status status = CheckArity(op_type, init, 2, 1);
  if (!status.ok()) return status;
  status = CheckAllFloat32(op_type, init);
  if (!status.ok()) return status;
  const Shape y = Shape::FromProto(init.inputs[0]);
  if (y.rank() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(op_type, ": input 'y' must have rank >= 1, got a scalar"));
  }
  status = CheckSameShape(op_type, "input 'y'", y, "input 'dy'", Shape::FromProto(init.inputs[1]));
  if (!status.ok()) return status;
  status =
      CheckSameShape(op_type, "input 'y'", y, "output 'dx'", Shape::FromProto(init.outputs[0]));
  if (!status.ok()) return status;
  return y.dimension(y.rank() - 1);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateSoftmaxGradKernel(const KernelInit& init) {
  absl::StatusOr<int64_t> row_length = CheckRowGradOp(kSoftmaxGrad, init);
  if (!row_length.ok()) return row_length.status();
  return std::make_unique<SoftmaxGradKernel>(init, *row_length);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateLogSoftmaxGradKernel(const KernelInit& init) {
  absl::StatusOr<int64_t> row_length = CheckRowGradOp(kLogSoftmaxGrad, init);
  if (!row_length.ok()) return row_length.status();
  return std::make_unique<LogSoftmaxGradKernel>(init, *row_length);
}

}  // namespace loom::cpu
