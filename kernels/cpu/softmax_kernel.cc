#include "kernels/cpu/softmax_kernel.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/tensor.h"
#include "kernels/cpu/kernel_checks.h"

namespace loom::cpu {
namespace {

constexpr char kOpType[] = "softmax";
constexpr char kLogSoftmax[] = "log_softmax";

class SoftmaxKernel : public Kernel {
 public:
  SoftmaxKernel(const KernelInit& init, int64_t row_length)
      : signature_(init), row_length_(row_length) {}

  absl::Status Compute(const KernelContext& context) override {
    absl::Status status = signature_.Check(kOpType, context);
    if (!status.ok()) return status;
    if (row_length_ == 0) return absl::OkStatus();
    const float* input = context.inputs[0].Data<const float>();
    float* output = context.outputs[0].Data<float>();
    const int64_t rows = context.inputs[0].NumElements() / row_length_;
    for (int64_t row = 0; row < rows; ++row) {
      const float* x = input + row * row_length_;
      float* y = output + row * row_length_;
      const float maximum = *std::max_element(x, x + row_length_);
      double sum = 0.0;
      for (int64_t i = 0; i < row_length_; ++i) {
        y[i] = std::exp(x[i] - maximum);
        sum += y[i];
      }
      const float inverse_sum = static_cast<float>(1.0 / sum);
      for (int64_t i = 0; i < row_length_; ++i) y[i] *= inverse_sum;
    }
    return absl::OkStatus();
  }

 private:
  TensorSignature signature_;
  int64_t row_length_;
};

class LogSoftmaxKernel : public Kernel {
 public:
  LogSoftmaxKernel(const KernelInit& init, int64_t row_length)
      : signature_(init), row_length_(row_length) {}

  absl::Status Compute(const KernelContext& context) override {
    absl::Status status = signature_.Check(kLogSoftmax, context);
    if (!status.ok()) return status;
    if (row_length_ == 0) return absl::OkStatus();
    const float* input = context.inputs[0].Data<const float>();
    float* output = context.outputs[0].Data<float>();
    const int64_t rows = context.inputs[0].NumElements() / row_length_;
    for (int64_t row = 0; row < rows; ++row) {
      const float* x = input + row * row_length_;
      float* y = output + row * row_length_;
      const float maximum = *std::max_element(x, x + row_length_);
      double sum = 0.0;
      for (int64_t i = 0; i < row_length_; ++i) sum += std::exp(x[i] - maximum);
      // x - (maximum + log(sum)), with the shift applied first so that large inputs keep their
      // precision.
      const float log_sum = static_cast<float>(std::log(sum));
      for (int64_t i = 0; i < row_length_; ++i) y[i] = (x[i] - maximum) - log_sum;
    }
    return absl::OkStatus();
  }

 private:
  TensorSignature signature_;
  int64_t row_length_;
};

// One float32 input of rank >= 1 and an output of its shape; returns the last dimension.
absl::StatusOr<int64_t> CheckRowOp(const char* op_type, const KernelInit& init) {
  absl::Status status = CheckArity(op_type, init, 1, 1);
  if (!status.ok()) return status;
  status = CheckAllFloat32(op_type, init);
  if (!status.ok()) return status;
  const Shape input = Shape::FromProto(init.inputs[0]);
  if (input.rank() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(op_type, ": input must have rank >= 1, got a scalar"));
  }
  status = CheckSameShape(op_type, "input", input, "output", Shape::FromProto(init.outputs[0]));
  if (!status.ok()) return status;
  return input.dimension(input.rank() - 1);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateSoftmaxKernel(const KernelInit& init) {
  absl::StatusOr<int64_t> row_length = CheckRowOp(kOpType, init);
  if (!row_length.ok()) return row_length.status();
  return std::make_unique<SoftmaxKernel>(init, *row_length);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateLogSoftmaxKernel(const KernelInit& init) {
  absl::StatusOr<int64_t> row_length = CheckRowOp(kLogSoftmax, init);
  if (!row_length.ok()) return row_length.status();
  return std::make_unique<LogSoftmaxKernel>(init, *row_length);
}

}  // namespace loom::cpu
