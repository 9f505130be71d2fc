#include "compiler/ops/gradient_ops.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>

#include "absl/strings/str_cat.h"
#include "compiler/ops/causal_attention_op.h"
#include "compiler/ops/embedding_op.h"
#include "compiler/ops/op_checks.h"
#include "compiler/ops/signature_helpers.h"

namespace loom::compiler {
namespace {

class OnesLikeOp final : public OpDefinition {
 public:
  absl::StatusOr<std::vector<TensorType>> InferTypes(const OpContext& context) const override {
    if (absl::Status status = CheckInputCount(context, 1, 1); !status.ok()) return status;
    if (absl::Status status = CheckKnownAttributes(context, {}); !status.ok()) return status;
    return std::vector<TensorType>{TensorType{context.inputs[0].shape, plan::FLOAT32}};
  }

  std::vector<SbpSignature> SbpSignatures(const OpContext& context, int64_t degree) const override {
    std::vector<SbpSignature> signatures;
    const Shape& shape = context.inputs[0].shape;
    for (int axis = 0; axis < shape.rank(); ++axis) {
      if (shape.dimension(axis) >= degree) {
        signatures.push_back(SbpSignature{{Sbp::Split(axis)}, {Sbp::Split(axis)}});
      }
    }
    signatures.push_back(SbpSignature{{Sbp::Broadcast()}, {Sbp::Broadcast()}});
    // Only the shape matters, and every rank's partial value has the whole shape: the backward's
    // seed need not wait for the loss's all-reduce.
    signatures.push_back(SbpSignature{{Sbp::PartialSum()}, {Sbp::Broadcast()}});
    signatures.push_back(SbpSignature{{Sbp::PartialMax()}, {Sbp::Broadcast()}});
    return signatures;
  }
};

class ActivationGradOp final : public OpDefinition {
 public:
  absl::StatusOr<std::vector<TensorType>> InferTypes(const OpContext& context) const override {
    if (absl::Status status = CheckInputCount(context, 2, 2); !status.ok()) return status;
    if (absl::Status status = CheckKnownAttributes(context, {}); !status.ok()) return status;
    for (int i = 0; i < 2; ++i) {
      if (absl::Status status =
              CheckInputDataType(context, i, i == 0 ? "x" : "dy", {plan::FLOAT32});
          !status.ok()) {
        return status;
      }
    }
    if (!(context.inputs[0].shape == context.inputs[1].shape)) {
      return OpError(absl::StrCat("x and dy differ in shape: x is ", context.inputs[0].ToString(),
                                  ", dy is ", context.inputs[1].ToString()));
    }
    return std::vector<TensorType>{context.inputs[0]};
  }

  std::vector<SbpSignature> SbpSignatures(const OpContext& context, int64_t degree) const override {
    std::vector<SbpSignature> signatures = ElementwiseSignatures(context, degree);
    signatures.insert(signatures.end() - 1,
                      SbpSignature{{Sbp::Broadcast(), Sbp::PartialSum()}, {Sbp::PartialSum()}});
    return signatures;
  }

  double Flops(const OpContext& context) const override {
    return 4.0 * static_cast<double>(context.outputs[0].shape.NumElements());
  }
};

absl::StatusOr<Shape> TargetShape(const OpContext& context) {
  absl::StatusOr<std::vector<int64_t>> shape = AttributesOf(context).GetIntList("shape");
  if (!shape.ok()) return shape.status();
  for (int64_t dimension : *shape) {
    if (dimension < 0)
      return OpError(absl::StrCat("negative dimension in shape ", FormatList(*shape)));
  }
  return Shape(*shape);
}

// reduce_sum_to: for every input axis, the output axis it lands on (-1: summed away or to 1).
std::vector<int> KeptAxes(const Shape& input, const Shape& output) {
  const int offset = input.rank() - output.rank();
  std::vector<int> kept(input.rank(), -1);
  for (int axis = offset; axis < input.rank(); ++axis) {
    const int out = axis - offset;
    if (output.dimension(out) == input.dimension(axis)) kept[axis] = out;
  }
  return kept;
}

class ReduceSumToOp final : public OpDefinition {
 public:
  absl::StatusOr<std::vector<TensorType>> InferTypes(const OpContext& context) const override {
    if (absl::Status status = CheckInputCount(context, 1, 1); !status.ok()) return status;
    if (absl::Status status = CheckKnownAttributes(context, {"shape"}); !status.ok()) return status;
    if (absl::Status status = CheckInputDataType(context, 0, "dy", {plan::FLOAT32}); !status.ok()) {
      return status;
    }
    absl::StatusOr<Shape> target = TargetShape(context);
    if (!target.ok()) return target.status();
    const Shape& input = context.inputs[0].shape;
    bool valid = target->rank() <= input.rank();
    for (int axis = 0; valid && axis < target->rank(); ++axis) {
      const int64_t from = input.dimension(input.rank() - target->rank() + axis);
      valid = target->dimension(axis) == from || target->dimension(axis) == 1;
    }
    if (!valid) {
      return OpError(absl::StrCat("shape ", target->ToString(), " does not broadcast to dy's ",
                                  context.inputs[0].ToString()));
    }
    return std::vector<TensorType>{TensorType{*target, plan::FLOAT32}};
  }

  std::vector<SbpSignature> SbpSignatures(const OpContext& context, int64_t degree) const override {
    const Shape& input = context.inputs[0].shape;
    const std::vector<int> kept = KeptAxes(input, context.outputs[0].shape);
    std::vector<SbpSignature> signatures;
    for (int axis = 0; axis < input.rank(); ++axis) {
      if (input.dimension(axis) < degree) continue;
      signatures.push_back(SbpSignature{
          {Sbp::Split(axis)}, {kept[axis] >= 0 ? Sbp::Split(kept[axis]) : Sbp::PartialSum()}});
    }
    signatures.push_back(SbpSignature{{Sbp::PartialSum()}, {Sbp::PartialSum()}});
    signatures.push_back(SbpSignature{{Sbp::Broadcast()}, {Sbp::Broadcast()}});
    return signatures;
  }

  double Flops(const OpContext& context) const override {
    return static_cast<double>(context.inputs[0].shape.NumElements());
  }

  absl::StatusOr<plan::KernelConf> Lower(const std::string& op_type,
                                         const LoweringContext& context) const override {
    return EmptyKernelConf(op_type);
  }
};

struct Broadcast {
  // For every input axis, the output axis it maps to (-1: x has 1 there and y does not).
  std::vector<int> mapped;
  std::vector<int64_t> axes;  // normalised, as given
  double scale = 1.0;
};

absl::StatusOr<Broadcast> ReadBroadcast(const OpContext& context, const Shape& output) {
  OpAttributes attributes = AttributesOf(context);
  const Shape& input = context.inputs[0].shape;
  Broadcast broadcast;
  absl::StatusOr<double> scale = attributes.GetFloat("scale", 1.0);
  if (!scale.ok()) return scale.status();
  broadcast.scale = *scale;
  std::vector<int> axes;
  if (attributes.Has("axes")) {
    absl::StatusOr<std::vector<int64_t>> listed = attributes.GetIntList("axes");
    if (!listed.ok()) return listed.status();
    absl::StatusOr<std::vector<int>> normalized = NormalizeAxes(*listed, output.rank(), "axis");
    if (!normalized.ok()) return normalized.status();
    axes = *normalized;
    broadcast.axes.assign(axes.begin(), axes.end());
  }
  const auto error = [&] {
    return OpError(absl::StrCat("x ", context.inputs[0].ToString(), " does not broadcast to ",
                                output.ToString(), " over axes ", FormatList(broadcast.axes)));
  };
  broadcast.mapped.assign(input.rank(), -1);
  if (!axes.empty() && input.rank() == output.rank() - static_cast<int>(axes.size())) {
    int next = 0;
    for (int axis = 0; axis < output.rank(); ++axis) {
      if (std::find(axes.begin(), axes.end(), axis) != axes.end()) continue;
      if (input.dimension(next) != output.dimension(axis)) return error();
      broadcast.mapped[next++] = axis;
    }
    return broadcast;
  }
  if (input.rank() > output.rank()) return error();
  const int offset = output.rank() - input.rank();
  for (int axis = 0; axis < input.rank(); ++axis) {
    const int64_t to = output.dimension(axis + offset);
    if (input.dimension(axis) == to) {
      broadcast.mapped[axis] = axis + offset;
    } else if (input.dimension(axis) != 1) {
      return error();
    }
  }
  return broadcast;
}

class BroadcastToOp final : public OpDefinition {
 public:
  absl::StatusOr<std::vector<TensorType>> InferTypes(const OpContext& context) const override {
    if (absl::Status status = CheckInputCount(context, 1, 1); !status.ok()) return status;
    if (absl::Status status = CheckKnownAttributes(context, {"shape", "axes", "scale"});
        !status.ok()) {
      return status;
    }
    if (absl::Status status = CheckInputDataType(context, 0, "x", {plan::FLOAT32}); !status.ok()) {
      return status;
    }
    absl::StatusOr<Shape> target = TargetShape(context);
    if (!target.ok()) return target.status();
    absl::StatusOr<Broadcast> broadcast = ReadBroadcast(context, *target);
    if (!broadcast.ok()) return broadcast.status();
    return std::vector<TensorType>{TensorType{*target, plan::FLOAT32}};
  }

  std::vector<SbpSignature> SbpSignatures(const OpContext& context, int64_t degree) const override {
    std::vector<SbpSignature> signatures;
    absl::StatusOr<Broadcast> broadcast = ReadBroadcast(context, context.outputs[0].shape);
    if (broadcast.ok()) {
      const Shape& input = context.inputs[0].shape;
      for (int axis = 0; axis < input.rank(); ++axis) {
        if (broadcast->mapped[axis] < 0 || input.dimension(axis) < degree) continue;
        signatures.push_back(
            SbpSignature{{Sbp::Split(axis)}, {Sbp::Split(broadcast->mapped[axis])}});
      }
    }
    // Broadcast first: from a broadcast input both cost nothing, and a broadcast output reaches
    // split consumers by a slice where a partial one needs a reduce-scatter.
    signatures.push_back(SbpSignature{{Sbp::Broadcast()}, {Sbp::Broadcast()}});
    signatures.push_back(SbpSignature{{Sbp::PartialSum()}, {Sbp::PartialSum()}});
    return signatures;
  }

  double Flops(const OpContext& context) const override {
    return static_cast<double>(context.outputs[0].shape.NumElements());
  }

  absl::StatusOr<plan::KernelConf> Lower(const std::string& op_type,
                                         const LoweringContext& context) const override {
    absl::StatusOr<Broadcast> broadcast = ReadBroadcast(*context.op, context.op->outputs[0].shape);
    if (!broadcast.ok()) return broadcast.status();
    plan::KernelConf conf = EmptyKernelConf(op_type);
    if (!broadcast->axes.empty()) {
      (*conf.mutable_attributes())["axes"] = IntListAttribute(broadcast->axes);
    }
    (*conf.mutable_attributes())["scale"] = FloatAttribute(broadcast->scale);
    return conf;
  }
};

absl::Status CheckFloatInputs(const OpContext& context, std::initializer_list<const char*> names) {
  int index = 0;
  for (const char* name : names) {
    if (absl::Status status = CheckInputDataType(context, index++, name, {plan::FLOAT32});
        !status.ok()) {
      return status;
    }
  }
  return absl::OkStatus();
}

absl::Status CheckSameShape(const OpContext& context, int a, const char* a_name, int b,
                            const char* b_name) {
  if (context.inputs[a].shape == context.inputs[b].shape) return absl::OkStatus();
  return OpError(absl::StrCat(a_name, " and ", b_name, " differ in shape: ", a_name, " is ",
                              context.inputs[a].ToString(), ", ", b_name, " is ",
                              context.inputs[b].ToString()));
}

// softmax_grad, log_softmax_grad: (y, dy) -> dx over the last axis.
class RowwiseGradOp final : public OpDefinition {
 public:
  absl::StatusOr<std::vector<TensorType>> InferTypes(const OpContext& context) const override {
    if (absl::Status status = CheckInputCount(context, 2, 2); !status.ok()) return status;
    if (absl::Status status = CheckKnownAttributes(context, {}); !status.ok()) return status;
    if (absl::Status status = CheckFloatInputs(context, {"y", "dy"}); !status.ok()) return status;
    if (absl::Status status = CheckInputMinimumRank(context, 0, "y", 1); !status.ok()) {
      return status;
    }
    if (absl::Status status = CheckSameShape(context, 0, "y", 1, "dy"); !status.ok()) {
      return status;
    }
    return std::vector<TensorType>{context.inputs[0]};
  }

  std::vector<SbpSignature> SbpSignatures(const OpContext& context, int64_t degree) const override {
    std::vector<SbpSignature> signatures;
    const Shape& shape = context.inputs[0].shape;
    for (int axis = 0; axis + 1 < shape.rank(); ++axis) {
      if (shape.dimension(axis) < degree) continue;
      const Sbp split = Sbp::Split(axis);
      signatures.push_back(SbpSignature{{split, split}, {split}});
    }
    signatures.push_back(SbpSignature{{Sbp::Broadcast(), Sbp::Broadcast()}, {Sbp::Broadcast()}});
    return signatures;
  }

  double Flops(const OpContext& context) const override {
    return 4.0 * static_cast<double>(context.inputs[0].shape.NumElements());
  }

  absl::StatusOr<plan::KernelConf> Lower(const std::string& op_type,
                                         const LoweringContext& context) const override {
    return EmptyKernelConf(op_type);
  }
};

// sparse_cross_entropy_grad: (logits [N..., C], labels [N...], dloss [N...]) -> dlogits.
class SparseCrossEntropyGradOp final : public OpDefinition {
 public:
  absl::StatusOr<std::vector<TensorType>> InferTypes(const OpContext& context) const override {
    if (absl::Status status = CheckInputCount(context, 3, 3); !status.ok()) return status;
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
    if (absl::Status status = CheckInputDataType(context, 2, "dloss", {plan::FLOAT32});
        !status.ok()) {
      return status;
    }
    if (absl::Status status = CheckInputMinimumRank(context, 0, "logits", 2); !status.ok()) {
      return status;
    }
    const Shape& logits = context.inputs[0].shape;
    const Shape batch(logits.dimensions().subspan(0, logits.rank() - 1));
    for (int index : {1, 2}) {
      if (!(context.inputs[index].shape == batch)) {
        return OpError(absl::StrCat(index == 1 ? "labels " : "dloss ",
                                    context.inputs[index].ToString(), " must have shape ",
                                    batch.ToString(), " (logits ", context.inputs[0].ToString(),
                                    " without the class axis)"));
      }
    }
    if (absl::StatusOr<int64_t> ignore_index = AttributesOf(context).GetInt("ignore_index", 0);
        !ignore_index.ok()) {
      return ignore_index.status();
    }
    return std::vector<TensorType>{context.inputs[0]};
  }

  std::vector<SbpSignature> SbpSignatures(const OpContext& context, int64_t degree) const override {
    std::vector<SbpSignature> signatures;
    const Shape& logits = context.inputs[0].shape;
    for (int axis = 0; axis + 1 < logits.rank(); ++axis) {
      if (logits.dimension(axis) < degree) continue;
      const Sbp split = Sbp::Split(axis);
      signatures.push_back(SbpSignature{{split, split, split}, {split}});
    }
    const Sbp b = Sbp::Broadcast();
    signatures.push_back(SbpSignature{{b, b, b}, {b}});
    return signatures;
  }

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

// layer_norm_grad: (x [..., n], gamma [n], dy) -> (dx, dgamma, dbeta).
class LayerNormGradOp final : public OpDefinition {
 public:
  absl::StatusOr<std::vector<TensorType>> InferTypes(const OpContext& context) const override {
    if (absl::Status status = CheckInputCount(context, 3, 3); !status.ok()) return status;
    if (absl::Status status = CheckKnownAttributes(context, {"epsilon"}); !status.ok()) {
      return status;
    }
    if (absl::Status status = CheckFloatInputs(context, {"x", "gamma", "dy"}); !status.ok()) {
      return status;
    }
    if (absl::Status status = CheckInputMinimumRank(context, 0, "x", 1); !status.ok()) {
      return status;
    }
    const Shape& x = context.inputs[0].shape;
    const Shape row({x.dimension(x.rank() - 1)});
    if (!(context.inputs[1].shape == row)) {
      return OpError(absl::StrCat("gamma must have shape ", row.ToString(), " (the last axis of x ",
                                  context.inputs[0].ToString(), "), not ",
                                  context.inputs[1].ToString()));
    }
    if (absl::Status status = CheckSameShape(context, 0, "x", 2, "dy"); !status.ok()) {
      return status;
    }
    if (absl::StatusOr<double> epsilon = Epsilon(context); !epsilon.ok()) return epsilon.status();
    return std::vector<TensorType>{context.inputs[0], context.inputs[1], context.inputs[1]};
  }

  std::vector<SbpSignature> SbpSignatures(const OpContext& context, int64_t degree) const override {
    std::vector<SbpSignature> signatures;
    const Shape& x = context.inputs[0].shape;
    const Sbp b = Sbp::Broadcast();
    const Sbp p = Sbp::PartialSum();
    for (int axis = 0; axis + 1 < x.rank(); ++axis) {
      if (x.dimension(axis) < degree) continue;
      const Sbp split = Sbp::Split(axis);
      signatures.push_back(SbpSignature{{split, b, split}, {split, p, p}});
    }
    signatures.push_back(SbpSignature{{b, b, b}, {b, b, b}});
    return signatures;
  }

  double Flops(const OpContext& context) const override {
    return 12.0 * static_cast<double>(context.inputs[0].shape.NumElements());
  }

  absl::StatusOr<plan::KernelConf> Lower(const std::string& op_type,
                                         const LoweringContext& context) const override {
    absl::StatusOr<double> epsilon = Epsilon(*context.op);
    if (!epsilon.ok()) return epsilon.status();
    plan::KernelConf conf = EmptyKernelConf(op_type);
    (*conf.mutable_attributes())["epsilon"] = FloatAttribute(*epsilon);
    return conf;
  }

 private:
  static absl::StatusOr<double> Epsilon(const OpContext& context) {
    absl::StatusOr<double> epsilon = AttributesOf(context).GetFloat("epsilon", 1e-5);
    if (!epsilon.ok()) return epsilon.status();
    if (!std::isfinite(*epsilon) || *epsilon < 0) {
      return OpError(absl::StrCat("attribute 'epsilon' must be finite and >= 0, not ", *epsilon));
    }
    return *epsilon;
  }
};

// pad: x -> zeros of attribute "shape" with x at attribute "begin". The gradient of slice.
class PadOp final : public OpDefinition {
 public:
  absl::StatusOr<std::vector<TensorType>> InferTypes(const OpContext& context) const override {
    if (absl::Status status = CheckInputCount(context, 1, 1); !status.ok()) return status;
    if (absl::Status status = CheckKnownAttributes(context, {"shape", "begin"}); !status.ok()) {
      return status;
    }
    if (absl::Status status = CheckInputDataType(context, 0, "x", {plan::FLOAT32}); !status.ok()) {
      return status;
    }
    absl::StatusOr<Shape> target = TargetShape(context);
    if (!target.ok()) return target.status();
    absl::StatusOr<std::vector<int64_t>> begin = AttributesOf(context).GetIntList("begin");
    if (!begin.ok()) return begin.status();
    const Shape& x = context.inputs[0].shape;
    bool valid = target->rank() == x.rank() && static_cast<int>(begin->size()) == x.rank();
    for (int axis = 0; valid && axis < x.rank(); ++axis) {
      // begin + x's extent <= the target's extent, without forming a sum that could overflow.
      valid = (*begin)[axis] >= 0 && (*begin)[axis] <= target->dimension(axis) &&
              x.dimension(axis) <= target->dimension(axis) - (*begin)[axis];
    }
    if (!valid) {
      return OpError(absl::StrCat("x ", context.inputs[0].ToString(), " at begin ",
                                  FormatList(*begin), " does not lie inside shape ",
                                  target->ToString()));
    }
    return std::vector<TensorType>{TensorType{*target, plan::FLOAT32}};
  }

  std::vector<SbpSignature> SbpSignatures(const OpContext& context, int64_t degree) const override {
    std::vector<SbpSignature> signatures;
    const Shape& x = context.inputs[0].shape;
    const Shape& y = context.outputs[0].shape;
    for (int axis = 0; axis < x.rank(); ++axis) {
      if (x.dimension(axis) != y.dimension(axis) || x.dimension(axis) < degree) continue;
      signatures.push_back(SbpSignature{{Sbp::Split(axis)}, {Sbp::Split(axis)}});
    }
    signatures.push_back(SbpSignature{{Sbp::PartialSum()}, {Sbp::PartialSum()}});
    signatures.push_back(SbpSignature{{Sbp::Broadcast()}, {Sbp::Broadcast()}});
    return signatures;
  }

  absl::StatusOr<plan::KernelConf> Lower(const std::string& op_type,
                                         const LoweringContext& context) const override {
    // Split axes are padded by 0 (signatures split only axes the pad leaves whole).
    absl::StatusOr<std::vector<int64_t>> begin = AttributesOf(*context.op).GetIntList("begin");
    if (!begin.ok()) return begin.status();
    plan::KernelConf conf = EmptyKernelConf(op_type);
    (*conf.mutable_attributes())["begin"] = IntListAttribute(*begin);
    return conf;
  }
};

// embedding_grad: (ids [S...], dy [S..., D]) -> dtable [rows, D], attribute "rows" (V).
class EmbeddingGradOp final : public OpDefinition {
 public:
  absl::StatusOr<std::vector<TensorType>> InferTypes(const OpContext& context) const override {
    if (absl::Status status = CheckInputCount(context, 2, 2); !status.ok()) return status;
    if (absl::Status status = CheckKnownAttributes(context, {"rows"}); !status.ok()) return status;
    if (absl::Status status = CheckInputDataType(context, 0, "ids", {plan::INT32, plan::INT64});
        !status.ok()) {
      return status;
    }
    if (absl::Status status = CheckInputDataType(context, 1, "dy", {plan::FLOAT32}); !status.ok()) {
      return status;
    }
    absl::StatusOr<int64_t> rows = AttributesOf(context).GetInt("rows");
    if (!rows.ok()) return rows.status();
    if (*rows < 0) return OpError(absl::StrCat("attribute 'rows' must be >= 0, not ", *rows));
    const Shape& ids = context.inputs[0].shape;
    const Shape& dy = context.inputs[1].shape;
    bool valid = dy.rank() == ids.rank() + 1;
    for (int axis = 0; valid && axis < ids.rank(); ++axis) {
      valid = ids.dimension(axis) == dy.dimension(axis);
    }
    if (!valid) {
      return OpError(absl::StrCat("dy ", context.inputs[1].ToString(),
                                  " must be ids' shape plus the embedding axis (ids ",
                                  context.inputs[0].ToString(), ")"));
    }
    return std::vector<TensorType>{
        TensorType{Shape({*rows, dy.dimension(dy.rank() - 1)}), plan::FLOAT32}};
  }

  std::vector<SbpSignature> SbpSignatures(const OpContext& context, int64_t degree) const override {
    std::vector<SbpSignature> signatures;
    const Shape& ids = context.inputs[0].shape;
    const Shape& dy = context.inputs[1].shape;
    const Sbp b = Sbp::Broadcast();
    for (int axis = 0; axis < ids.rank(); ++axis) {
      if (ids.dimension(axis) < degree) continue;
      signatures.push_back({{Sbp::Split(axis), Sbp::Split(axis)}, {Sbp::PartialSum()}});
    }
    if (dy.dimension(dy.rank() - 1) >= degree) {
      signatures.push_back({{b, Sbp::Split(dy.rank() - 1)}, {Sbp::Split(1)}});
    }
    if (context.outputs[0].shape.dimension(0) >= degree) {
      signatures.push_back({{b, b}, {Sbp::Split(0)}});
    }
    signatures.push_back({{b, b}, {b}});
    return signatures;
  }

  double Flops(const OpContext& context) const override {
    return static_cast<double>(context.inputs[1].shape.NumElements());
  }

  absl::StatusOr<plan::KernelConf> Lower(const std::string& op_type,
                                         const LoweringContext& context) const override {
    return LowerEmbeddingTable(op_type, context.op->outputs[0].shape.dimension(0),
                               context.output_sbp.empty() ? NdSbp{} : context.output_sbp[0],
                               context.local_outputs.empty() ? nullptr : &context.local_outputs[0],
                               context);
  }
};

// causal_attention_grad: (q, k, v, dy) -> (dq, dk, dv), all [B, H, T, Dh].
class CausalAttentionGradOp final : public OpDefinition {
 public:
  absl::StatusOr<std::vector<TensorType>> InferTypes(const OpContext& context) const override {
    if (absl::Status status = CheckInputCount(context, 4, 4); !status.ok()) return status;
    if (absl::Status status = CheckKnownAttributes(context, {"scale"}); !status.ok()) return status;
    const char* const names[] = {"q", "k", "v", "dy"};
    if (absl::Status status = CheckCausalAttentionDataTypes(context, names); !status.ok()) {
      return status;
    }
    if (context.inputs[0].shape.rank() != 4) {
      return OpError(absl::StrCat("q must be [B, H, T, Dh], not ", context.inputs[0].ToString()));
    }
    for (int index = 1; index < 4; ++index) {
      if (absl::Status status = CheckSameShape(context, 0, "q", index, names[index]);
          !status.ok()) {
        return status;
      }
    }
    if (absl::Status status = CheckCausalAttentionScores(context.inputs[0].shape); !status.ok()) {
      return status;
    }
    absl::StatusOr<double> scale = CausalAttentionScale(context);
    if (!scale.ok()) return scale.status();
    if (!std::isfinite(*scale)) {
      return OpError(absl::StrCat("attribute 'scale' must be finite, not ", *scale));
    }
    return std::vector<TensorType>(3, context.inputs[0]);
  }

  std::vector<SbpSignature> SbpSignatures(const OpContext& context, int64_t degree) const override {
    std::vector<SbpSignature> signatures;
    const Shape& q = context.inputs[0].shape;
    for (int axis : {0, 1}) {
      if (q.dimension(axis) < degree) continue;
      const Sbp split = Sbp::Split(axis);
      signatures.push_back({{split, split, split, split}, {split, split, split}});
    }
    const Sbp b = Sbp::Broadcast();
    signatures.push_back({{b, b, b, b}, {b, b, b}});
    return signatures;
  }

  double Flops(const OpContext& context) const override {
    const Shape& q = context.inputs[0].shape;
    return 8.0 * static_cast<double>(q.NumElements()) * static_cast<double>(q.dimension(2));
  }

  absl::StatusOr<plan::KernelConf> Lower(const std::string& op_type,
                                         const LoweringContext& context) const override {
    absl::StatusOr<double> scale = CausalAttentionScale(*context.op);
    if (!scale.ok()) return scale.status();
    plan::KernelConf conf = EmptyKernelConf(op_type);
    (*conf.mutable_attributes())["scale"] = FloatAttribute(*scale);
    return conf;
  }
};

}  // namespace

std::unique_ptr<OpDefinition> MakeOnesLikeOp() { return std::make_unique<OnesLikeOp>(); }
std::unique_ptr<OpDefinition> MakeActivationGradOp() {
  return std::make_unique<ActivationGradOp>();
}
std::unique_ptr<OpDefinition> MakeReduceSumToOp() { return std::make_unique<ReduceSumToOp>(); }
std::unique_ptr<OpDefinition> MakeBroadcastToOp() { return std::make_unique<BroadcastToOp>(); }
std::unique_ptr<OpDefinition> MakeRowwiseGradOp() { return std::make_unique<RowwiseGradOp>(); }
std::unique_ptr<OpDefinition> MakeSparseCrossEntropyGradOp() {
  return std::make_unique<SparseCrossEntropyGradOp>();
}
std::unique_ptr<OpDefinition> MakeLayerNormGradOp() { return std::make_unique<LayerNormGradOp>(); }
std::unique_ptr<OpDefinition> MakePadOp() { return std::make_unique<PadOp>(); }
std::unique_ptr<OpDefinition> MakeEmbeddingGradOp() { return std::make_unique<EmbeddingGradOp>(); }
std::unique_ptr<OpDefinition> MakeCausalAttentionGradOp() {
  return std::make_unique<CausalAttentionGradOp>();
}

}  // namespace loom::compiler
