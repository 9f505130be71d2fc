#include "kernels/cpu/softmax_kernel.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/cpu/kernel_checks.h"
#include "runtime/tensor.h"

namespace loom::cpu {
namespace {

constexpr char kOpType[] = "softmax";

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

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateSoftmaxKernel(const KernelInit& init) {
  absl::Status status = CheckArity(kOpType, init, 1, 1);
  if (!status.ok()) return status;
  status = CheckAllFloat32(kOpType, init);
  if (!status.ok()) return status;
  const Shape input = Shape::FromProto(init.inputs[0]);
  if (input.rank() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOpType, ": input must have rank >= 1, got a scalar"));
  }
  status = CheckSameShape(kOpType, "input", input, "output", Shape::FromProto(init.outputs[0]));
  if (!status.ok()) return status;
  return std::make_unique<SoftmaxKernel>(init, input.dimension(input.rank() - 1));
}

}  // namespace loom::cpu
