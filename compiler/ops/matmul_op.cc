#include "compiler/ops/matmul_op.h"

#include "absl/strings/str_cat.h"
#include "core/data_type.h"

namespace loom::compiler {
namespace {

struct MatmulAxes {
  bool transpose_a;
  bool transpose_b;
  int rank_a;
  int rank_b;
  int a_m, a_k, b_k, b_n;  // axes
};

absl::StatusOr<MatmulAxes> Axes(const OpContext& context) {
  OpAttributes attributes = context.attributes_reader();
  absl::StatusOr<bool> transpose_a = attributes.GetBool("transpose_a", false);
  if (!transpose_a.ok()) return transpose_a.status();
  absl::StatusOr<bool> transpose_b = attributes.GetBool("transpose_b", false);
  if (!transpose_b.ok()) return transpose_b.status();
  MatmulAxes axes;
  axes.transpose_a = *transpose_a;
  axes.transpose_b = *transpose_b;
  axes.rank_a = context.inputs[0].shape.rank();
  axes.rank_b = context.inputs[1].shape.rank();
  axes.a_m = axes.transpose_a ? axes.rank_a - 1 : axes.rank_a - 2;
  axes.a_k = axes.transpose_a ? axes.rank_a - 2 : axes.rank_a - 1;
  axes.b_k = axes.transpose_b ? axes.rank_b - 1 : axes.rank_b - 2;
  axes.b_n = axes.transpose_b ? axes.rank_b - 2 : axes.rank_b - 1;
  return axes;
}

class MatmulOp final : public OpDefinition {
 public:
  absl::StatusOr<std::vector<TensorType>> InferTypes(const OpContext& context) const override {
    if (absl::Status status = CheckInputCount(context, 2, 2); !status.ok()) return status;
    const Shape& a = context.inputs[0].shape;
    const Shape& b = context.inputs[1].shape;
    if (a.rank() < 2 || b.rank() < 2) {
      return OpError(
          absl::StrCat("needs inputs of rank >= 2, not ", a.ToString(), " and ", b.ToString()));
    }
    if (b.rank() != 2 && b.rank() != a.rank()) {
      return OpError(absl::StrCat("b must be rank 2 or have a's rank: a is ", a.ToString(),
                                  ", b is ", b.ToString()));
    }
    const plan::DataType data_type = context.inputs[0].data_type;
    if ((data_type != plan::FLOAT32 && data_type != plan::BFLOAT16) ||
        context.inputs[1].data_type != data_type) {
      return OpError(absl::StrCat("needs two float32 or two bfloat16 inputs, not ",
                                  DataTypeName(data_type), " and ",
                                  DataTypeName(context.inputs[1].data_type)));
    }
    absl::StatusOr<MatmulAxes> axes = Axes(context);
    if (!axes.ok()) return axes.status();
    if (a.dimension(axes->a_k) != b.dimension(axes->b_k)) {
      return OpError(absl::StrCat("inner dimensions differ: a is ", a.ToString(),
                                  " (transpose_a=", axes->transpose_a, "), b is ", b.ToString(),
                                  " (transpose_b=", axes->transpose_b, ")"));
    }
    std::vector<int64_t> out;
    for (int i = 0; i + 2 < a.rank(); ++i) {
      if (b.rank() == a.rank() && a.dimension(i) != b.dimension(i)) {
        return OpError(
            absl::StrCat("batch dimensions differ: a is ", a.ToString(), ", b is ", b.ToString()));
      }
      out.push_back(a.dimension(i));
    }
    out.push_back(a.dimension(axes->a_m));
    out.push_back(b.dimension(axes->b_n));
    return std::vector<TensorType>{TensorType{Shape(out), data_type}};
  }

  std::vector<SbpSignature> SbpSignatures(const OpContext& context, int64_t degree) const override {
    absl::StatusOr<MatmulAxes> axes = Axes(context);
    const Shape& a = context.inputs[0].shape;
    const Shape& b = context.inputs[1].shape;
    const int out_rank = context.outputs[0].shape.rank();
    std::vector<SbpSignature> signatures;
    auto add = [&](Sbp in_a, Sbp in_b, Sbp out) {
      signatures.push_back(SbpSignature{{in_a, in_b}, {out}});
    };
    for (int i = 0; i + 2 < a.rank(); ++i) {
      if (a.dimension(i) < degree) continue;
      add(Sbp::Split(i), b.rank() == a.rank() ? Sbp::Split(i) : Sbp::Broadcast(), Sbp::Split(i));
    }
    if (a.dimension(axes->a_m) >= degree) {
      add(Sbp::Split(axes->a_m), Sbp::Broadcast(), Sbp::Split(out_rank - 2));
    }
    if (b.dimension(axes->b_n) >= degree) {
      add(Sbp::Broadcast(), Sbp::Split(axes->b_n), Sbp::Split(out_rank - 1));
    }
    if (a.dimension(axes->a_k) >= degree) {
      add(Sbp::Split(axes->a_k), Sbp::Split(axes->b_k), Sbp::PartialSum());
    }
    add(Sbp::PartialSum(), Sbp::Broadcast(), Sbp::PartialSum());
    add(Sbp::Broadcast(), Sbp::PartialSum(), Sbp::PartialSum());
    add(Sbp::Broadcast(), Sbp::Broadcast(), Sbp::Broadcast());
    return signatures;
  }

  double Flops(const OpContext& context) const override {
    const Shape& out = context.outputs[0].shape;
    absl::StatusOr<MatmulAxes> axes = Axes(context);
    return 2.0 * static_cast<double>(out.NumElements()) *
           static_cast<double>(context.inputs[0].shape.dimension(axes->a_k));
  }
};

}  // namespace

std::unique_ptr<OpDefinition> MakeMatmulOp() { return std::make_unique<MatmulOp>(); }

}  // namespace loom::compiler
