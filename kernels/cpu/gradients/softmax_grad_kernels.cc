#include "kernels/cpu/gradients/softmax_grad_kernels.h"

#include <cmath>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/tensor.h"
#include "kernels/cpu/kernel_checks.h"

namespace loom::cpu {
namespace {

constexpr char kSoftmaxGrad[] = "softmax_grad";
constexpr char kLogSoftmaxGrad[] = "log_softmax_grad";

// dx from y and dy for one row of n elements.
using RowGradient = void (*)(const float* y, const float* dy, float* dx, int64_t n);

// softmax: dx = y * (dy - sum(dy * y)).
void SoftmaxRowGradient(const float* y, const float* dy, float* dx, int64_t n) {
  double dot = 0.0;
  for (int64_t i = 0; i < n; ++i) dot += static_cast<double>(dy[i]) * y[i];
  const float dot_float = static_cast<float>(dot);
  for (int64_t i = 0; i < n; ++i) dx[i] = y[i] * (dy[i] - dot_float);
}

// log_softmax: dx = dy - exp(y) * sum(dy).
void LogSoftmaxRowGradient(const float* y, const float* dy, float* dx, int64_t n) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += dy[i];
  const float sum_float = static_cast<float>(sum);
  for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] - std::exp(y[i]) * sum_float;
}

// The gradient of a function applied row by row over the last axis, from its output y.
class RowwiseGradKernel : public Kernel {
 public:
  RowwiseGradKernel(const KernelInit& init, const char* op_type, int64_t row_length,
                    RowGradient row_gradient)
      : signature_(init), op_type_(op_type), row_length_(row_length), row_gradient_(row_gradient) {}

  absl::Status Compute(const KernelContext& context) override {
    absl::Status status = signature_.Check(op_type_, context);
    if (!status.ok()) return status;
    if (row_length_ == 0) return absl::OkStatus();
    const float* y = context.inputs[0].Data<const float>();
    const float* dy = context.inputs[1].Data<const float>();
    float* dx = context.outputs[0].Data<float>();
    const int64_t rows = context.inputs[0].NumElements() / row_length_;
    for (int64_t row = 0; row < rows; ++row) {
      const int64_t offset = row * row_length_;
      row_gradient_(y + offset, dy + offset, dx + offset, row_length_);
    }
    return absl::OkStatus();
  }

 private:
  TensorSignature signature_;
  const char* op_type_;
  int64_t row_length_;
  RowGradient row_gradient_;
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
  return std::make_unique<RowwiseGradKernel>(init, kSoftmaxGrad, *row_length, SoftmaxRowGradient);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateLogSoftmaxGradKernel(const KernelInit& init) {
  absl::StatusOr<int64_t> row_length = CheckRowGradOp(kLogSoftmaxGrad, init);
  if (!row_length.ok()) return row_length.status();
  return std::make_unique<RowwiseGradKernel>(init, kLogSoftmaxGrad, *row_length,
                                             LogSoftmaxRowGradient);
}

}  // namespace loom::cpu
