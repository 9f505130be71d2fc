#include "compiler/ops/bias_add_op.h"

#include "absl/strings/str_cat.h"
#include "compiler/ops/op_checks.h"

namespace loom::compiler {
namespace {

class BiasAddOp final : public OpDefinition {
 public:
  absl::StatusOr<std::vector<TensorType>> InferTypes(const OpContext& context) const override {
    if (absl::Status status = CheckInputCount(context, 2, 2); !status.ok()) return status;
    if (absl::Status status = CheckKnownAttributes(context, {}); !status.ok()) return status;
    if (absl::Status status = CheckInputDataType(context, 0, "x", {plan::FLOAT32}); !status.ok()) {
      return status;
    }
    if (absl::Status status = CheckInputDataType(context, 1, "bias", {plan::FLOAT32});
        !status.ok()) {
      return status;
    }
    if (absl::Status status = CheckInputMinimumRank(context, 0, "x", 1); !status.ok()) {
      return status;
    }
    const Shape& x = context.inputs[0].shape;
    const Shape& bias = context.inputs[1].shape;
    const int64_t row_length = x.dimension(x.rank() - 1);
    if (bias != Shape({row_length})) {
      return OpError(absl::StrCat("bias must have shape [", row_length, "] (the last axis of x ",
                                  x.ToString(), "), not ", bias.ToString()));
    }
    return std::vector<TensorType>{context.inputs[0]};
  }

  std::vector<SbpSignature> SbpSignatures(const OpContext& context, int64_t degree) const override {
    const Shape& x = context.inputs[0].shape;
    const int last = x.rank() - 1;
    std::vector<SbpSignature> signatures;
    for (int axis = 0; axis < last; ++axis) {
      if (x.dimension(axis) < degree) continue;
      signatures.push_back({{Sbp::Split(axis), Sbp::Broadcast()}, {Sbp::Split(axis)}});
    }
    if (x.dimension(last) >= degree) {
      signatures.push_back({{Sbp::Split(last), Sbp::Split(0)}, {Sbp::Split(last)}});
    }
    signatures.push_back({{Sbp::PartialSum(), Sbp::PartialSum()}, {Sbp::PartialSum()}});
    signatures.push_back({{Sbp::Broadcast(), Sbp::Broadcast()}, {Sbp::Broadcast()}});
    return signatures;
  }

  double Flops(const OpContext& context) const override {
    return static_cast<double>(context.outputs[0].shape.NumElements());
  }

  absl::StatusOr<plan::KernelConf> Lower(const std::string& op_type,
                                         const LoweringContext& context) const override {
    return EmptyKernelConf(op_type);
  }
};

}  // namespace

std::unique_ptr<OpDefinition> MakeBiasAddOp() { return std::make_unique<BiasAddOp>(); }

}  // namespace loom::compiler
