#include "kernels/cpu/bias_add_kernel.h"

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/tensor.h"
#include "kernels/cpu/kernel_checks.h"

namespace loom::cpu {
namespace {

constexpr char kOpType[] = "bias_add";

class BiasAddKernel : public Kernel {
 public:
  BiasAddKernel(const KernelInit& init, int64_t row_length)
      : signature_(init), row_length_(row_length) {}

  absl::Status Compute(const KernelContext& context) override {
    absl::Status status = signature_.Check(kOpType, context);
    if (!status.ok()) return status;
    if (row_length_ == 0) return absl::OkStatus();
    const float* x = context.inputs[0].Data<const float>();
    const float* bias = context.inputs[1].Data<const float>();
    float* output = context.outputs[0].Data<float>();
    const int64_t rows = context.inputs[0].NumElements() / row_length_;
    for (int64_t row = 0; row < rows; ++row) {
      const float* x_row = x + row * row_length_;
      float* output_row = output + row * row_length_;
      for (int64_t i = 0; i < row_length_; ++i) output_row[i] = x_row[i] + bias[i];
    }
    return absl::OkStatus();
  }

 private:
  TensorSignature signature_;
  int64_t row_length_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateBiasAddKernel(const KernelInit& init) {
  absl::Status status = CheckArity(kOpType, init, 2, 1);
  if (!status.ok()) return status;
  status = CheckAllFloat32(kOpType, init);
  if (!status.ok()) return status;
  const Shape x = Shape::FromProto(init.inputs[0]);
  const Shape bias = Shape::FromProto(init.inputs[1]);
  if (x.rank() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOpType, ": x must have rank >= 1, got a scalar"));
  }
  const int64_t row_length = x.dimension(x.rank() - 1);
  if (bias != Shape({row_length})) {
    return absl::InvalidArgumentError(absl::StrCat(kOpType, ": bias must have shape [", row_length,
                                                   "] to match the last axis of x ", x.ToString(),
                                                   ", got ", bias.ToString()));
  }
  status = CheckSameShape(kOpType, "x", x, "output", Shape::FromProto(init.outputs[0]));
  if (!status.ok()) return status;
  return std::make_unique<BiasAddKernel>(init, row_length);
}

}  // namespace loom::cpu
