#include "kernels/cpu/optimizers/clip_grad_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "core/tensor.h"
#include "kernels/attributes.h"
#include "kernels/cpu/kernel_checks.h"
#include "kernels/cpu/optimizers/optimizer_checks.h"

namespace loom::cpu {
namespace {

constexpr char kSquaredNorm[] = "squared_norm";
constexpr char kClipCoefficient[] = "clip_coefficient";
constexpr char kScaleBy[] = "scale_by";

// What clip_grad_norm_ adds to the norm before dividing.
constexpr float kNormEpsilon = 1e-6f;

class SquaredNormKernel : public Kernel {
 public:
  explicit SquaredNormKernel(const KernelInit& init) : signature_(init) {}

  absl::Status Compute(const KernelContext& context) override {
    absl::Status status = signature_.Check(kSquaredNorm, context);
    if (!status.ok()) return status;
    const float* input = context.inputs[0].Data<const float>();
    const int64_t count = context.inputs[0].NumElements();
    double sum = 0.0;
    for (int64_t i = 0; i < count; ++i) {
      const double value = input[i];
      sum += value * value;
    }
    context.outputs[0].Data<float>()[0] = static_cast<float>(sum);
    return absl::OkStatus();
  }

 private:
  TensorSignature signature_;
};

class ClipCoefficientKernel : public Kernel {
 public:
  ClipCoefficientKernel(const KernelInit& init, float max_norm)
      : signature_(init), max_norm_(max_norm) {}

  absl::Status Compute(const KernelContext& context) override {
    absl::Status status = signature_.Check(kClipCoefficient, context);
    if (!status.ok()) return status;
    const float total_norm = std::sqrt(context.inputs[0].Data<const float>()[0]);
    // As PyTorch in float32: max_norm / (total_norm + 1e-6) is evaluated as
    // (total_norm + 1e-6).reciprocal() * max_norm, then clamped to at most 1 (NaN stays NaN).
    const float coefficient = (1.0f / (total_norm + kNormEpsilon)) * max_norm_;
    context.outputs[0].Data<float>()[0] =
        std::isnan(coefficient) ? coefficient : std::min(coefficient, 1.0f);
    return absl::OkStatus();
  }

 private:
  TensorSignature signature_;
  float max_norm_;
};

class ScaleByKernel : public Kernel {
 public:
  explicit ScaleByKernel(const KernelInit& init) : signature_(init) {}

  absl::Status Compute(const KernelContext& context) override {
    absl::Status status = signature_.Check(kScaleBy, context);
    if (!status.ok()) return status;
    const float* input = context.inputs[0].Data<const float>();
    // Read before the loop writes: the output may alias x.
    const float coefficient = context.inputs[1].Data<const float>()[0];
    float* output = context.outputs[0].Data<float>();
    const int64_t count = context.outputs[0].NumElements();
    for (int64_t i = 0; i < count; ++i) output[i] = input[i] * coefficient;
    return absl::OkStatus();
  }

 private:
  TensorSignature signature_;
};

absl::Status CheckOneElement(absl::string_view op_type, absl::string_view name,
                             const plan::TensorDesc& desc) {
  return CheckSameShape(op_type, "a one-element tensor", Shape({1}), name, Shape::FromProto(desc));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateSquaredNormKernel(const KernelInit& init) {
  absl::Status status = CheckArity(kSquaredNorm, init, 1, 1);
  if (!status.ok()) return status;
  status = CheckAllFloat32(kSquaredNorm, init);
  if (!status.ok()) return status;
  status = CheckOneElement(kSquaredNorm, "output", init.outputs[0]);
  if (!status.ok()) return status;
  return std::make_unique<SquaredNormKernel>(init);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateClipCoefficientKernel(const KernelInit& init) {
  absl::Status status = CheckArity(kClipCoefficient, init, 1, 1);
  if (!status.ok()) return status;
  status = CheckAllFloat32(kClipCoefficient, init);
  if (!status.ok()) return status;
  status = CheckOneElement(kClipCoefficient, "input 'total_squared_norm'", init.inputs[0]);
  if (!status.ok()) return status;
  status = CheckOneElement(kClipCoefficient, "output", init.outputs[0]);
  if (!status.ok()) return status;
  absl::StatusOr<double> max_norm =
      GetFiniteFloat(kClipCoefficient, Attributes(*init.conf), "max_norm");
  if (!max_norm.ok()) return max_norm.status();
  status = CheckPositive(kClipCoefficient, "max_norm", *max_norm);
  if (!status.ok()) return status;
  return std::make_unique<ClipCoefficientKernel>(init, static_cast<float>(*max_norm));
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateScaleByKernel(const KernelInit& init) {
  absl::Status status = CheckArity(kScaleBy, init, 2, 1);
  if (!status.ok()) return status;
  status = CheckAllFloat32(kScaleBy, init);
  if (!status.ok()) return status;
  status = CheckOneElement(kScaleBy, "input 'coefficient'", init.inputs[1]);
  if (!status.ok()) return status;
  status = CheckSameShape(kScaleBy, "input 'x'", Shape::FromProto(init.inputs[0]), "output",
                          Shape::FromProto(init.outputs[0]));
  if (!status.ok()) return status;
  return std::make_unique<ScaleByKernel>(init);
}

}  // namespace loom::cpu
