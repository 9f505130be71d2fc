#include "compiler/ops/concat_op.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "compiler/ops/op_checks.h"
#include "core/checked_arithmetic.h"
#include "core/data_type.h"

namespace loom::compiler {
namespace {

absl::StatusOr<int> Axis(const OpContext& context) {
  absl::StatusOr<int64_t> axis = AttributesOf(context).GetInt("axis");
  if (!axis.ok()) return axis.status();
  return NormalizeAxis(*axis, context.inputs[0].shape.rank(), "axis");
}

class ConcatOp final : public OpDefinition {
 public:
  absl::StatusOr<std::vector<TensorType>> InferTypes(const OpContext& context) const override {
    if (absl::Status status = CheckInputCount(context, 1, -1); !status.ok()) return status;
    if (absl::Status status = CheckKnownAttributes(context, {"axis"}); !status.ok()) {
      return status;
    }
    absl::StatusOr<int> axis = Axis(context);
    if (!axis.ok()) return axis.status();
    const TensorType& first = context.inputs[0];
    std::vector<int64_t> dimensions(first.shape.dimensions().begin(),
                                    first.shape.dimensions().end());
    for (size_t index = 1; index < context.inputs.size(); ++index) {
      const TensorType& input = context.inputs[index];
      if (input.data_type != first.data_type) {
        return OpError(absl::StrCat("input ", index, " is ", DataTypeName(input.data_type),
                                    " but input 0 is ", DataTypeName(first.data_type)));
      }
      bool compatible = input.shape.rank() == first.shape.rank();
      for (int other = 0; compatible && other < first.shape.rank(); ++other) {
        compatible = other == *axis || input.shape.dimension(other) == first.shape.dimension(other);
      }
      if (!compatible) {
        return OpError(absl::StrCat("input ", index, " ", input.shape.ToString(),
                                    " differs from input 0 ", first.shape.ToString(),
                                    " off the concatenation axis ", *axis));
      }
      std::optional<int64_t> extent = CheckedAdd(dimensions[*axis], input.shape.dimension(*axis));
      if (!extent.has_value() || *extent > kMaxTensorElements) {
        return OpError(absl::StrCat("the concatenation axis ", *axis, " of its ",
                                    context.inputs.size(), " inputs has more than 2^48 (",
                                    kMaxTensorElements, ") elements, the most a tensor may have"));
      }
      dimensions[*axis] = *extent;
    }
    return std::vector<TensorType>{TensorType{Shape(dimensions), first.data_type}};
  }

  std::vector<SbpSignature> SbpSignatures(const OpContext& context, int64_t degree) const override {
    const int concat_axis = *Axis(context);
    const Shape& output = context.outputs[0].shape;
    const size_t count = context.inputs.size();
    std::vector<SbpSignature> signatures;
    for (int axis = 0; axis < output.rank(); ++axis) {
      if (axis == concat_axis || output.dimension(axis) < degree) continue;
      signatures.push_back({std::vector<Sbp>(count, Sbp::Split(axis)), {Sbp::Split(axis)}});
    }
    signatures.push_back({std::vector<Sbp>(count, Sbp::PartialSum()), {Sbp::PartialSum()}});
    signatures.push_back({std::vector<Sbp>(count, Sbp::Broadcast()), {Sbp::Broadcast()}});
    return signatures;
  }

  absl::StatusOr<plan::KernelConf> Lower(const std::string& op_type,
                                         const LoweringContext& context) const override {
    absl::StatusOr<int> axis = Axis(*context.op);
    if (!axis.ok()) return axis.status();
    plan::KernelConf conf = EmptyKernelConf(op_type);
    (*conf.mutable_attributes())["axis"] = IntAttribute(*axis);
    return conf;
  }
};

}  // namespace

std::unique_ptr<OpDefinition> MakeConcatOp() { return std::make_unique<ConcatOp>(); }

}  // namespace loom::compiler
