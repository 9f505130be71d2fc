#include "kernels/cpu/optimizers/adamw_kernel.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "absl/status/status.h"
#include "core/tensor.h"
#include "kernels/attributes.h"
#include "kernels/cpu/kernel_checks.h"
#include "kernels/cpu/optimizers/optimizer_checks.h"
#include "kernels/cpu/vector_math.h"

namespace loom::cpu {
namespace {

constexpr char kAdamW[] = "adamw";

struct AdamWOptions {
  ScheduledLearningRate lr;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-8;
  double weight_decay = 0.01;
  int64_t first_step = 0;
};

struct AdamWScalars {
  float decay;
  float beta1;
  float one_minus_beta1;
  float beta2;
  float one_minus_beta2;
  float correction2_sqrt;
  float epsilon;
  float negative_step_size;
};

// The element loop. Vectorised (an AVX2 + FMA clone beside the baseline one) without changing a
// bit: this file is compiled with -ffp-contract=off, so only the explicit std::fma calls fuse,
// and -fno-math-errno, so that sqrt (correctly rounded either way) vectorises. The outputs may be
// the inputs (the update is in place), which keeps the compiler from vectorising across the seven
// arrays; so each block of elements is copied into local arrays, updated there, and written back.
LOOM_VECTORIZED_LOOP void AdamWLoop(const float* param, const float* grad, const float* exp_avg,
                                    const float* exp_avg_sq, float* param_out, float* exp_avg_out,
                                    float* exp_avg_sq_out, int64_t count, AdamWScalars k) {
  constexpr int64_t kBlock = 256;
  float p[kBlock], g[kBlock], m[kBlock], v[kBlock];
  for (int64_t base = 0; base < count; base += kBlock) {
    const int64_t n = std::min(kBlock, count - base);
    std::copy_n(param + base, n, p);
    std::copy_n(grad + base, n, g);
    std::copy_n(exp_avg + base, n, m);
    std::copy_n(exp_avg_sq + base, n, v);
    for (int64_t i = 0; i < n; ++i) {
      const float decayed = p[i] * k.decay;
      m[i] = std::fma(g[i], k.one_minus_beta1, m[i] * k.beta1);
      v[i] = std::fma(k.one_minus_beta2 * g[i], g[i], v[i] * k.beta2);
      const float denom = std::sqrt(v[i]) / k.correction2_sqrt + k.epsilon;
      p[i] = decayed + k.negative_step_size * m[i] / denom;
    }
    std::copy_n(p, n, param_out + base);
    std::copy_n(m, n, exp_avg_out + base);
    std::copy_n(v, n, exp_avg_sq_out + base);
  }
}

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
    // LambdaLR's rate of this step (group['lr'] as a Python float).
    const double lr = options_.lr.At(options_.first_step + context.piece);
    const double bias_correction1 = 1.0 - std::pow(options_.beta1, step);
    const double bias_correction2 = 1.0 - std::pow(options_.beta2, step);
    const double step_size = lr / bias_correction1;
    const double bias_correction2_sqrt = std::sqrt(bias_correction2);

    const float decay = static_cast<float>(1.0 - lr * options_.weight_decay);
    const float beta1 = static_cast<float>(options_.beta1);
    const float one_minus_beta1 = static_cast<float>(1.0 - options_.beta1);
    const float beta2 = static_cast<float>(options_.beta2);
    const float one_minus_beta2 = static_cast<float>(1.0 - options_.beta2);
    const float correction2_sqrt = static_cast<float>(bias_correction2_sqrt);
    const float epsilon = static_cast<float>(options_.epsilon);
    const float negative_step_size = static_cast<float>(-step_size);

    AdamWLoop(context.inputs[0].Data<const float>(), context.inputs[1].Data<const float>(),
              context.inputs[2].Data<const float>(), context.inputs[3].Data<const float>(),
              context.outputs[0].Data<float>(), context.outputs[1].Data<float>(),
              context.outputs[2].Data<float>(), context.outputs[0].NumElements(),
              AdamWScalars{decay, beta1, one_minus_beta1, beta2, one_minus_beta2, correction2_sqrt,
                           epsilon, negative_step_size});
    return absl::OkStatus();
  }

 private:
  TensorSignature signature_;
  AdamWOptions options_;
};

absl::StatusOr<AdamWOptions> ReadOptions(const plan::KernelConf& conf) {
  const Attributes attributes(conf);
  AdamWOptions options;
  absl::StatusOr<ScheduledLearningRate> lr = GetLearningRate(kAdamW, attributes);
  if (!lr.ok()) return lr.status();
  options.lr = *lr;
  absl::StatusOr<double> value = GetFiniteFloat(kAdamW, attributes, "beta1", options.beta1);
  if (!value.ok()) return value.status();
  options.beta1 = *value;
  absl::Status status = CheckDecayRate(kAdamW, "beta1", options.beta1);
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
