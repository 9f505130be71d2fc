#include "kernels/cpu/layer_norm_kernel.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/tensor.h"
#include "kernels/attributes.h"
#include "kernels/cpu/kernel_checks.h"
#include "kernels/cpu/layer_norm_statistics.h"
#include "kernels/cpu/vector_math.h"

namespace loom::cpu {
namespace {

constexpr char kOpType[] = "layer_norm";

// y = (x - mean) * rstd * gamma + beta for each of `rows` rows of `n`; `means` and `rstds` (when
// not null) get the rows' statistics.
LOOM_VECTORIZED_LOOP void NormalizeRows(const float* x, const float* gamma, const float* beta,
                                        int64_t rows, int64_t n, double epsilon, float* y,
                                        float* means, float* rstds) {
  for (int64_t row = 0; row < rows; ++row) {
    const float* x_row = x + row * n;
    float* y_row = y + row * n;
    const RowStatistics statistics = ComputeRowStatistics(x_row, n, epsilon);
    const float mean = statistics.mean;
    const float rstd = statistics.rstd;
    for (int64_t i = 0; i < n; ++i) y_row[i] = (x_row[i] - mean) * rstd * gamma[i] + beta[i];
    if (means != nullptr) {
      means[row] = mean;
      rstds[row] = rstd;
    }
  }
}

class LayerNormKernel : public Kernel {
 public:
  LayerNormKernel(const KernelInit& init, int64_t row_length, double epsilon)
      : signature_(init),
        row_length_(row_length),
        epsilon_(epsilon),
        statistics_(init.outputs.size() == 3) {}

  absl::Status Compute(const KernelContext& context) override {
    absl::Status status = signature_.Check(kOpType, context);
    if (!status.ok()) return status;
    const float* x = context.inputs[0].Data<const float>();
    const float* gamma = context.inputs[1].Data<const float>();
    const float* beta = context.inputs[2].Data<const float>();
    float* y = context.outputs[0].Data<float>();
    float* means = statistics_ ? context.outputs[1].Data<float>() : nullptr;
    float* rstds = statistics_ ? context.outputs[2].Data<float>() : nullptr;
    const int64_t n = row_length_;
    const int64_t rows = statistics_ ? context.outputs[1].NumElements()
                                     : (n == 0 ? 0 : context.inputs[0].NumElements() / n);
    NormalizeRows(x, gamma, beta, rows, n, epsilon_, y, means, rstds);
    return absl::OkStatus();
  }

 private:
  TensorSignature signature_;
  int64_t row_length_;
  double epsilon_;
  // Whether outputs 1 and 2 (mean and rstd) are written.
  bool statistics_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateLayerNormKernel(const KernelInit& init) {
  if (init.inputs.size() != 3 || (init.outputs.size() != 1 && init.outputs.size() != 3)) {
    return absl::InvalidArgumentError(absl::StrCat(
        kOpType, ": expects 3 inputs (x, gamma, beta) and 1 or 3 outputs (y[, mean, rstd]), got ",
        init.inputs.size(), " input", init.inputs.size() == 1 ? "" : "s", " and ",
        init.outputs.size(), " output", init.outputs.size() == 1 ? "" : "s"));
  }
  absl::Status status = CheckNoNegativeDimensions(kOpType, init);
  if (!status.ok()) return status;
  status = CheckAllFloat32(kOpType, init);
  if (!status.ok()) return status;
  const Shape x = Shape::FromProto(init.inputs[0]);
  if (x.rank() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOpType, ": input x must have rank >= 1, got a scalar"));
  }
  const int64_t n = x.dimension(x.rank() - 1);
  const Shape row({n});
  status =
      CheckSameShape(kOpType, "the last axis of x", row, "gamma", Shape::FromProto(init.inputs[1]));
  if (!status.ok()) return status;
  status =
      CheckSameShape(kOpType, "the last axis of x", row, "beta", Shape::FromProto(init.inputs[2]));
  if (!status.ok()) return status;
  status = CheckSameShape(kOpType, "x", x, "output y", Shape::FromProto(init.outputs[0]));
  if (!status.ok()) return status;
  if (init.outputs.size() == 3) {
    const Shape rows(x.dimensions().subspan(0, x.rank() - 1));
    status = CheckSameShape(kOpType, "x without its last axis", rows, "output mean",
                            Shape::FromProto(init.outputs[1]));
    if (!status.ok()) return status;
    status = CheckSameShape(kOpType, "x without its last axis", rows, "output rstd",
                            Shape::FromProto(init.outputs[2]));
    if (!status.ok()) return status;
  }
  absl::StatusOr<double> epsilon = Attributes(*init.conf).GetFloat("epsilon", 1e-5);
  if (!epsilon.ok()) return WithOpType(kOpType, epsilon.status());
  if (!(std::isfinite(*epsilon) && *epsilon >= 0.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOpType, ": attribute 'epsilon' must be finite and >= 0, got ", *epsilon));
  }
  return std::make_unique<LayerNormKernel>(init, n, *epsilon);
}

}  // namespace loom::cpu
