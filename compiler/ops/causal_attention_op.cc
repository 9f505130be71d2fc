#include "compiler/ops/causal_attention_op.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/ops/op_checks.h"

namespace loom::compiler {
namespace {

absl::StatusOr<double> Scale(const OpContext& context) { return CausalAttentionScale(context); }

class CausalAttentionOp final : public OpDefinition {
 public:
  absl::StatusOr<std::vector<TensorType>> InferTypes(const OpContext& context) const override {
    if (absl::Status status = CheckInputCount(context, 3, 3); !status.ok()) return status;
    if (absl::Status status = CheckKnownAttributes(context, {"scale"}); !status.ok()) {
      return status;
    }
    const char* const names[] = {"q", "k", "v"};
    if (absl::Status status = CheckCausalAttentionDataTypes(context, names); !status.ok()) {
      return status;
    }
    const Shape& q = context.inputs[0].shape;
    if (q.rank() != 4) {
      return OpError(absl::StrCat(
          "q must have rank 4 ([batch, heads, tokens, head dimension]), not ", q.ToString()));
    }
    for (int index = 1; index < 3; ++index) {
      if (context.inputs[index].shape != q) {
        return OpError(absl::StrCat(names[index], " ", context.inputs[index].shape.ToString(),
                                    " must have the shape of q ", q.ToString()));
      }
    }
    if (absl::Status status = CheckCausalAttentionScores(q); !status.ok()) return status;
    absl::StatusOr<double> scale = Scale(context);
    if (!scale.ok()) return scale.status();
    if (!std::isfinite(*scale)) {
      return OpError(absl::StrCat("attribute 'scale' must be finite, not ", *scale));
    }
    return std::vector<TensorType>{context.inputs[0]};
  }

  std::vector<SbpSignature> SbpSignatures(const OpContext& context, int64_t degree) const override {
    const Shape& q = context.inputs[0].shape;
    std::vector<SbpSignature> signatures;
    for (int axis : {0, 1}) {
      if (q.dimension(axis) < degree) continue;
      signatures.push_back({std::vector<Sbp>(3, Sbp::Split(axis)), {Sbp::Split(axis)}});
    }
    signatures.push_back({std::vector<Sbp>(3, Sbp::Broadcast()), {Sbp::Broadcast()}});
    return signatures;
  }

  // q k^T and (scores) v: 2 * B * H * T * T * Dh each.
  double Flops(const OpContext& context) const override {
    const Shape& q = context.inputs[0].shape;
    return 4.0 * static_cast<double>(q.dimension(0)) * static_cast<double>(q.dimension(1)) *
           static_cast<double>(q.dimension(2)) * static_cast<double>(q.dimension(2)) *
           static_cast<double>(q.dimension(3));
  }

  absl::StatusOr<plan::KernelConf> Lower(const std::string& op_type,
                                         const LoweringContext& context) const override {
    absl::StatusOr<double> scale = Scale(*context.op);
    if (!scale.ok()) return scale.status();
    plan::KernelConf conf = EmptyKernelConf(op_type);
    (*conf.mutable_attributes())["scale"] = FloatAttribute(*scale);
    return conf;
  }
};

}  // namespace

absl::StatusOr<double> CausalAttentionScale(const OpContext& context) {
  const int64_t head_dimension = context.inputs[0].shape.dimension(3);
  return AttributesOf(context).GetFloat(
      "scale", head_dimension > 0 ? 1.0 / std::sqrt(static_cast<double>(head_dimension)) : 1.0);
}

std::unique_ptr<OpDefinition> MakeCausalAttentionOp() {
  return std::make_unique<CausalAttentionOp>();
}

absl::Status CheckCausalAttentionDataTypes(const OpContext& context,
                                           absl::Span<const char* const> names) {
  int index = 0;
  for (const char* name : names) {
    // q is float32 or bfloat16; the others are what q is.
    absl::Status status =
        index == 0 ? CheckInputDataType(context, 0, name, {plan::FLOAT32, plan::BFLOAT16})
                   : CheckInputDataType(context, index, name, {context.inputs[0].data_type});
    if (!status.ok()) return status;
    ++index;
  }
  return absl::OkStatus();
}

absl::Status CheckCausalAttentionScores(const Shape& q) {
  const std::vector<int64_t> scores = {q.dimension(0), q.dimension(1), q.dimension(2),
                                       q.dimension(2)};
  if (absl::StatusOr<int64_t> bytes = CheckedTensorBytes(scores, plan::FLOAT32); !bytes.ok()) {
    return OpError(
        absl::StrCat("the attention scores of q ", q.ToString(), ": ", bytes.status().message()));
  }
  return absl::OkStatus();
}

}  // namespace loom::compiler
