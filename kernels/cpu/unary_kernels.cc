#include "kernels/cpu/unary_kernels.h"

#include <cmath>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/tensor.h"
#include "kernels/attributes.h"
#include "kernels/cpu/kernel_checks.h"
#include "kernels/cpu/vector_math.h"

namespace loom::cpu {
namespace {

struct ReluFunction {
  static constexpr char kOpType[] = "relu";
  float operator()(float x) const { return x > 0.0f ? x : 0.0f; }
};

// gelu(x) = x/2 (1 + erf(x / sqrt(2))), with the vectorised erf (as PyTorch's CPU GELU).
struct GeluFunction {
  static constexpr char kOpType[] = "gelu";
};

LOOM_VECTORIZED_LOOP void GeluLoop(const float* input, float* output, int64_t count) {
  constexpr float kInverseSquareRootOfTwo = 0.70710678118654752440f;
  for (int64_t i = 0; i < count; ++i) {
    const float x = input[i];
    output[i] = 0.5f * x * (1.0f + VectorErf(x * kInverseSquareRootOfTwo));
  }
}

struct TanhFunction {
  static constexpr char kOpType[] = "tanh";
  float operator()(float x) const { return std::tanh(x); }
};

struct ScaleFunction {
  static constexpr char kOpType[] = "scale";
  float scale = 1.0f;
  float operator()(float x) const { return x * scale; }
};

// output[i] = function(input[i]); `output` may be `input`.
template <typename Function>
void ApplyUnary(const Function& function, const float* input, float* output, int64_t count) {
  for (int64_t i = 0; i < count; ++i) output[i] = function(input[i]);
}

void ApplyUnary(const GeluFunction&, const float* input, float* output, int64_t count) {
  GeluLoop(input, output, count);
}

template <typename Function>
class UnaryKernel : public Kernel {
 public:
  UnaryKernel(const KernelInit& init, Function function) : signature_(init), function_(function) {}

  absl::Status Compute(const KernelContext& context) override {
    absl::Status status = signature_.Check(Function::kOpType, context);
    if (!status.ok()) return status;
    const float* input = context.inputs[0].Data<const float>();
    float* output = context.outputs[0].Data<float>();
    const int64_t count = context.outputs[0].NumElements();
    ApplyUnary(function_, input, output, count);
    return absl::OkStatus();
  }

 private:
  TensorSignature signature_;
  Function function_;
};

// One float32 input, one float32 output of the same shape.
absl::Status CheckUnary(const char* op_type, const KernelInit& init) {
  absl::Status status = CheckArity(op_type, init, 1, 1);
  if (!status.ok()) return status;
  status = CheckAllFloat32(op_type, init);
  if (!status.ok()) return status;
  return CheckSameShape(op_type, "input", Shape::FromProto(init.inputs[0]), "output",
                        Shape::FromProto(init.outputs[0]));
}

template <typename Function>
absl::StatusOr<std::unique_ptr<Kernel>> CreateUnaryKernel(const KernelInit& init,
                                                          Function function = Function()) {
  absl::Status status = CheckUnary(Function::kOpType, init);
  if (!status.ok()) return status;
  return std::make_unique<UnaryKernel<Function>>(init, function);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateReluKernel(const KernelInit& init) {
  return CreateUnaryKernel<ReluFunction>(init);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateGeluKernel(const KernelInit& init) {
  return CreateUnaryKernel<GeluFunction>(init);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateTanhKernel(const KernelInit& init) {
  return CreateUnaryKernel<TanhFunction>(init);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateScaleKernel(const KernelInit& init) {
  absl::Status status = CheckUnary(ScaleFunction::kOpType, init);
  if (!status.ok()) return status;
  absl::StatusOr<double> scale = Attributes(*init.conf).GetFloat("scale");
  if (!scale.ok()) return WithOpType(ScaleFunction::kOpType, scale.status());
  if (!std::isfinite(*scale)) {
    return absl::InvalidArgumentError(
        absl::StrCat("scale: attribute 'scale' must be finite, got ", *scale));
  }
  return CreateUnaryKernel<ScaleFunction>(init, ScaleFunction{static_cast<float>(*scale)});
}

}  // namespace loom::cpu
