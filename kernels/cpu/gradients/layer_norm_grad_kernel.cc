#include "kernels/cpu/gradients/layer_norm_grad_kernel.h"

#include <algorithm>
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

constexpr char kOpType[] = "layer_norm_grad";

// For each of `rows` rows of `n`, with g = dy * gamma and xhat = (x - mean) * rstd:
// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)); adds dy * xhat to `gamma_sums` and dy to
// `beta_sums`. `xhat` is scratch of `n` floats.
LOOM_VECTORIZED_LOOP void LayerNormGradRows(const float* x, const float* gamma, const float* dy,
                                            int64_t rows, int64_t n, double epsilon, float* dx,
                                            double* gamma_sums, double* beta_sums, float* xhat) {
  const int64_t whole = n - n % kLanes;
  for (int64_t row = 0; row < rows; ++row) {
    const float* x_row = x + row * n;
    const float* dy_row = dy + row * n;
    float* dx_row = dx + row * n;
    // The forward's statistics, the same way.
    const RowStatistics statistics = ComputeRowStatistics(x_row, n, epsilon);
    const float mean = statistics.mean;
    const float rstd = statistics.rstd;
    for (int64_t i = 0; i < n; ++i) {
      xhat[i] = (x_row[i] - mean) * rstd;
      gamma_sums[i] += dy_row[i] * xhat[i];
      beta_sums[i] += dy_row[i];
    }
    // Row sums of g and g * xhat.
    float g_lanes[kLanes] = {};
    float g_xhat_lanes[kLanes] = {};
    for (int64_t i = 0; i < whole; i += kLanes) {
      for (int64_t lane = 0; lane < kLanes; ++lane) {
        const float g = dy_row[i + lane] * gamma[i + lane];
        g_lanes[lane] += g;
        g_xhat_lanes[lane] += g * xhat[i + lane];
      }
    }
    double g_sum = 0.0;
    double g_xhat_sum = 0.0;
    for (int64_t lane = 0; lane < kLanes; ++lane) {
      g_sum += g_lanes[lane];
      g_xhat_sum += g_xhat_lanes[lane];
    }
    for (int64_t i = whole; i < n; ++i) {
      const float g = dy_row[i] * gamma[i];
      g_sum += g;
      g_xhat_sum += g * xhat[i];
    }
    const float g_mean = static_cast<float>(g_sum / static_cast<double>(n));
    const float g_xhat_mean = static_cast<float>(g_xhat_sum / static_cast<double>(n));
    for (int64_t i = 0; i < n; ++i) {
      dx_row[i] = rstd * (dy_row[i] * gamma[i] - g_mean - xhat[i] * g_xhat_mean);
    }
  }
}

class LayerNormGradKernel : public Kernel {
 public:
  LayerNormGradKernel(const KernelInit& init, int64_t row_length, double epsilon)
      : signature_(init),
        row_length_(row_length),
        epsilon_(epsilon),
        gamma_sums_(row_length),
        beta_sums_(row_length),
        xhat_(row_length) {}

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
    std::fill(gamma_sums_.begin(), gamma_sums_.end(), 0.0);
    std::fill(beta_sums_.begin(), beta_sums_.end(), 0.0);
    LayerNormGradRows(x, gamma, dy, rows, n, epsilon_, dx, gamma_sums_.data(), beta_sums_.data(),
                      xhat_.data());
    for (int64_t i = 0; i < n; ++i) {
      dgamma[i] = static_cast<float>(gamma_sums_[i]);
      dbeta[i] = static_cast<float>(beta_sums_[i]);
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
  // Scratch: xhat of one row.
  std::vector<float> xhat_;
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
