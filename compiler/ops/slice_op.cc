#include "compiler/ops/slice_op.h"

#include "absl/strings/str_cat.h"
#include "compiler/ops/op_checks.h"

namespace loom::compiler {
namespace {

struct SliceBounds {
  std::vector<int64_t> begin;
  std::vector<int64_t> end;
};

// The begin and end attributes, checked against `input`.
absl::StatusOr<SliceBounds> Bounds(const OpContext& context) {
  const Shape& input = context.inputs[0].shape;
  OpAttributes attributes = AttributesOf(context);
  SliceBounds bounds;
  absl::StatusOr<std::vector<int64_t>> begin = attributes.GetIntList("begin");
  if (!begin.ok()) return begin.status();
  absl::StatusOr<std::vector<int64_t>> end = attributes.GetIntList("end");
  if (!end.ok()) return end.status();
  bounds.begin = *std::move(begin);
  bounds.end = *std::move(end);
  if (static_cast<int>(bounds.begin.size()) != input.rank() ||
      static_cast<int>(bounds.end.size()) != input.rank()) {
    return OpError(absl::StrCat("begin ", FormatList(bounds.begin), " and end ",
                                FormatList(bounds.end), " need one entry per axis of the input ",
                                input.ToString()));
  }
  for (int axis = 0; axis < input.rank(); ++axis) {
    const int64_t first = bounds.begin[axis];
    const int64_t last = bounds.end[axis];
    if (first < 0 || first > last || last > input.dimension(axis)) {
      return OpError(absl::StrCat("slice [", first, ", ", last, ") of axis ", axis,
                                  " is out of range for the input ", input.ToString(),
                                  " (need 0 <= begin <= end <= ", input.dimension(axis), ")"));
    }
  }
  return bounds;
}

bool KeepsWhole(const SliceBounds& bounds, const Shape& input, int axis) {
  return bounds.begin[axis] == 0 && bounds.end[axis] == input.dimension(axis);
}

class SliceOp final : public OpDefinition {
 public:
  absl::StatusOr<std::vector<TensorType>> InferTypes(const OpContext& context) const override {
    if (absl::Status status = CheckInputCount(context, 1, 1); !status.ok()) return status;
    if (absl::Status status = CheckKnownAttributes(context, {"begin", "end"}); !status.ok()) {
      return status;
    }
    absl::StatusOr<SliceBounds> bounds = Bounds(context);
    if (!bounds.ok()) return bounds.status();
    std::vector<int64_t> dimensions;
    for (int axis = 0; axis < context.inputs[0].shape.rank(); ++axis) {
      dimensions.push_back(bounds->end[axis] - bounds->begin[axis]);
    }
    return std::vector<TensorType>{TensorType{Shape(dimensions), context.inputs[0].data_type}};
  }

  std::vector<SbpSignature> SbpSignatures(const OpContext& context, int64_t degree) const override {
    const Shape& input = context.inputs[0].shape;
    const SliceBounds bounds = *Bounds(context);
    std::vector<SbpSignature> signatures;
    for (int axis = 0; axis < input.rank(); ++axis) {
      if (!KeepsWhole(bounds, input, axis) || input.dimension(axis) < degree) continue;
      signatures.push_back({{Sbp::Split(axis)}, {Sbp::Split(axis)}});
    }
    signatures.push_back({{Sbp::PartialSum()}, {Sbp::PartialSum()}});
    signatures.push_back({{Sbp::Broadcast()}, {Sbp::Broadcast()}});
    return signatures;
  }

  absl::StatusOr<plan::KernelConf> Lower(const std::string& op_type,
                                         const LoweringContext& context) const override {
    absl::StatusOr<SliceBounds> bounds = Bounds(*context.op);
    if (!bounds.ok()) return bounds.status();
    const Shape& input = context.op->inputs[0].shape;
    for (int axis = 0; axis < input.rank(); ++axis) {
      if (!SplitsAxis(context.input_sbp[0], axis)) continue;
      if (!KeepsWhole(*bounds, input, axis)) {
        return absl::InternalError(absl::StrCat("the input is split on axis ", axis, " (",
                                                NdSbpToString(context.input_sbp[0]),
                                                ") but the slice does not keep that axis whole"));
      }
      bounds->end[axis] = context.local_inputs[0].shape.dimension(axis);
    }
    plan::KernelConf conf = EmptyKernelConf(op_type);
    (*conf.mutable_attributes())["begin"] = IntListAttribute(bounds->begin);
    (*conf.mutable_attributes())["end"] = IntListAttribute(bounds->end);
    return conf;
  }
};

}  // namespace

std::unique_ptr<OpDefinition> MakeSliceOp() { return std::make_unique<SliceOp>(); }

}  // namespace loom::compiler
