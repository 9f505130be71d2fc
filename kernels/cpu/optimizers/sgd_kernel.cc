#include "kernels/cpu/optimizers/sgd_kernel.h"

#include <cmath>
#include <cstdint>

#include "absl/status/status.h"
#include "core/tensor.h"
#include "kernels/attributes.h"
#include "kernels/cpu/kernel_checks.h"
#include "kernels/cpu/optimizers/optimizer_checks.h"

namespace loom::cpu {
namespace {

constexpr char kSgd[] = "sgd";

struct SgdOptions {
  ScheduledLearningRate lr;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
  int64_t first_step = 0;
};

// PyTorch computes in float32 with its Python-float hyperparameters rounded to float32:
// d_p.add(param, alpha=weight_decay), buf.mul_(momentum).add_(d_p, alpha=1 - dampening),
// d_p.add(buf, alpha=momentum) and param.add_(d_p, alpha=-lr). The factors below are those
// roundings, and Compute performs the same operations in the same order. PyTorch's CPU add with
// alpha is a fused multiply-add (a + alpha * b rounded once), so each is std::fma here (always
// fused, in hardware or in libm); the results equal PyTorch 1.13 CPU ones bit for bit (checked on
// x86-64).
class SgdKernel : public Kernel {
 public:
  SgdKernel(const KernelInit& init, const SgdOptions& options)
      : signature_(init),
        use_weight_decay_(options.weight_decay != 0.0),
        use_momentum_(options.momentum != 0.0),
        nesterov_(options.nesterov),
        first_step_(options.first_step),
        weight_decay_(static_cast<float>(options.weight_decay)),
        momentum_(static_cast<float>(options.momentum)),
        one_minus_dampening_(static_cast<float>(1.0 - options.dampening)),
        lr_(options.lr) {}

  absl::Status Compute(const KernelContext& context) override {
    absl::Status status = signature_.Check(kSgd, context);
    if (!status.ok()) return status;
    status = CheckStepPiece(kSgd, context.piece);
    if (!status.ok()) return status;
    const float* param = context.inputs[0].Data<const float>();
    const float* grad = context.inputs[1].Data<const float>();
    const float* buffer = context.inputs[2].Data<const float>();
    float* param_out = context.outputs[0].Data<float>();
    float* buffer_out = context.outputs[1].Data<float>();
    const int64_t count = context.outputs[0].NumElements();
    // PyTorch sets the buffer to the gradient on the very first step only; a resumed run
    // (first_step > 0) continues from the buffer it was given.
    const bool first_step = first_step_ == 0 && context.piece == 0;
    const float negative_lr = static_cast<float>(-lr_.At(first_step_ + context.piece));
    for (int64_t i = 0; i < count; ++i) {
      // Read everything this element needs before writing: outputs may alias inputs.
      const float p = param[i];
      float g = grad[i];
      if (use_weight_decay_) g = std::fma(p, weight_decay_, g);
      if (use_momentum_) {
        const float b = first_step ? g : std::fma(g, one_minus_dampening_, buffer[i] * momentum_);
        buffer_out[i] = b;
        g = nesterov_ ? std::fma(b, momentum_, g) : b;
      } else {
        buffer_out[i] = buffer[i];
      }
      param_out[i] = std::fma(g, negative_lr, p);
    }
    return absl::OkStatus();
  }

 private:
  TensorSignature signature_;
  bool use_weight_decay_;
  bool use_momentum_;
  bool nesterov_;
  int64_t first_step_;
  float weight_decay_;
  float momentum_;
  float one_minus_dampening_;
  ScheduledLearningRate lr_;
};

absl::StatusOr<SgdOptions> ReadOptions(const plan::KernelConf& conf) {
  const Attributes attributes(conf);
  SgdOptions options;
  absl::StatusOr<ScheduledLearningRate> lr = GetLearningRate(kSgd, attributes);
  if (!lr.ok()) return lr.status();
  options.lr = *lr;
  absl::StatusOr<double> value = GetFiniteFloat(kSgd, attributes, "momentum", 0.0);
  if (!value.ok()) return value.status();
  options.momentum = *value;
  absl::Status status = CheckNonNegative(kSgd, "momentum", options.momentum);
  if (!status.ok()) return status;
  value = GetFiniteFloat(kSgd, attributes, "dampening", 0.0);
  if (!value.ok()) return value.status();
  options.dampening = *value;
  value = GetFiniteFloat(kSgd, attributes, "weight_decay", 0.0);
  if (!value.ok()) return value.status();
  options.weight_decay = *value;
  status = CheckNonNegative(kSgd, "weight_decay", options.weight_decay);
  if (!status.ok()) return status;
  absl::StatusOr<bool> nesterov = attributes.GetBool("nesterov", false);
  if (!nesterov.ok()) return WithOpType(kSgd, nesterov.status());
  options.nesterov = *nesterov;
  absl::StatusOr<int64_t> first_step = GetFirstStep(kSgd, attributes);
  if (!first_step.ok()) return first_step.status();
  options.first_step = *first_step;
  if (options.nesterov && (options.momentum <= 0.0 || options.dampening != 0.0)) {
    return absl::InvalidArgumentError(
        "sgd: nesterov momentum requires a positive 'momentum' and zero 'dampening'");
  }
  return options;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateSgdKernel(const KernelInit& init) {
  absl::Status status = CheckElementwiseUpdate(kSgd, init, {"param", "grad", "momentum_buffer"},
                                               {"param_out", "momentum_buffer_out"});
  if (!status.ok()) return status;
  absl::StatusOr<SgdOptions> options = ReadOptions(*init.conf);
  if (!options.ok()) return options.status();
  return std::make_unique<SgdKernel>(init, *options);
}

}  // namespace loom::cpu
