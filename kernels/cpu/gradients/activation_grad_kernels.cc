#include "kernels/cpu/gradients/activation_grad_kernels.h"

#include <cmath>
#include <cstdint>

#include "absl/status/status.h"
#include "core/tensor.h"
#include "kernels/cpu/kernel_checks.h"
#include "kernels/cpu/vector_math.h"

namespace loom::cpu {
namespace {

struct ReluGradFunction {
  static constexpr char kOpType[] = "relu_grad";
  static constexpr char kForwardName[] = "input 'x'";
  float operator()(float x, float dy) const { return x > 0.0f ? dy : 0.0f; }
};

// dx = dy (Phi(x) + x phi(x)), with the vectorised erf and exp.
struct GeluGradFunction {
  static constexpr char kOpType[] = "gelu_grad";
  static constexpr char kForwardName[] = "input 'x'";
};

LOOM_VECTORIZED_LOOP void GeluGradLoop(const float* x, const float* dy, float* dx, int64_t count) {
  constexpr float kInverseSquareRootOfTwo = 0.70710678118654752440f;
  constexpr float kInverseSquareRootOfTwoPi = 0.39894228040143267794f;
  for (int64_t i = 0; i < count; ++i) {
    const float value = x[i];
    const float cdf = 0.5f * (1.0f + VectorErf(value * kInverseSquareRootOfTwo));
    const float density = kInverseSquareRootOfTwoPi * VectorExp(-0.5f * value * value);
    dx[i] = dy[i] * (cdf + value * density);
  }
}

struct TanhGradFunction {
  static constexpr char kOpType[] = "tanh_grad";
  static constexpr char kForwardName[] = "input 'y'";
  float operator()(float y, float dy) const { return dy * (1.0f - y * y); }
};

// dx[i] = function(forward[i], dy[i]); `dx` may be `forward` or `dy`.
template <typename Function>
void ApplyActivationGrad(const Function& function, const float* forward, const float* dy, float* dx,
                         int64_t count) {
  for (int64_t i = 0; i < count; ++i) dx[i] = function(forward[i], dy[i]);
}

void ApplyActivationGrad(const GeluGradFunction&, const float* x, const float* dy, float* dx,
                         int64_t count) {
  GeluGradLoop(x, dy, dx, count);
}

template <typename Function>
class ActivationGradKernel : public Kernel {
 public:
  explicit ActivationGradKernel(const KernelInit& init) : signature_(init) {}

  absl::Status Compute(const KernelContext& context) override {
    absl::Status status = signature_.Check(Function::kOpType, context);
    if (!status.ok()) return status;
    const float* forward = context.inputs[0].Data<const float>();
    const float* dy = context.inputs[1].Data<const float>();
    float* dx = context.outputs[0].Data<float>();
    const int64_t count = context.outputs[0].NumElements();
    ApplyActivationGrad(Function{}, forward, dy, dx, count);
    return absl::OkStatus();
  }

 private:
  TensorSignature signature_;
};

template <typename Function>
absl::StatusOr<std::unique_ptr<Kernel>> CreateActivationGradKernel(const KernelInit& init) {
  constexpr const char* op_type = Function::kOpType;
  absl::Status status = CheckArity(op_type, init, 2, 1);
  if (!status.ok()) return status;
  status = CheckAllFloat32(op_type, init);
  if (!status.ok()) return status;
  const Shape forward = Shape::FromProto(init.inputs[0]);
  status = CheckSameShape(op_type, Function::kForwardName, forward, "input 'dy'",
                          Shape::FromProto(init.inputs[1]));
  if (!status.ok()) return status;
  status = CheckSameShape(op_type, Function::kForwardName, forward, "output 'dx'",
                          Shape::FromProto(init.outputs[0]));
  if (!status.ok()) return status;
  return std::make_unique<ActivationGradKernel<Function>>(init);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateReluGradKernel(const KernelInit& init) {
  return CreateActivationGradKernel<ReluGradFunction>(init);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateGeluGradKernel(const KernelInit& init) {
  return CreateActivationGradKernel<GeluGradFunction>(init);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateTanhGradKernel(const KernelInit& init) {
  return CreateActivationGradKernel<TanhGradFunction>(init);
}

}  // namespace loom::cpu
