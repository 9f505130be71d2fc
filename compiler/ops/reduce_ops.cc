#include "compiler/ops/reduce_ops.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "compiler/ops/op_checks.h"

namespace loom::compiler {
namespace {

struct Reduction {
  std::vector<int> axes;  // sorted, normalised
  bool keep_dims = false;

  bool Reduces(int axis) const { return std::find(axes.begin(), axes.end(), axis) != axes.end(); }
};

absl::StatusOr<Reduction> ReadReduction(const OpContext& context) {
  OpAttributes attributes = AttributesOf(context);
  const int rank = context.inputs[0].shape.rank();
  std::vector<int64_t> axes;
  if (attributes.Has("axes")) {
    absl::StatusOr<std::vector<int64_t>> listed = attributes.GetIntList("axes");
    if (!listed.ok()) return listed.status();
    axes = *std::move(listed);
  }
  if (axes.empty()) {
    for (int axis = 0; axis < rank; ++axis) axes.push_back(axis);
  }
  absl::StatusOr<std::vector<int>> normalized = NormalizeAxes(axes, rank, "axis");
  if (!normalized.ok()) return normalized.status();
  absl::StatusOr<bool> keep_dims = attributes.GetBool("keep_dims", false);
  if (!keep_dims.ok()) return keep_dims.status();
  return Reduction{*std::move(normalized), *keep_dims};
}

class ReduceOp final : public OpDefinition {
 public:
  explicit ReduceOp(bool mean) : mean_(mean) {}

  absl::StatusOr<std::vector<TensorType>> InferTypes(const OpContext& context) const override {
    if (absl::Status status = CheckInputCount(context, 1, 1); !status.ok()) return status;
    if (AttributesOf(context).Has("divisor")) {
      return OpError(
          "attribute 'divisor' is set by the compiler (the logical number of reduced elements); "
          "remove it from the op");
    }
    if (absl::Status status = CheckKnownAttributes(context, {"axes", "keep_dims"}); !status.ok()) {
      return status;
    }
    if (absl::Status status = CheckInputDataType(context, 0, "x", {plan::FLOAT32}); !status.ok()) {
      return status;
    }
    absl::StatusOr<Reduction> reduction = ReadReduction(context);
    if (!reduction.ok()) return reduction.status();
    const Shape& input = context.inputs[0].shape;
    std::vector<int64_t> dimensions;
    for (int axis = 0; axis < input.rank(); ++axis) {
      if (!reduction->Reduces(axis)) {
        dimensions.push_back(input.dimension(axis));
      } else if (reduction->keep_dims) {
        dimensions.push_back(1);
      }
    }
    return std::vector<TensorType>{TensorType{Shape(dimensions), plan::FLOAT32}};
  }

  std::vector<SbpSignature> SbpSignatures(const OpContext& context, int64_t degree) const override {
    const Shape& input = context.inputs[0].shape;
    const Reduction reduction = *ReadReduction(context);
    std::vector<SbpSignature> kept;
    std::vector<SbpSignature> reduced;
    int output_axis = 0;
    for (int axis = 0; axis < input.rank(); ++axis) {
      const bool reduces = reduction.Reduces(axis);
      if (input.dimension(axis) >= degree) {
        if (reduces) {
          reduced.push_back({{Sbp::Split(axis)}, {Sbp::PartialSum()}});
        } else {
          kept.push_back({{Sbp::Split(axis)}, {Sbp::Split(output_axis)}});
        }
      }
      if (!reduces || reduction.keep_dims) ++output_axis;
    }
    // A split kept axis needs no communication afterwards: prefer it to a partial result.
    std::vector<SbpSignature> signatures = std::move(kept);
    signatures.insert(signatures.end(), reduced.begin(), reduced.end());
    signatures.push_back({{Sbp::PartialSum()}, {Sbp::PartialSum()}});
    signatures.push_back({{Sbp::Broadcast()}, {Sbp::Broadcast()}});
    return signatures;
  }

  double Flops(const OpContext& context) const override {
    return static_cast<double>(context.inputs[0].shape.NumElements());
  }

  absl::StatusOr<plan::KernelConf> Lower(const std::string& op_type,
                                         const LoweringContext& context) const override {
    absl::StatusOr<Reduction> reduction = ReadReduction(*context.op);
    if (!reduction.ok()) return reduction.status();
    plan::KernelConf conf = EmptyKernelConf(op_type);
    auto& attributes = *conf.mutable_attributes();
    attributes["axes"] =
        IntListAttribute(std::vector<int64_t>(reduction->axes.begin(), reduction->axes.end()));
    attributes["keep_dims"].set_bool_value(reduction->keep_dims);
    if (mean_) {
      int64_t divisor = 1;
      for (int axis : reduction->axes) divisor *= context.op->inputs[0].shape.dimension(axis);
      // An empty reduced axis is empty on every device too: the kernel's own 0 / 0 applies.
      if (divisor > 0) attributes["divisor"] = FloatAttribute(static_cast<double>(divisor));
    }
    return conf;
  }

 private:
  bool mean_;
};

}  // namespace

std::unique_ptr<OpDefinition> MakeReduceSumOp() { return std::make_unique<ReduceOp>(false); }

std::unique_ptr<OpDefinition> MakeReduceMeanOp() { return std::make_unique<ReduceOp>(true); }

}  // namespace loom::compiler
