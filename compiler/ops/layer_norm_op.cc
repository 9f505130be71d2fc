#include "compiler/ops/layer_norm_op.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "compiler/ops/op_checks.h"

namespace loom::compiler {
namespace {

constexpr double kDefaultEpsilon = 1e-5;

class LayerNormOp final : public OpDefinition {
 public:
  absl::StatusOr<std::vector<TensorType>> InferTypes(const OpContext& context) const override {
    if (absl::Status status = CheckInputCount(context, 3, 3); !status.ok()) return status;
    if (absl::Status status = CheckKnownAttributes(context, {"epsilon"}); !status.ok()) {
      return status;
    }
    const char* const names[] = {"x", "gamma", "beta"};
    for (int index = 0; index < 3; ++index) {
      if (absl::Status status = CheckInputDataType(context, index, names[index], {plan::FLOAT32});
          !status.ok()) {
        return status;
      }
    }
    if (absl::Status status = CheckInputMinimumRank(context, 0, "x", 1); !status.ok()) {
      return status;
    }
    const Shape& x = context.inputs[0].shape;
    const Shape expected({x.dimension(x.rank() - 1)});
    for (int index = 1; index < 3; ++index) {
      if (context.inputs[index].shape != expected) {
        return OpError(absl::StrCat(names[index], " must have shape ", expected.ToString(),
                                    " (the last axis of x ", x.ToString(), "), not ",
                                    context.inputs[index].shape.ToString()));
      }
    }
    absl::StatusOr<double> epsilon = Epsilon(context);
    if (!epsilon.ok()) return epsilon.status();
    if (!(std::isfinite(*epsilon) && *epsilon >= 0.0)) {
      return OpError(absl::StrCat("attribute 'epsilon' must be finite and >= 0, not ", *epsilon));
    }
    return std::vector<TensorType>{context.inputs[0]};
  }

  std::vector<SbpSignature> SbpSignatures(const OpContext& context, int64_t degree) const override {
    const Shape& x = context.inputs[0].shape;
    std::vector<SbpSignature> signatures;
    for (int axis = 0; axis + 1 < x.rank(); ++axis) {
      if (x.dimension(axis) < degree) continue;
      signatures.push_back(
          {{Sbp::Split(axis), Sbp::Broadcast(), Sbp::Broadcast()}, {Sbp::Split(axis)}});
    }
    signatures.push_back(
        {{Sbp::Broadcast(), Sbp::Broadcast(), Sbp::Broadcast()}, {Sbp::Broadcast()}});
    return signatures;
  }

  // mean, variance, normalise, scale and shift: about eight operations per element.
  double Flops(const OpContext& context) const override {
    return 8.0 * static_cast<double>(context.outputs[0].shape.NumElements());
  }

  absl::StatusOr<plan::KernelConf> Lower(const std::string& op_type,
                                         const LoweringContext& context) const override {
    absl::StatusOr<double> epsilon = Epsilon(*context.op);
    if (!epsilon.ok()) return epsilon.status();
    plan::KernelConf conf = EmptyKernelConf(op_type);
    (*conf.mutable_attributes())["epsilon"] = FloatAttribute(*epsilon);
    return conf;
  }

 private:
  static absl::StatusOr<double> Epsilon(const OpContext& context) {
    return AttributesOf(context).GetFloat("epsilon", kDefaultEpsilon);
  }
};

}  // namespace

std::unique_ptr<OpDefinition> MakeLayerNormOp() { return std::make_unique<LayerNormOp>(); }

}  // namespace loom::compiler
