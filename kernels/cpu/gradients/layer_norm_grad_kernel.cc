#include "kernels/cpu/gradients/layer_norm_grad_kernel.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/attributes.h"
#include "kernels/cpu/kernel_checks.h"
#include "runtime/tensor.h"

namespace loom::cpu {
namespace {

constexpr char kOpType[] = "layer_norm_grad";

class LayerNormGradKernel : public Kernel {
 public:
  LayerNormGradKernel(const KernelInit& init, int64_t row_length, double epsilon)
      : signature_(init),
        row_length_(row_length),
        epsilon_(epsilon),
        gamma_sums_(row_length),
        beta_sums_(row_length) {}

  absl::Status Compute(const KernelContext& context) override {
    absl::Status status = signature_.Check(kOpType, context);
    if (!status.ok()) return status;
    const float* x = context.inputs[0].Data<const float>();
    const float* gamma = context.inputs[1].Data<const float>();
    const float* dy = context.inputs[2].Data<const float>();
    float* dx = context.outputs[0].Data<float>();
    float* dgamma = context.outputs[1].Data<float>();
    float* dbeta = context.outputs[2].Data<float>();
    const int64_t n = row_length_;
    const int64_t rows = n == 0 ? 0 : context.inputs[0].NumElements() / n;
    double* gamma_sums = gamma_sums_.data();
    double* beta_sums = beta_sums_.data();
    std::fill(gamma_sums_.begin(), gamma_sums_.end(), 0.0);
    std::fill(beta_sums_.begin(), beta_sums_.end(), 0.0);
    for (int64_t row = 0; row < rows; ++row) {
      const float* x_row = x + row * n;
      const float* dy_row = dy + row * n;
      float* dx_row = dx + row * n;
      // The forward's statistics, the same way.
      double sum = 0.0;
      for (int64_t i = 0; i < n; ++i) sum += x_row[i];
      const double mean = sum / static_cast<double>(n);
      double squares = 0.0;
      for (int64_t i = 0; i < n; ++i) {
        const double centred = x_row[i] - mean;
        squares += centred * centred;
      }
      const double variance = squares / static_cast<double>(n);
      const double rstd = 1.0 / std::sqrt(variance + epsilon_);
      // Row sums of g = dy * gamma and g * xhat, and the column sums for dgamma and dbeta.
      double g_sum = 0.0;
      double g_xhat_sum = 0.0;
      for (int64_t i = 0; i < n; ++i) {
        const double xhat = (x_row[i] - mean) * rstd;
        const double g = static_cast<double>(dy_row[i]) * gamma[i];
        g_sum += g;
        g_xhat_sum += g * xhat;
        gamma_sums[i] += dy_row[i] * xhat;
        beta_sums[i] += dy_row[i];
      }
      const double g_mean = g_sum / static_cast<double>(n);
      const double g_xhat_mean = g_xhat_sum / static_cast<double>(n);
      for (int64_t i = 0; i < n; ++i) {
        const double xhat = (x_row[i] - mean) * rstd;
        const double g = static_cast<double>(dy_row[i]) * gamma[i];
        dx_row[i] = static_cast<float>(rstd * (g - g_mean - xhat * g_xhat_mean));
      }
    }
    for (int64_t i = 0; i < n; ++i) {
      dgamma[i] = static_cast<float>(gamma_sums[i]);
      dbeta[i] = static_cast<float>(beta_sums[i]);
    }
    return absl::OkStatus();
  }

 private:
  TensorSignature signature_;
  int64_t row_length_;
  double epsilon_;
  // Scratch: the double column sums behind dgamma and dbeta.
  std::vector<double> gamma_sums_;
  std::vector<double> beta_sums_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateLayerNormGradKernel(const KernelInit& init) {
  if (init.inputs.size() != 3 || init.outputs.size() != 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        kOpType, ": expects 3 inputs (x, gamma, dy) and 3 outputs (dx, dgamma, dbeta), got ",
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
        absl::StrCat(kOpType, ": input 'x' must have rank >= 1, got a scalar"));
  }
  const int64_t n = x.dimension(x.rank() - 1);
  const Shape row({n});
  status = CheckSameShape(kOpType, "the last axis of x", row, "input 'gamma'",
                          Shape::FromProto(init.inputs[1]));
  if (!status.ok()) return status;
  status = CheckSameShape(kOpType, "input 'x'", x, "input 'dy'", Shape::FromProto(init.inputs[2]));
  if (!status.ok()) return status;
  status =
      CheckSameShape(kOpType, "input 'x'", x, "output 'dx'", Shape::FromProto(init.outputs[0]));
  if (!status.ok()) return status;
  status = CheckSameShape(kOpType, "the last axis of x", row, "output 'dgamma'",
                          Shape::FromProto(init.outputs[1]));
  if (!status.ok()) return status;
  status = CheckSameShape(kOpType, "the last axis of x", row, "output 'dbeta'",
                          Shape::FromProto(init.outputs[2]));
  if (!status.ok()) return status;
  absl::StatusOr<double> epsilon = Attributes(*init.conf).GetFloat("epsilon", 1e-5);
  if (!epsilon.ok()) return WithOpType(kOpType, epsilon.status());
  if (!(std::isfinite(*epsilon) && *epsilon >= 0.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOpType, ": attribute 'epsilon' must be finite and >= 0, got ", *epsilon));
  }
  return std::make_unique<LayerNormGradKernel>(init, n, *epsilon);
}

}  // namespace loom::cpu
