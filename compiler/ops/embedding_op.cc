#include "compiler/ops/embedding_op.h"

#include "absl/strings/str_cat.h"
#include "compiler/ops/op_checks.h"

namespace loom::compiler {
namespace {

class EmbeddingOp final : public OpDefinition {
 public:
  absl::StatusOr<std::vector<TensorType>> InferTypes(const OpContext& context) const override {
    if (absl::Status status = CheckInputCount(context, 2, 2); !status.ok()) return status;
    if (AttributesOf(context).Has("row_offset") || AttributesOf(context).Has("logical_rows")) {
      return OpError(
          "attributes 'row_offset' and 'logical_rows' are set by the compiler when it splits the "
          "table; remove them from the op");
    }
    if (absl::Status status = CheckKnownAttributes(context, {}); !status.ok()) return status;
    if (absl::Status status = CheckInputDataType(context, 0, "table", {plan::FLOAT32});
        !status.ok()) {
      return status;
    }
    if (absl::Status status = CheckInputDataType(context, 1, "ids", {plan::INT32, plan::INT64});
        !status.ok()) {
      return status;
    }
    const Shape& table = context.inputs[0].shape;
    if (table.rank() != 2) {
      return OpError(absl::StrCat("table must have rank 2 ([rows, embedding dimension]), not ",
                                  table.ToString()));
    }
    std::vector<int64_t> dimensions(context.inputs[1].shape.dimensions().begin(),
                                    context.inputs[1].shape.dimensions().end());
    dimensions.push_back(table.dimension(1));
    return std::vector<TensorType>{TensorType{Shape(dimensions), plan::FLOAT32}};
  }

  std::vector<SbpSignature> SbpSignatures(const OpContext& context, int64_t degree) const override {
    const Shape& table = context.inputs[0].shape;
    const Shape& ids = context.inputs[1].shape;
    const Sbp b = Sbp::Broadcast();
    std::vector<SbpSignature> signatures;
    for (int axis = 0; axis < ids.rank(); ++axis) {
      if (ids.dimension(axis) < degree) continue;
      signatures.push_back({{b, Sbp::Split(axis)}, {Sbp::Split(axis)}});
    }
    if (table.dimension(1) >= degree) {
      signatures.push_back({{Sbp::Split(1), b}, {Sbp::Split(ids.rank())}});
    }
    if (table.dimension(0) >= degree) {
      signatures.push_back({{Sbp::Split(0), b}, {Sbp::PartialSum()}});
    }
    signatures.push_back({{b, b}, {b}});
    return signatures;
  }

  absl::StatusOr<plan::KernelConf> Lower(const std::string& op_type,
                                         const LoweringContext& context) const override {
    return LowerEmbeddingTable(
        op_type, context.op->inputs[0].shape.dimension(0), context.input_sbp[0],
        context.local_inputs.empty() ? nullptr : &context.local_inputs[0], context);
  }
};

}  // namespace

absl::StatusOr<plan::KernelConf> LowerEmbeddingTable(const std::string& op_type, int64_t rows,
                                                     const NdSbp& table_sbp,
                                                     const TensorType* local_table,
                                                     const LoweringContext& context) {
  const AxisRange local =
      LocalRange(table_sbp, /*axis=*/0, rows, context.coordinates, context.hierarchy);
  if (local_table != nullptr && local_table->shape.dimension(0) != local.size()) {
    return absl::InternalError(absl::StrCat(
        "the local table has ", local_table->shape.dimension(0), " rows but the balanced split of ",
        rows, " rows under ", NdSbpToString(table_sbp), " gives this device ", local.size()));
  }
  plan::KernelConf conf = EmptyKernelConf(op_type);
  (*conf.mutable_attributes())["row_offset"] = IntAttribute(local.begin);
  (*conf.mutable_attributes())["logical_rows"] = IntAttribute(rows);
  return conf;
}

std::unique_ptr<OpDefinition> MakeEmbeddingOp() { return std::make_unique<EmbeddingOp>(); }

}  // namespace loom::compiler
