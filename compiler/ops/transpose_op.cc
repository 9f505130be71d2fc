#include "compiler/ops/transpose_op.h"

#include "absl/strings/str_cat.h"
#include "compiler/ops/op_checks.h"

namespace loom::compiler {
namespace {

// The permutation attribute, checked against `rank`.
absl::StatusOr<std::vector<int64_t>> Permutation(const OpContext& context, int rank) {
  absl::StatusOr<std::vector<int64_t>> permutation =
      AttributesOf(context).GetIntList("permutation");
  if (!permutation.ok()) return permutation.status();
  std::vector<bool> seen(rank, false);
  bool valid = static_cast<int>(permutation->size()) == rank;
  for (int64_t axis : *permutation) {
    if (!valid) break;
    valid = axis >= 0 && axis < rank && !seen[axis];
    if (valid) seen[axis] = true;
  }
  if (!valid) {
    std::vector<int64_t> identity;
    for (int axis = 0; axis < rank; ++axis) identity.push_back(axis);
    return OpError(absl::StrCat(
        "permutation ", FormatList(*permutation), " is not a permutation of ", FormatList(identity),
        " (the axes of the input ", context.inputs[0].shape.ToString(), ")"));
  }
  return permutation;
}

class TransposeOp final : public OpDefinition {
 public:
  absl::StatusOr<std::vector<TensorType>> InferTypes(const OpContext& context) const override {
    if (absl::Status status = CheckInputCount(context, 1, 1); !status.ok()) return status;
    if (absl::Status status = CheckKnownAttributes(context, {"permutation"}); !status.ok()) {
      return status;
    }
    const Shape& input = context.inputs[0].shape;
    absl::StatusOr<std::vector<int64_t>> permutation = Permutation(context, input.rank());
    if (!permutation.ok()) return permutation.status();
    std::vector<int64_t> dimensions;
    for (int64_t axis : *permutation) dimensions.push_back(input.dimension(axis));
    return std::vector<TensorType>{TensorType{Shape(dimensions), context.inputs[0].data_type}};
  }

  std::vector<SbpSignature> SbpSignatures(const OpContext& context, int64_t degree) const override {
    const Shape& input = context.inputs[0].shape;
    std::vector<int64_t> permutation = *Permutation(context, input.rank());
    std::vector<SbpSignature> signatures;
    for (int output_axis = 0; output_axis < input.rank(); ++output_axis) {
      const int input_axis = static_cast<int>(permutation[output_axis]);
      if (input.dimension(input_axis) < degree) continue;
      signatures.push_back({{Sbp::Split(input_axis)}, {Sbp::Split(output_axis)}});
    }
    signatures.push_back({{Sbp::PartialSum()}, {Sbp::PartialSum()}});
    signatures.push_back({{Sbp::Broadcast()}, {Sbp::Broadcast()}});
    return signatures;
  }

  absl::StatusOr<plan::KernelConf> Lower(const std::string& op_type,
                                         const LoweringContext& context) const override {
    absl::StatusOr<std::vector<int64_t>> permutation =
        Permutation(*context.op, context.op->inputs[0].shape.rank());
    if (!permutation.ok()) return permutation.status();
    plan::KernelConf conf = EmptyKernelConf(op_type);
    (*conf.mutable_attributes())["permutation"] = IntListAttribute(*permutation);
    return conf;
  }
};

}  // namespace

std::unique_ptr<OpDefinition> MakeTransposeOp() { return std::make_unique<TransposeOp>(); }

}  // namespace loom::compiler
