#include "compiler/ops/moe_slot_ops.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/ops/op_checks.h"

namespace loom::compiler {
namespace {

// slot_token (input `index`) is int32 [B, E, C] of `groups` groups.
absl::Status CheckSlots(const OpContext& context, int index, int64_t groups) {
  if (absl::Status status = CheckInputDataType(context, index, "slot_token", {plan::INT32});
      !status.ok()) {
    return status;
  }
  const Shape& slots = context.inputs[index].shape;
  if (slots.rank() != 3 || slots.dimension(0) != groups) {
    return OpError(absl::StrCat("input 'slot_token' must be [groups, experts, capacity] with ",
                                groups, " groups, not ", context.inputs[index].ToString()));
  }
  return absl::OkStatus();
}

// Input `index` (`name`) is float32 [B, E, C, W] matching slot_token (input `slots`).
absl::Status CheckSlotRows(const OpContext& context, int index, const std::string& name,
                           int slots) {
  if (absl::Status status = CheckInputDataType(context, index, name, {plan::FLOAT32});
      !status.ok()) {
    return status;
  }
  const Shape& rows = context.inputs[index].shape;
  const Shape& slot_shape = context.inputs[slots].shape;
  bool valid = rows.rank() == 4;
  for (int axis = 0; valid && axis < 3; ++axis) {
    valid = rows.dimension(axis) == slot_shape.dimension(axis);
  }
  if (!valid) {
    return OpError(absl::StrCat("input '", name, "' must be [groups, experts, capacity, width] of ",
                                "slot_token ", context.inputs[slots].ToString(), ", not ",
                                context.inputs[index].ToString()));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ReadTokens(const OpContext& context) {
  absl::StatusOr<int64_t> tokens = AttributesOf(context).GetInt("tokens");
  if (!tokens.ok()) return tokens.status();
  if (*tokens < 1) {
    return OpError(
        absl::StrCat("attribute 'tokens' (tokens per group) must be >= 1, not ", *tokens));
  }
  return tokens;
}

absl::StatusOr<plan::KernelConf> LowerWithTokens(const std::string& op_type, const OpContext& op) {
  absl::StatusOr<int64_t> tokens = ReadTokens(op);
  if (!tokens.ok()) return tokens.status();
  plan::KernelConf conf = EmptyKernelConf(op_type);
  (*conf.mutable_attributes())["tokens"] = IntAttribute(*tokens);
  return conf;
}

class MoeDispatchOp final : public OpDefinition {
 public:
  absl::StatusOr<std::vector<TensorType>> InferTypes(const OpContext& context) const override {
    if (absl::Status status = CheckInputCount(context, 2, 2); !status.ok()) return status;
    if (absl::Status status = CheckKnownAttributes(context, {}); !status.ok()) return status;
    if (absl::Status status = CheckInputDataType(context, 0, "x", {plan::FLOAT32}); !status.ok()) {
      return status;
    }
    const Shape& x = context.inputs[0].shape;
    if (x.rank() != 3) {
      return OpError(absl::StrCat("input 'x' must be [groups, tokens, width], not ",
                                  context.inputs[0].ToString()));
    }
    if (absl::Status status = CheckSlots(context, 1, x.dimension(0)); !status.ok()) return status;
    const Shape& slots = context.inputs[1].shape;
    return std::vector<TensorType>{
        TensorType{Shape({x.dimension(0), slots.dimension(1), slots.dimension(2), x.dimension(2)}),
                   plan::FLOAT32}};
  }

  std::vector<SbpSignature> SbpSignatures(const OpContext& context, int64_t degree) const override {
    std::vector<SbpSignature> signatures;
    const Sbp b = Sbp::Broadcast();
    if (context.inputs[0].shape.dimension(0) >= degree) {
      signatures.push_back({{Sbp::Split(0), Sbp::Split(0)}, {Sbp::Split(0)}});
    }
    if (context.inputs[0].shape.dimension(2) >= degree) {
      signatures.push_back({{Sbp::Split(2), b}, {Sbp::Split(3)}});
    }
    signatures.push_back({{Sbp::PartialSum(), b}, {Sbp::PartialSum()}});
    signatures.push_back({{b, b}, {b}});
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

// moe_combine (weighted: 3 inputs) and moe_dispatch_grad (2 inputs): slots scattered back to
// their tokens.
class MoeScatterOp final : public OpDefinition {
 public:
  explicit MoeScatterOp(bool weighted) : weighted_(weighted) {}

  absl::StatusOr<std::vector<TensorType>> InferTypes(const OpContext& context) const override {
    const int inputs = weighted_ ? 3 : 2;
    if (absl::Status status = CheckInputCount(context, inputs, inputs); !status.ok()) {
      return status;
    }
    if (absl::Status status = CheckKnownAttributes(context, {"tokens"}); !status.ok()) {
      return status;
    }
    const std::string rows_name = weighted_ ? "expert_out" : "dy";
    if (absl::Status status = CheckInputDataType(context, 0, rows_name, {plan::FLOAT32});
        !status.ok()) {
      return status;
    }
    if (context.inputs[0].shape.rank() != 4) {
      return OpError(absl::StrCat("input '", rows_name,
                                  "' must be [groups, experts, capacity, width], not ",
                                  context.inputs[0].ToString()));
    }
    const Shape& rows = context.inputs[0].shape;
    if (absl::Status status = CheckSlots(context, 1, rows.dimension(0)); !status.ok()) {
      return status;
    }
    if (absl::Status status = CheckSlotRows(context, 0, rows_name, 1); !status.ok()) return status;
    if (weighted_) {
      if (absl::Status status = CheckInputDataType(context, 2, "slot_weight", {plan::FLOAT32});
          !status.ok()) {
        return status;
      }
      if (context.inputs[2].shape != context.inputs[1].shape) {
        return OpError(absl::StrCat("input 'slot_weight' ", context.inputs[2].ToString(),
                                    " must have slot_token's shape ",
                                    context.inputs[1].ToString()));
      }
    }
    absl::StatusOr<int64_t> tokens = ReadTokens(context);
    if (!tokens.ok()) return tokens.status();
    return std::vector<TensorType>{
        TensorType{Shape({rows.dimension(0), *tokens, rows.dimension(3)}), plan::FLOAT32}};
  }

  std::vector<SbpSignature> SbpSignatures(const OpContext& context, int64_t degree) const override {
    std::vector<SbpSignature> signatures;
    const Sbp b = Sbp::Broadcast();
    auto with_weight = [&](std::vector<Sbp> inputs, Sbp weight) {
      if (weighted_) inputs.push_back(weight);
      return inputs;
    };
    if (context.inputs[0].shape.dimension(0) >= degree) {
      const Sbp split = Sbp::Split(0);
      signatures.push_back({with_weight({split, split}, split), {split}});
    }
    if (context.inputs[0].shape.dimension(3) >= degree) {
      signatures.push_back({with_weight({Sbp::Split(3), b}, b), {Sbp::Split(2)}});
    }
    signatures.push_back({with_weight({Sbp::PartialSum(), b}, b), {Sbp::PartialSum()}});
    signatures.push_back({with_weight({b, b}, b), {b}});
    return signatures;
  }

  double Flops(const OpContext& context) const override {
    return (weighted_ ? 2.0 : 1.0) * static_cast<double>(context.inputs[0].shape.NumElements());
  }

  absl::StatusOr<plan::KernelConf> Lower(const std::string& op_type,
                                         const LoweringContext& context) const override {
    return LowerWithTokens(op_type, *context.op);
  }

 private:
  bool weighted_;
};

}  // namespace

std::unique_ptr<OpDefinition> MakeMoeDispatchOp() { return std::make_unique<MoeDispatchOp>(); }
std::unique_ptr<OpDefinition> MakeMoeDispatchGradOp() {
  return std::make_unique<MoeScatterOp>(/*weighted=*/false);
}
std::unique_ptr<OpDefinition> MakeMoeCombineOp() {
  return std::make_unique<MoeScatterOp>(/*weighted=*/true);
}

}  // namespace loom::compiler
