#include "compiler/ops/sparse_cross_entropy_op.h"

#include "absl/strings/str_cat.h"
#include "compiler/ops/op_checks.h"

namespace loom::compiler {
namespace {

class SparseCrossEntropyOp final : public OpDefinition {
 public:
  absl::StatusOr<std::vector<TensorType>> InferTypes(const OpContext& context) const override {
    if (absl::Status status = CheckInputCount(context, 2, 2); !status.ok()) return status;
    if (absl::Status status = CheckKnownAttributes(context, {"ignore_index"}); !status.ok()) {
      return status;
    }
    if (absl::Status status = CheckInputDataType(context, 0, "logits", {plan::FLOAT32});
        !status.ok()) {
      return status;
    }
    if (absl::Status status = CheckInputDataType(context, 1, "labels", {plan::INT32, plan::INT64});
        !status.ok()) {
      return status;
    }
    if (absl::Status status = CheckInputMinimumRank(context, 0, "logits", 2); !status.ok()) {
      return status;
    }
    if (absl::StatusOr<int64_t> ignore_index = AttributesOf(context).GetInt("ignore_index", 0);
        !ignore_index.ok()) {
      return ignore_index.status();
    }
    const Shape& logits = context.inputs[0].shape;
    const Shape& labels = context.inputs[1].shape;
    const Shape batch(logits.dimensions().subspan(0, logits.rank() - 1));
    if (labels != batch) {
      return OpError(absl::StrCat("labels must have shape ", batch.ToString(), " (logits ",
                                  logits.ToString(), " without the class axis), not ",
                                  labels.ToString()));
    }
    return std::vector<TensorType>{TensorType{batch, plan::FLOAT32}};
  }

  std::vector<SbpSignature> SbpSignatures(const OpContext& context, int64_t degree) const override {
    const Shape& labels = context.inputs[1].shape;
    std::vector<SbpSignature> signatures;
    for (int axis = 0; axis < labels.rank(); ++axis) {
      if (labels.dimension(axis) < degree) continue;
      signatures.push_back({{Sbp::Split(axis), Sbp::Split(axis)}, {Sbp::Split(axis)}});
    }
    signatures.push_back({{Sbp::Broadcast(), Sbp::Broadcast()}, {Sbp::Broadcast()}});
    return signatures;
  }

  // log-softmax over the classes (about five operations per logit) and one pick per row.
  double Flops(const OpContext& context) const override {
    return 5.0 * static_cast<double>(context.inputs[0].shape.NumElements());
  }

  absl::StatusOr<plan::KernelConf> Lower(const std::string& op_type,
                                         const LoweringContext& context) const override {
    plan::KernelConf conf = EmptyKernelConf(op_type);
    OpAttributes attributes = AttributesOf(*context.op);
    if (attributes.Has("ignore_index")) {
      absl::StatusOr<int64_t> ignore_index = attributes.GetInt("ignore_index");
      if (!ignore_index.ok()) return ignore_index.status();
      (*conf.mutable_attributes())["ignore_index"] = IntAttribute(*ignore_index);
    }
    return conf;
  }
};

}  // namespace

std::unique_ptr<OpDefinition> MakeSparseCrossEntropyOp() {
  return std::make_unique<SparseCrossEntropyOp>();
}

}  // namespace loom::compiler
