#include "compiler/ops/moe_route_op.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/ops/op_checks.h"

namespace loom::compiler {
namespace {

// k and capacity_factor, checked against probs [B, T, E].
struct RouteSettings {
  int64_t k = 0;
  double capacity_factor = 0;
};

absl::StatusOr<RouteSettings> ReadRouteSettings(const OpContext& context, int64_t experts) {
  const OpAttributes attributes = AttributesOf(context);
  RouteSettings settings;
  absl::StatusOr<int64_t> k = attributes.GetInt("k");
  if (!k.ok()) return k.status();
  if (*k != 1 && *k != 2) {
    return OpError(absl::StrCat("attribute 'k' must be 1 or 2 (experts per token), not ", *k));
  }
  if (*k > experts) {
    return OpError(absl::StrCat("attribute 'k' = ", *k, " is more than the ", experts,
                                " experts (probs' last axis)"));
  }
  settings.k = *k;
  if (!attributes.Has("capacity_factor")) {
    return OpError("attribute 'capacity_factor' is required (e.g. 1.25)");
  }
  absl::StatusOr<double> factor = attributes.GetFloat("capacity_factor", 0);
  if (!factor.ok()) return factor.status();
  if (!std::isfinite(*factor) || !(*factor > 0)) {
    return OpError(
        absl::StrCat("attribute 'capacity_factor' must be finite and > 0, not ", *factor));
  }
  settings.capacity_factor = *factor;
  return settings;
}

absl::Status CheckProbabilities(const OpContext& context, int index) {
  if (absl::Status status = CheckInputDataType(context, index, "probs", {plan::FLOAT32});
      !status.ok()) {
    return status;
  }
  if (context.inputs[index].shape.rank() != 3) {
    return OpError(absl::StrCat("input 'probs' must be [groups, tokens, experts], not ",
                                context.inputs[index].ToString()));
  }
  return absl::OkStatus();
}

class MoeRouteOp final : public OpDefinition {
 public:
  absl::StatusOr<std::vector<TensorType>> InferTypes(const OpContext& context) const override {
    if (absl::Status status = CheckInputCount(context, 1, 1); !status.ok()) return status;
    if (absl::Status status = CheckKnownAttributes(context, {"k", "capacity_factor"});
        !status.ok()) {
      return status;
    }
    if (absl::Status status = CheckProbabilities(context, 0); !status.ok()) return status;
    const Shape& probs = context.inputs[0].shape;
    const int64_t groups = probs.dimension(0), tokens = probs.dimension(1),
                  experts = probs.dimension(2);
    if (experts < 1 || tokens < 1) {
      return OpError(absl::StrCat("input 'probs' ", context.inputs[0].ToString(),
                                  " needs at least one token and one expert"));
    }
    absl::StatusOr<RouteSettings> settings = ReadRouteSettings(context, experts);
    if (!settings.ok()) return settings.status();
    const int64_t capacity = MoeCapacity(settings->capacity_factor, tokens, settings->k, experts);
    return std::vector<TensorType>{
        TensorType{Shape({groups, experts, capacity}), plan::INT32},
        TensorType{Shape({groups, experts, capacity}), plan::FLOAT32},
        TensorType{Shape({groups, experts}), plan::FLOAT32},
        TensorType{Shape({groups}), plan::FLOAT32},
    };
  }

  std::vector<SbpSignature> SbpSignatures(const OpContext& context, int64_t degree) const override {
    std::vector<SbpSignature> signatures;
    const Sbp split = Sbp::Split(0), b = Sbp::Broadcast();
    if (context.inputs[0].shape.dimension(0) >= degree) {
      signatures.push_back({{split}, {split, split, split, split}});
    }
    signatures.push_back({{b}, {b, b, b, b}});
    return signatures;
  }

  double Flops(const OpContext& context) const override {
    return 2.0 * static_cast<double>(context.inputs[0].shape.NumElements());
  }

  absl::StatusOr<plan::KernelConf> Lower(const std::string& op_type,
                                         const LoweringContext& context) const override {
    absl::StatusOr<RouteSettings> settings =
        ReadRouteSettings(*context.op, context.op->inputs[0].shape.dimension(2));
    if (!settings.ok()) return settings.status();
    // The kernel takes the capacity from its outputs' shape.
    plan::KernelConf conf = EmptyKernelConf(op_type);
    (*conf.mutable_attributes())["k"] = IntAttribute(settings->k);
    return conf;
  }
};

class MoeRouteGradOp final : public OpDefinition {
 public:
  absl::StatusOr<std::vector<TensorType>> InferTypes(const OpContext& context) const override {
    if (absl::Status status = CheckInputCount(context, 3, 3); !status.ok()) return status;
    if (absl::Status status = CheckKnownAttributes(context, {"k"}); !status.ok()) return status;
    if (absl::Status status = CheckProbabilities(context, 0); !status.ok()) return status;
    if (absl::Status status = CheckInputDataType(context, 1, "slot_token", {plan::INT32});
        !status.ok()) {
      return status;
    }
    if (absl::Status status = CheckInputDataType(context, 2, "dslot_weight", {plan::FLOAT32});
        !status.ok()) {
      return status;
    }
    const Shape& probs = context.inputs[0].shape;
    const Shape& slots = context.inputs[1].shape;
    if (slots.rank() != 3 || slots.dimension(0) != probs.dimension(0) ||
        slots.dimension(1) != probs.dimension(2) || context.inputs[2].shape != slots) {
      return OpError(absl::StrCat("slot_token ", context.inputs[1].ToString(), " and dslot_weight ",
                                  context.inputs[2].ToString(),
                                  " must both be [groups, experts, capacity] of probs ",
                                  context.inputs[0].ToString()));
    }
    absl::StatusOr<int64_t> k = AttributesOf(context).GetInt("k");
    if (!k.ok()) return k.status();
    if (*k < 1 || *k > probs.dimension(2)) {
      return OpError(absl::StrCat("attribute 'k' must be in [1, experts], not ", *k));
    }
    return std::vector<TensorType>{context.inputs[0]};
  }

  std::vector<SbpSignature> SbpSignatures(const OpContext& context, int64_t degree) const override {
    std::vector<SbpSignature> signatures;
    const Sbp split = Sbp::Split(0), b = Sbp::Broadcast();
    if (context.inputs[0].shape.dimension(0) >= degree) {
      signatures.push_back({{split, split, split}, {split}});
    }
    signatures.push_back({{b, b, Sbp::PartialSum()}, {Sbp::PartialSum()}});
    signatures.push_back({{b, b, b}, {b}});
    return signatures;
  }

  double Flops(const OpContext& context) const override {
    return 4.0 * static_cast<double>(context.inputs[2].shape.NumElements());
  }

  absl::StatusOr<plan::KernelConf> Lower(const std::string& op_type,
                                         const LoweringContext& context) const override {
    absl::StatusOr<int64_t> k = AttributesOf(*context.op).GetInt("k");
    if (!k.ok()) return k.status();
    plan::KernelConf conf = EmptyKernelConf(op_type);
    (*conf.mutable_attributes())["k"] = IntAttribute(*k);
    return conf;
  }
};

}  // namespace

int64_t MoeCapacity(double capacity_factor, int64_t tokens, int64_t k, int64_t experts) {
  const double slots = std::ceil(capacity_factor * static_cast<double>(tokens) *
                                 static_cast<double>(k) / static_cast<double>(experts));
  // An expert takes a token at most once, so slots beyond `tokens` would always be empty.
  return std::clamp<int64_t>(static_cast<int64_t>(std::min(slots, 1e15)), 1, tokens);
}

std::unique_ptr<OpDefinition> MakeMoeRouteOp() { return std::make_unique<MoeRouteOp>(); }
std::unique_ptr<OpDefinition> MakeMoeRouteGradOp() { return std::make_unique<MoeRouteGradOp>(); }

}  // namespace loom::compiler
