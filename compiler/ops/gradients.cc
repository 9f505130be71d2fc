#include "compiler/ops/gradients.h"

#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "compiler/ops/op_checks.h"
#include "core/data_type.h"

namespace loom::compiler {
namespace {

using Names = std::vector<std::string>;
using GradientFunction = absl::StatusOr<Names> (*)(const GradientRequest&, GradientBuilder*);

plan::AttributeValue BoolAttribute(bool value) {
  plan::AttributeValue attribute;
  attribute.set_bool_value(value);
  return attribute;
}

std::vector<int64_t> Dimensions(const Shape& shape) {
  return std::vector<int64_t>(shape.dimensions().begin(), shape.dimensions().end());
}

// An int list attribute, set even when empty (a scalar's shape).
plan::AttributeValue ListAttribute(const std::vector<int64_t>& values) {
  plan::AttributeValue attribute;
  attribute.mutable_int_list();
  for (int64_t value : values) attribute.mutable_int_list()->add_values(value);
  return attribute;
}

const Shape& InputShape(const GradientRequest& request, int index) {
  return request.op->inputs[index].shape;
}

// `gradient` (shaped like the op's output `from`) summed back to the shape of input `index`.
std::string SumTo(const GradientRequest& request, GradientBuilder* builder,
                  const std::string& gradient, const Shape& from, int index) {
  const Shape& to = InputShape(request, index);
  if (from == to) return gradient;
  AttributeMap attributes;
  attributes["shape"] = ListAttribute(Dimensions(to));
  return builder->Emit("reduce_sum_to", {gradient}, std::move(attributes))[0];
}

std::string Scale(GradientBuilder* builder, const std::string& x, double scale) {
  AttributeMap attributes;
  attributes["scale"] = FloatAttribute(scale);
  return builder->Emit("scale", {x}, std::move(attributes))[0];
}

std::string Binary(GradientBuilder* builder, const std::string& op_type, const std::string& a,
                   const std::string& b) {
  return builder->Emit(op_type, {a, b}, {})[0];
}

// Only for inputs that need one.
Names Only(const GradientRequest& request, Names gradients) {
  for (size_t i = 0; i < gradients.size(); ++i) {
    if (!request.needs_input_gradient[i]) gradients[i].clear();
  }
  return gradients;
}

absl::StatusOr<Names> BinaryGradient(const std::string& op_type, const GradientRequest& request,
                                     GradientBuilder* builder) {
  const std::string& dy = request.output_gradients[0];
  const Shape& y = request.op->outputs[0].shape;
  const std::string& a = request.inputs[0];
  const std::string& b = request.inputs[1];
  Names gradients(2);
  const bool need_a = request.needs_input_gradient[0];
  const bool need_b = request.needs_input_gradient[1];
  if (op_type == "add") {
    if (need_a) gradients[0] = SumTo(request, builder, dy, y, 0);
    if (need_b) gradients[1] = SumTo(request, builder, dy, y, 1);
  } else if (op_type == "subtract") {
    if (need_a) gradients[0] = SumTo(request, builder, dy, y, 0);
    if (need_b) gradients[1] = SumTo(request, builder, Scale(builder, dy, -1.0), y, 1);
  } else if (op_type == "multiply") {
    if (need_a) gradients[0] = SumTo(request, builder, Binary(builder, "multiply", dy, b), y, 0);
    if (need_b) gradients[1] = SumTo(request, builder, Binary(builder, "multiply", dy, a), y, 1);
  } else {  // divide: y = a / b; da = dy / b, db = -dy * y / b.
    if (need_a) gradients[0] = SumTo(request, builder, Binary(builder, "divide", dy, b), y, 0);
    if (need_b) {
      const std::string product = Binary(builder, "multiply", dy, request.outputs[0]);
      gradients[1] = SumTo(request, builder,
                           Scale(builder, Binary(builder, "divide", product, b), -1.0), y, 1);
    }
  }
  return gradients;
}

absl::StatusOr<Names> AddGradient(const GradientRequest& r, GradientBuilder* b) {
  return BinaryGradient("add", r, b);
}
absl::StatusOr<Names> SubtractGradient(const GradientRequest& r, GradientBuilder* b) {
  return BinaryGradient("subtract", r, b);
}
absl::StatusOr<Names> MultiplyGradient(const GradientRequest& r, GradientBuilder* b) {
  return BinaryGradient("multiply", r, b);
}
absl::StatusOr<Names> DivideGradient(const GradientRequest& r, GradientBuilder* b) {
  return BinaryGradient("divide", r, b);
}

// relu and gelu from the input, tanh from the output.
absl::StatusOr<Names> ReluGradient(const GradientRequest& r, GradientBuilder* b) {
  return Only(r, {b->Emit("relu_grad", {r.inputs[0], r.output_gradients[0]}, {})[0]});
}
absl::StatusOr<Names> GeluGradient(const GradientRequest& r, GradientBuilder* b) {
  return Only(r, {b->Emit("gelu_grad", {r.inputs[0], r.output_gradients[0]}, {})[0]});
}
absl::StatusOr<Names> TanhGradient(const GradientRequest& r, GradientBuilder* b) {
  return Only(r, {b->Emit("tanh_grad", {r.outputs[0], r.output_gradients[0]}, {})[0]});
}

absl::StatusOr<Names> ScaleGradient(const GradientRequest& r, GradientBuilder* b) {
  absl::StatusOr<double> scale = r.op->attributes_reader().GetFloat("scale", 1.0);
  if (!scale.ok()) return scale.status();
  return Only(r, {Scale(b, r.output_gradients[0], *scale)});
}

absl::StatusOr<Names> IdentityGradient(const GradientRequest& r, GradientBuilder* b) {
  return Only(r, {r.output_gradients[0]});
}

// The gradient of a cast is the output's gradient in the input's type.
absl::StatusOr<Names> CastGradient(const GradientRequest& r, GradientBuilder* b) {
  const plan::DataType input_type = r.op->inputs[0].data_type;
  if (r.op->outputs[0].data_type == input_type) return Only(r, {r.output_gradients[0]});
  AttributeMap attributes;
  attributes["to"].set_string_value(DataTypeName(input_type));
  return Only(r, {b->Emit("cast", {r.output_gradients[0]}, std::move(attributes))[0]});
}

absl::StatusOr<Names> BiasAddGradient(const GradientRequest& r, GradientBuilder* b) {
  const std::string& dy = r.output_gradients[0];
  Names gradients(2);
  if (r.needs_input_gradient[0]) gradients[0] = dy;
  if (r.needs_input_gradient[1]) gradients[1] = SumTo(r, b, dy, r.op->outputs[0].shape, 1);
  return gradients;
}

// y = op(A) @ op(B), op a transpose of the last two axes when the attribute says so.
absl::StatusOr<Names> MatmulGradient(const GradientRequest& r, GradientBuilder* b) {
  OpAttributes attributes = r.op->attributes_reader();
  absl::StatusOr<bool> transpose_a = attributes.GetBool("transpose_a", false);
  if (!transpose_a.ok()) return transpose_a.status();
  absl::StatusOr<bool> transpose_b = attributes.GetBool("transpose_b", false);
  if (!transpose_b.ok()) return transpose_b.status();
  const std::string& dy = r.output_gradients[0];
  const std::string& a = r.inputs[0];
  const std::string& w = r.inputs[1];
  const auto matmul = [&](const std::string& x, const std::string& y, bool tx, bool ty) {
    AttributeMap map;
    if (tx) map["transpose_a"] = BoolAttribute(true);
    if (ty) map["transpose_b"] = BoolAttribute(true);
    return b->Emit("matmul", {x, y}, std::move(map))[0];
  };
  // Each product is shaped like its input up to batch axes, which SumTo sums away.
  const auto sum_to = [&](const std::string& gradient, int index, Shape batch_from) {
    return SumTo(r, b, gradient, batch_from, index);
  };
  Names gradients(2);
  const Shape& out = r.op->outputs[0].shape;
  const auto product_shape = [&](int index) {
    // The product's batch axes are the output's; its last two are the input's.
    std::vector<int64_t> dimensions = Dimensions(out);
    const Shape& input = InputShape(r, index);
    dimensions[dimensions.size() - 2] = input.dimension(input.rank() - 2);
    dimensions[dimensions.size() - 1] = input.dimension(input.rank() - 1);
    return Shape(dimensions);
  };
  if (r.needs_input_gradient[0]) {
    std::string da;
    if (!*transpose_a) {
      da = *transpose_b ? matmul(dy, w, false, false) : matmul(dy, w, false, true);
    } else {
      da = *transpose_b ? matmul(w, dy, true, true) : matmul(w, dy, false, true);
    }
    gradients[0] = sum_to(da, 0, product_shape(0));
  }
  if (r.needs_input_gradient[1] && !*transpose_a && InputShape(r, 1).rank() == 2 &&
      InputShape(r, 0).rank() > 2) {
    // A weight applied to a batch of matrices: its gradient is one GEMM over all the batch's rows
    // (a reshape merges the leading axes), not a product per batch element summed afterwards.
    const auto rows = [&](const std::string& x, int64_t columns) {
      AttributeMap map;
      map["shape"] = IntListAttribute({-1, columns});
      return b->Emit("reshape", {x}, std::move(map))[0];
    };
    const Shape& a_shape = InputShape(r, 0);
    const std::string a_rows = rows(a, a_shape.dimension(a_shape.rank() - 1));
    const std::string dy_rows = rows(dy, out.dimension(out.rank() - 1));
    gradients[1] =
        *transpose_b ? matmul(dy_rows, a_rows, true, false) : matmul(a_rows, dy_rows, true, false);
  } else if (r.needs_input_gradient[1]) {
    std::string dw;
    if (!*transpose_b) {
      dw = *transpose_a ? matmul(a, dy, false, false) : matmul(a, dy, true, false);
    } else {
      dw = *transpose_a ? matmul(dy, a, true, true) : matmul(dy, a, true, false);
    }
    gradients[1] = sum_to(dw, 1, product_shape(1));
  }
  return gradients;
}

absl::StatusOr<Names> ReduceGradient(bool mean, const GradientRequest& r, GradientBuilder* b) {
  if (!r.needs_input_gradient[0]) return Names(1);
  OpAttributes attributes = r.op->attributes_reader();
  const Shape& x = InputShape(r, 0);
  std::vector<int64_t> axes;
  if (attributes.Has("axes")) {
    absl::StatusOr<std::vector<int64_t>> listed = attributes.GetIntList("axes");
    if (!listed.ok()) return listed.status();
    axes = *listed;
  }
  if (axes.empty()) {
    for (int axis = 0; axis < x.rank(); ++axis) axes.push_back(axis);
  }
  absl::StatusOr<std::vector<int>> normalized = NormalizeAxes(axes, x.rank(), "axis");
  if (!normalized.ok()) return normalized.status();
  int64_t count = 1;
  for (int axis : *normalized) count *= x.dimension(axis);
  AttributeMap map;
  map["shape"] = ListAttribute(Dimensions(x));
  if (!normalized->empty()) {
    map["axes"] = ListAttribute(std::vector<int64_t>(normalized->begin(), normalized->end()));
  }
  map["scale"] = FloatAttribute(mean ? 1.0 / static_cast<double>(count) : 1.0);
  return Names{b->Emit("broadcast_to", {r.output_gradients[0]}, std::move(map))[0]};
}

absl::StatusOr<Names> ReduceSumGradient(const GradientRequest& r, GradientBuilder* b) {
  return ReduceGradient(false, r, b);
}
absl::StatusOr<Names> ReduceMeanGradient(const GradientRequest& r, GradientBuilder* b) {
  return ReduceGradient(true, r, b);
}

absl::StatusOr<Names> SoftmaxGradient(const GradientRequest& r, GradientBuilder* b) {
  return Only(r, {b->Emit("softmax_grad", {r.outputs[0], r.output_gradients[0]}, {})[0]});
}
absl::StatusOr<Names> LogSoftmaxGradient(const GradientRequest& r, GradientBuilder* b) {
  return Only(r, {b->Emit("log_softmax_grad", {r.outputs[0], r.output_gradients[0]}, {})[0]});
}

// Only the logits: labels are integers.
absl::StatusOr<Names> SparseCrossEntropyGradient(const GradientRequest& r, GradientBuilder* b) {
  Names gradients(2);
  if (!r.needs_input_gradient[0]) return gradients;
  AttributeMap map;
  if (auto found = r.op->attributes->find("ignore_index"); found != r.op->attributes->end()) {
    map["ignore_index"] = found->second;
  }
  gradients[0] = b->Emit("sparse_cross_entropy_grad",
                         {r.inputs[0], r.inputs[1], r.output_gradients[0]}, std::move(map))[0];
  return gradients;
}

absl::StatusOr<Names> LayerNormGradient(const GradientRequest& r, GradientBuilder* b) {
  AttributeMap map;
  if (auto found = r.op->attributes->find("epsilon"); found != r.op->attributes->end()) {
    map["epsilon"] = found->second;
  }
  Names outputs = b->Emit("layer_norm_grad", {r.inputs[0], r.inputs[1], r.output_gradients[0]},
                          std::move(map), 3);
  return Only(r, outputs);
}

absl::StatusOr<Names> ReshapeGradient(const GradientRequest& r, GradientBuilder* b) {
  AttributeMap map;
  map["shape"] = ListAttribute(Dimensions(InputShape(r, 0)));
  return Only(r, {b->Emit("reshape", {r.output_gradients[0]}, std::move(map))[0]});
}

absl::StatusOr<Names> TransposeGradient(const GradientRequest& r, GradientBuilder* b) {
  absl::StatusOr<std::vector<int64_t>> permutation =
      r.op->attributes_reader().GetIntList("permutation");
  if (!permutation.ok()) return permutation.status();
  std::vector<int64_t> inverse(permutation->size());
  for (size_t k = 0; k < permutation->size(); ++k) inverse[(*permutation)[k]] = k;
  AttributeMap map;
  map["permutation"] = ListAttribute(inverse);
  return Only(r, {b->Emit("transpose", {r.output_gradients[0]}, std::move(map))[0]});
}

absl::StatusOr<Names> SliceGradient(const GradientRequest& r, GradientBuilder* b) {
  absl::StatusOr<std::vector<int64_t>> begin = r.op->attributes_reader().GetIntList("begin");
  if (!begin.ok()) return begin.status();
  AttributeMap map;
  map["shape"] = ListAttribute(Dimensions(InputShape(r, 0)));
  map["begin"] = ListAttribute(*begin);
  return Only(r, {b->Emit("pad", {r.output_gradients[0]}, std::move(map))[0]});
}

// Each input's part of dy: a slice along the axis.
absl::StatusOr<Names> ConcatGradient(const GradientRequest& r, GradientBuilder* b) {
  absl::StatusOr<int64_t> axis = r.op->attributes_reader().GetInt("axis");
  if (!axis.ok()) return axis.status();
  const Shape& y = r.op->outputs[0].shape;
  absl::StatusOr<int> normalized = NormalizeAxis(*axis, y.rank(), "axis");
  if (!normalized.ok()) return normalized.status();
  Names gradients(r.inputs.size());
  int64_t offset = 0;
  for (size_t i = 0; i < r.inputs.size(); ++i) {
    const Shape& x = InputShape(r, static_cast<int>(i));
    std::vector<int64_t> begin(y.rank(), 0);
    std::vector<int64_t> end = Dimensions(y);
    begin[*normalized] = offset;
    end[*normalized] = offset + x.dimension(*normalized);
    offset = end[*normalized];
    if (!r.needs_input_gradient[i]) continue;
    AttributeMap map;
    map["begin"] = ListAttribute(begin);
    map["end"] = ListAttribute(end);
    gradients[i] = b->Emit("slice", {r.output_gradients[0]}, std::move(map))[0];
  }
  return gradients;
}

// Only the table: ids are integers.
absl::StatusOr<Names> EmbeddingGradient(const GradientRequest& r, GradientBuilder* b) {
  Names gradients(2);
  if (!r.needs_input_gradient[0]) return gradients;
  AttributeMap map;
  map["rows"] = IntAttribute(InputShape(r, 0).dimension(0));
  gradients[0] = b->Emit("embedding_grad", {r.inputs[1], r.output_gradients[0]}, std::move(map))[0];
  return gradients;
}

absl::StatusOr<Names> CausalAttentionGradient(const GradientRequest& r, GradientBuilder* b) {
  AttributeMap map;
  if (auto found = r.op->attributes->find("scale"); found != r.op->attributes->end()) {
    map["scale"] = found->second;
  }
  Names outputs =
      b->Emit("causal_attention_grad",
              {r.inputs[0], r.inputs[1], r.inputs[2], r.output_gradients[0]}, std::move(map), 3);
  return Only(r, outputs);
}

// Only slot_weight is differentiable; the slots and counts are piecewise constant in probs.
absl::StatusOr<Names> MoeRouteGradient(const GradientRequest& r, GradientBuilder* b) {
  Names gradients(1);
  if (!r.needs_input_gradient[0] || r.output_gradients[1].empty()) return gradients;
  AttributeMap map;
  map["k"] = r.op->attributes->at("k");
  gradients[0] = b->Emit("moe_route_grad", {r.inputs[0], r.outputs[0], r.output_gradients[1]},
                         std::move(map))[0];
  return gradients;
}

absl::StatusOr<Names> MoeDispatchGradient(const GradientRequest& r, GradientBuilder* b) {
  Names gradients(2);
  if (!r.needs_input_gradient[0]) return gradients;
  AttributeMap map;
  map["tokens"] = IntAttribute(InputShape(r, 0).dimension(1));
  gradients[0] =
      b->Emit("moe_dispatch_grad", {r.output_gradients[0], r.inputs[1]}, std::move(map))[0];
  return gradients;
}

// y[t] = sum over t's slots of w * expert_out: dexpert_out = w * dy[t], dw = expert_out . dy[t],
// with dy's rows brought to the slots by moe_dispatch.
absl::StatusOr<Names> MoeCombineGradient(const GradientRequest& r, GradientBuilder* b) {
  Names gradients(3);
  const bool need_rows = r.needs_input_gradient[0];
  const bool need_weights = r.needs_input_gradient[2];
  if (!need_rows && !need_weights) return gradients;
  const std::string slot_rows = Binary(b, "moe_dispatch", r.output_gradients[0], r.inputs[1]);
  if (need_rows) {
    std::vector<int64_t> weight_shape = Dimensions(InputShape(r, 2));
    weight_shape.push_back(1);
    AttributeMap map;
    map["shape"] = ListAttribute(weight_shape);
    const std::string weights = b->Emit("reshape", {r.inputs[2]}, std::move(map))[0];
    gradients[0] = Binary(b, "multiply", slot_rows, weights);
  }
  if (need_weights) {
    const std::string products = Binary(b, "multiply", r.inputs[0], slot_rows);
    AttributeMap map;
    map["axes"] = ListAttribute({3});
    gradients[2] = b->Emit("reduce_sum", {products}, std::move(map))[0];
  }
  return gradients;
}

const absl::flat_hash_map<std::string, GradientFunction>& GradientTable() {
  static const auto* table = new absl::flat_hash_map<std::string, GradientFunction>{
      {"matmul", MatmulGradient},
      {"add", AddGradient},
      {"subtract", SubtractGradient},
      {"multiply", MultiplyGradient},
      {"divide", DivideGradient},
      {"relu", ReluGradient},
      {"gelu", GeluGradient},
      {"tanh", TanhGradient},
      {"scale", ScaleGradient},
      {"identity", IdentityGradient},
      {"offload", IdentityGradient},
      {"reload", IdentityGradient},
      {"cast", CastGradient},
      {"bias_add", BiasAddGradient},
      {"reduce_sum", ReduceSumGradient},
      {"reduce_mean", ReduceMeanGradient},
      {"softmax", SoftmaxGradient},
      {"log_softmax", LogSoftmaxGradient},
      {"sparse_cross_entropy", SparseCrossEntropyGradient},
      {"layer_norm", LayerNormGradient},
      {"reshape", ReshapeGradient},
      {"transpose", TransposeGradient},
      {"slice", SliceGradient},
      {"concat", ConcatGradient},
      {"embedding", EmbeddingGradient},
      {"causal_attention", CausalAttentionGradient},
      {"moe_route", MoeRouteGradient},
      {"moe_dispatch", MoeDispatchGradient},
      {"moe_combine", MoeCombineGradient},
  };
  return *table;
}

class WithGradientOp final : public OpDefinition {
 public:
  WithGradientOp(std::unique_ptr<OpDefinition> definition, GradientFunction gradient)
      : definition_(std::move(definition)), gradient_(gradient) {}

  absl::StatusOr<std::vector<TensorType>> InferTypes(const OpContext& context) const override {
    return definition_->InferTypes(context);
  }
  std::vector<SbpSignature> SbpSignatures(const OpContext& context, int64_t degree) const override {
    return definition_->SbpSignatures(context, degree);
  }
  int OrderingInputsFrom(const OpContext& context) const override {
    return definition_->OrderingInputsFrom(context);
  }
  double Flops(const OpContext& context) const override { return definition_->Flops(context); }
  absl::StatusOr<plan::KernelConf> Lower(const std::string& op_type,
                                         const LoweringContext& context) const override {
    return definition_->Lower(op_type, context);
  }
  absl::StatusOr<std::vector<std::string>> Gradient(const GradientRequest& request,
                                                    GradientBuilder* builder) const override {
    return gradient_(request, builder);
  }

 private:
  std::unique_ptr<OpDefinition> definition_;
  GradientFunction gradient_;
};

}  // namespace

std::unique_ptr<OpDefinition> WithGradient(const std::string& op_type,
                                           std::unique_ptr<OpDefinition> definition) {
  auto found = GradientTable().find(op_type);
  if (found == GradientTable().end()) return definition;
  return std::make_unique<WithGradientOp>(std::move(definition), found->second);
}

}  // namespace loom::compiler
