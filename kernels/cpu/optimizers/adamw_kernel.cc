#include "kernels/cpu/optimizers/adamw_kernel.h"

#include <cmath>
#include <cstdint>

#include "absl/status/status.h"
#include "kernels/attributes.h"
#include "kernels/cpu/kernel_checks.h"
#include "kernels/cpu/optimizers/optimizer_checks.h"
#include "runtime/tensor.h"

namespace loom::cpu {
namespace {

constexpr char kAdamW[] = "adamw";

struct AdamWOptions {
  double lr = 0.0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-8;
  double weight_decay = 0.01;
  int64_t first_step = 0;
};

// PyTorch's _single_tensor_adamw computes its scalars as Python floats (double) and the tensor
// math in float32, each Python float rounded to float32 where it meets a tensor:
//   param.mul_(1 - lr * weight_decay)
//   exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
//   exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
//   denom = (exp_avg_sq.sqrt() / math.sqrt(bias_correction2)).add_(eps)
//   param.addcdiv_(exp_avg, denom, value=-lr / bias_correction1)
// Compute performs the same float32 operations in the same order. PyTorch's CPU add with alpha and
// addcmul are fused multiply-adds (exp_avg * beta1 + (1 - beta1) * grad rounded once, and
// exp_avg_sq * beta2 + ((1 - beta2) * grad) * grad rounded once), so they are std::fma here (always
// fused, in hardware or in libm); the results equal PyTorch 1.13 CPU ones bit for bit (checked on
// x86-64).
class AdamWKernel : public Kernel {
 public:
  AdamWKernel(const KernelInit& init, const AdamWOptions& options)
      : signature_(init), options_(options) {}

  absl::Status Compute(const KernelContext& context) override {
    absl::Status status = signature_.Check(kAdamW, context);
    if (!status.ok()) return status;
    status = CheckStepPiece(kAdamW, context.piece);
    if (!status.ok()) return status;
    // Python floats: the step is a float (state_steps hold float tensors) and ** is C pow.
    const double step =
        static_cast<double>(options_.first_step) + static_cast<double>(context.piece) + 1.0;
    const double bias_correction1 = 1.0 - std::pow(options_.beta1, step);
    const double bias_correction2 = 1.0 - std::pow(options_.beta2, step);
    const double step_size = options_.lr / bias_correction1;
    const double bias_correction2_sqrt = std::sqrt(bias_correction2);

    const float decay = static_cast<float>(1.0 - options_.lr * options_.weight_decay);
    const float beta1 = static_cast<float>(options_.beta1);
    const float one_minus_beta1 = static_cast<float>(1.0 - options_.beta1);
    const float beta2 = static_cast<float>(options_.beta2);
    const float one_minus_beta2 = static_cast<float>(1.0 - options_.beta2);
    const float correction2_sqrt = static_cast<float>(bias_correction2_sqrt);
    const float epsilon = static_cast<float>(options_.epsilon);
    const float negative_step_size = static_cast<float>(-step_size);

    const float* param = context.inputs[0].Data<const float>();
    const float* grad = context.inputs[1].Data<const float>();
    const float* exp_avg = context.inputs[2].Data<const float>();
    const float* exp_avg_sq = context.inputs[3].Data<const float>();
    float* param_out = context.outputs[0].Data<float>();
    float* exp_avg_out = context.outputs[1].Data<float>();
    float* exp_avg_sq_out = context.outputs[2].Data<float>();
    const int64_t count = context.outputs[0].NumElements();
    for (int64_t i = 0; i < count; ++i) {
      // Read everything this element needs before writing: outputs may alias inputs.
      const float g = grad[i];
      float p = param[i] * decay;
      const float m = std::fma(g, one_minus_beta1, exp_avg[i] * beta1);
      const float v = std::fma(one_minus_beta2 * g, g, exp_avg_sq[i] * beta2);
      const float denom = std::sqrt(v) / correction2_sqrt + epsilon;
      p = p + negative_step_size * m / denom;
      exp_avg_out[i] = m;
      exp_avg_sq_out[i] = v;
      param_out[i] = p;
    }
    return absl::OkStatus();
  }

 private:
  TensorSignature signature_;
  AdamWOptions options_;
};

absl::StatusOr<AdamWOptions> ReadOptions(const plan::KernelConf& conf) {
  const Attributes attributes(conf);
  AdamWOptions options;
  absl::StatusOr<double> value = GetFiniteFloat(kAdamW, attributes, "lr");
  if (!value.ok()) return value.status();
  options.lr = *value;
  absl::Status status = CheckNonNegative(kAdamW, "lr", options.lr);
  if (!status.ok()) return status;
  value = GetFiniteFloat(kAdamW, attributes, "beta1", options.beta1);
  if (!value.ok()) return value.status();
  options.beta1 = *value;
  status = CheckDecayRate(kAdamW, "beta1", options.beta1);
  if (!status.ok()) return status;
  value = GetFiniteFloat(kAdamW, attributes, "beta2", options.beta2);
  if (!value.ok()) return value.status();
  options.beta2 = *value;
  status = CheckDecayRate(kAdamW, "beta2", options.beta2);
  if (!status.ok()) return status;
  value = GetFiniteFloat(kAdamW, attributes, "epsilon", options.epsilon);
  if (!value.ok()) return value.status();
  options.epsilon = *value;
  status = CheckNonNegative(kAdamW, "epsilon", options.epsilon);
  if (!status.ok()) return status;
  value = GetFiniteFloat(kAdamW, attributes, "weight_decay", options.weight_decay);
  if (!value.ok()) return value.status();
  options.weight_decay = *value;
  status = CheckNonNegative(kAdamW, "weight_decay", options.weight_decay);
  if (!status.ok()) return status;
  absl::StatusOr<int64_t> first_step = GetFirstStep(kAdamW, attributes);
  if (!first_step.ok()) return first_step.status();
  options.first_step = *first_step;
  return options;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateAdamWKernel(const KernelInit& init) {
  absl::Status status =
      CheckElementwiseUpdate(kAdamW, init, {"param", "grad", "exp_avg", "exp_avg_sq"},
                             {"param_out", "exp_avg_out", "exp_avg_sq_out"});
  if (!status.ok()) return status;
  absl::StatusOr<AdamWOptions> options = ReadOptions(*init.conf);
  if (!options.ok()) return options.status();
  return std::make_unique<AdamWKernel>(init, *options);
}

}  // namespace loom::cpu
