// Op definitions of compiler/ops/: type inference (good inputs and the messages for bad ones), SBP
// signatures, cost hints and lowering.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compiler/op_definition.h"
#include "compiler/sbp.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom::compiler {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::UnorderedElementsAre;

TensorType Float32(const Shape& shape) { return TensorType{shape, plan::FLOAT32}; }
TensorType Bfloat16(const Shape& shape) { return TensorType{shape, plan::BFLOAT16}; }
TensorType Int32(const Shape& shape) { return TensorType{shape, plan::INT32}; }
TensorType Int64(const Shape& shape) { return TensorType{shape, plan::INT64}; }

// One op under test: its definition from the standard registry, its inputs and attributes.
class TestOp {
 public:
  TestOp(const std::string& op_type, std::vector<TensorType> inputs) : op_type_(op_type) {
    absl::Status status = RegisterStandardOps(&registry_);
    EXPECT_TRUE(status.ok()) << status;
    definition_ = registry_.Find(op_type);
    EXPECT_NE(definition_, nullptr) << op_type;
    context_.op_name = "op";
    context_.inputs = std::move(inputs);
    context_.attributes = &attributes_;
  }
  TestOp(const TestOp&) = delete;
  TestOp& operator=(const TestOp&) = delete;

  TestOp& Int(const std::string& name, int64_t value) {
    attributes_[name].set_int_value(value);
    return *this;
  }
  TestOp& Float(const std::string& name, double value) {
    attributes_[name].set_float_value(value);
    return *this;
  }
  TestOp& String(const std::string& name, const std::string& value) {
    attributes_[name].set_string_value(value);
    return *this;
  }
  TestOp& Bool(const std::string& name, bool value) {
    attributes_[name].set_bool_value(value);
    return *this;
  }
  TestOp& IntList(const std::string& name, const std::vector<int64_t>& values) {
    plan::AttributeValue& attribute = attributes_[name];
    attribute.mutable_int_list()->clear_values();
    for (int64_t value : values) attribute.mutable_int_list()->add_values(value);
    return *this;
  }

  // Type inference; on success the outputs are recorded for the other calls.
  absl::StatusOr<std::vector<TensorType>> Infer() {
    absl::StatusOr<std::vector<TensorType>> outputs = definition_->InferTypes(context_);
    if (outputs.ok()) context_.outputs = *outputs;
    return outputs;
  }

  // The single output's type; fails the test when inference fails.
  TensorType Output() {
    absl::StatusOr<std::vector<TensorType>> outputs = Infer();
    EXPECT_TRUE(outputs.ok()) << outputs.status();
    if (!outputs.ok() || outputs->size() != 1) return TensorType{};
    return (*outputs)[0];
  }

  // The message of a failed inference ("" when it succeeds).
  std::string Error() {
    absl::StatusOr<std::vector<TensorType>> outputs = Infer();
    if (outputs.ok()) return "";
    EXPECT_EQ(outputs.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(outputs.status().message());
  }

  // The signatures as "(S(0), B) -> (S(0))" strings, after a successful inference.
  std::vector<std::string> Signatures(int64_t degree) {
    Output();
    std::vector<std::string> texts;
    for (const SbpSignature& signature : definition_->SbpSignatures(context_, degree)) {
      EXPECT_EQ(signature.inputs.size(), context_.inputs.size()) << signature.ToString();
      EXPECT_EQ(signature.outputs.size(), context_.outputs.size()) << signature.ToString();
      texts.push_back(signature.ToString());
    }
    return texts;
  }

  double Flops() {
    Output();
    return definition_->Flops(context_);
  }

  // Lowers one rank: `input_sbp` per input (one Sbp per hierarchy axis), the local input types,
  // the rank's coordinates and the hierarchy.
  absl::StatusOr<plan::KernelConf> Lower(std::vector<NdSbp> input_sbp,
                                         std::vector<TensorType> local_inputs,
                                         std::vector<int64_t> coordinates,
                                         std::vector<int64_t> hierarchy) {
    Output();
    LoweringContext lowering;
    lowering.op = &context_;
    lowering.input_sbp = std::move(input_sbp);
    lowering.local_inputs = std::move(local_inputs);
    lowering.coordinates = std::move(coordinates);
    lowering.hierarchy = std::move(hierarchy);
    return definition_->Lower(op_type_, lowering);
  }

  const OpDefinition* definition() const { return definition_; }
  const OpContext& context() const { return context_; }

  // Lowering on one device with everything broadcast.
  absl::StatusOr<plan::KernelConf> LowerOnOneDevice() {
    return Lower(std::vector<NdSbp>(context_.inputs.size(), NdSbp{Sbp::Broadcast()}),
                 context_.inputs, {0}, {1});
  }

 private:
  std::string op_type_;
  OpRegistry registry_;
  const OpDefinition* definition_ = nullptr;
  AttributeMap attributes_;
  OpContext context_;
};

std::vector<std::string> AttributeNames(const plan::KernelConf& conf) {
  std::vector<std::string> names;
  for (const auto& [name, value] : conf.attributes()) names.push_back(name);
  return names;
}

std::vector<int64_t> IntListOf(const plan::KernelConf& conf, const std::string& name) {
  const auto& values = conf.attributes().at(name).int_list().values();
  return std::vector<int64_t>(values.begin(), values.end());
}

NdSbp Split(int axis) { return NdSbp{Sbp::Split(axis)}; }
NdSbp Broadcast() { return NdSbp{Sbp::Broadcast()}; }

TEST(StandardOpsTest, RegistersEveryOp) {
  OpRegistry registry;
  ASSERT_TRUE(RegisterStandardOps(&registry).ok());
  for (const char* op_type : {"matmul", "add", "bias_add", "softmax", "log_softmax", "layer_norm",
                              "embedding", "reshape", "transpose", "slice", "concat", "reduce_sum",
                              "reduce_mean", "sparse_cross_entropy", "causal_attention"}) {
    EXPECT_NE(registry.Find(op_type), nullptr) << op_type;
  }
  // The ops autodiff emits; pad is also the gradient of slice.
  for (const char* op_type :
       {"ones_like", "relu_grad", "gelu_grad", "tanh_grad", "softmax_grad", "log_softmax_grad",
        "layer_norm_grad", "embedding_grad", "sparse_cross_entropy_grad", "causal_attention_grad",
        "reduce_sum_to", "broadcast_to", "pad"}) {
    EXPECT_NE(registry.Find(op_type), nullptr) << op_type;
  }
}

// Megatron's MLP: column-parallel then row-parallel matmul.
TEST(MatmulOpTest, MegatronSignatures) {
  TestOp column("matmul", {Float32({8, 16}), Float32({16, 32})});
  std::vector<std::string> signatures = column.Signatures(2);
  EXPECT_THAT(signatures, Contains("(B, S(1)) -> (S(1))"));
  EXPECT_THAT(signatures, Contains("(S(1), S(0)) -> (P)"));
  EXPECT_THAT(signatures, Contains("(S(0), B) -> (S(0))"));
}

TEST(MatmulOpTest, TakesTwoBfloat16InputsAndGivesBfloat16) {
  TestOp op("matmul", {Bfloat16({8, 16}), Bfloat16({16, 32})});
  EXPECT_EQ(op.Output(), Bfloat16({8, 32}));
  EXPECT_THAT(op.Signatures(2), Contains("(S(1), S(0)) -> (P)"));
  EXPECT_EQ(TestOp("matmul", {Bfloat16({8, 16}), Float32({16, 32})}).Error(),
            "needs two float32 or two bfloat16 inputs, not bfloat16 and float32");
  EXPECT_EQ(TestOp("matmul", {Int32({8, 16}), Int32({16, 32})}).Error(),
            "needs two float32 or two bfloat16 inputs, not int32 and int32");
}

TEST(CastOpTest, WideningKeepsPartialSums) {
  TestOp up("cast", {Bfloat16({4, 6})});
  up.String("to", "float32");
  EXPECT_EQ(up.Output(), Float32({4, 6}));
  EXPECT_THAT(up.Signatures(2),
              ElementsAre("(S(0)) -> (S(0))", "(S(1)) -> (S(1))", "(P) -> (P)", "(B) -> (B)"));
}

TEST(CastOpTest, InfersTheTypeValidatesAndPassesSplitsThrough) {
  TestOp down("cast", {Float32({4, 6})});
  down.String("to", "bfloat16");
  EXPECT_EQ(down.Output(), (TensorType{Shape{4, 6}, plan::BFLOAT16}));
  // Rounding each part of a partial sum is not rounding the sum: no (P) -> (P).
  EXPECT_THAT(down.Signatures(2),
              ElementsAre("(S(0)) -> (S(0))", "(S(1)) -> (S(1))", "(B) -> (B)"));
  EXPECT_EQ(TestOp("cast", {Float32({4})}).Error(), "missing attribute 'to'");
  EXPECT_EQ(TestOp("cast", {Int64({4})}).String("to", "float32").Error(),
            "casts between float32 and bfloat16, not from int64 to 'float32'");
  EXPECT_EQ(TestOp("cast", {Float32({4})}).String("to", "float16").Error(),
            "casts between float32 and bfloat16, not from float32 to 'float16'");
  EXPECT_EQ(TestOp("cast", {Float32({4})}).Int("to", 3).Error(), "attribute 'to' must be a string");
}

TEST(BiasAddOpTest, InfersTheInputType) {
  TestOp op("bias_add", {Float32({4, 6}), Float32({6})});
  EXPECT_EQ(op.Output(), Float32({4, 6}));
}

TEST(BiasAddOpTest, RejectsBadInputs) {
  EXPECT_EQ(TestOp("bias_add", {Float32({4, 6}), Float32({5})}).Error(),
            "bias must have shape [6] (the last axis of x [4, 6]), not [5]");
  EXPECT_EQ(TestOp("bias_add", {Float32({4, 6})}).Error(), "takes 2 inputs, not 1");
  EXPECT_EQ(TestOp("bias_add", {Int32({4, 6}), Float32({6})}).Error(),
            "input 'x' must be float32, not int32");
  EXPECT_EQ(TestOp("bias_add", {Float32({}), Float32({1})}).Error(),
            "input 'x' must have rank >= 1, not 0 (shape [])");
  EXPECT_EQ(TestOp("bias_add", {Float32({4, 6}), Float32({6})}).Int("axis", 1).Error(),
            "unknown attribute 'axis' (known: none)");
}

TEST(BiasAddOpTest, Signatures) {
  TestOp op("bias_add", {Float32({4, 6}), Float32({6})});
  EXPECT_THAT(op.Signatures(2), ElementsAre("(S(0), B) -> (S(0))", "(S(1), S(0)) -> (S(1))",
                                            "(P, P) -> (P)", "(B, B) -> (B)"));
  // A partial x plus a broadcast bias would add the bias once per device.
  EXPECT_THAT(op.Signatures(2), Not(Contains("(P, B) -> (P)")));
  // 4 rows cannot be split 8 ways (one device would get none).
  EXPECT_THAT(op.Signatures(8), Not(Contains("(S(0), B) -> (S(0))")));
  EXPECT_EQ(op.Flops(), 24.0);
  absl::StatusOr<plan::KernelConf> conf = op.LowerOnOneDevice();
  ASSERT_TRUE(conf.ok()) << conf.status();
  EXPECT_EQ(conf->op_type(), "bias_add");
  EXPECT_THAT(AttributeNames(*conf), IsEmpty());
}

TEST(SoftmaxOpsTest, InferAndSignatures) {
  for (const char* op_type : {"softmax", "log_softmax"}) {
    SCOPED_TRACE(op_type);
    TestOp op(op_type, {Float32({4, 3, 10})});
    EXPECT_EQ(op.Output(), Float32({4, 3, 10}));
    EXPECT_THAT(op.Signatures(2),
                ElementsAre("(S(0)) -> (S(0))", "(S(1)) -> (S(1))", "(B) -> (B)"));
    EXPECT_EQ(op.Flops(), 5.0 * 120);
    absl::StatusOr<plan::KernelConf> conf = op.LowerOnOneDevice();
    ASSERT_TRUE(conf.ok()) << conf.status();
    EXPECT_EQ(conf->op_type(), op_type);
    EXPECT_THAT(AttributeNames(*conf), IsEmpty());

    EXPECT_EQ(TestOp(op_type, {Float32({})}).Error(),
              "input 'x' must have rank >= 1, not 0 (shape [])");
    EXPECT_EQ(TestOp(op_type, {Int64({4})}).Error(), "input 'x' must be float32, not int64");
    EXPECT_EQ(TestOp(op_type, {Float32({4}), Float32({4})}).Error(), "takes 1 inputs, not 2");
  }
}

TEST(LayerNormOpTest, InfersAndValidates) {
  TestOp op("layer_norm", {Float32({2, 5, 8}), Float32({8}), Float32({8})});
  EXPECT_EQ(op.Output(), Float32({2, 5, 8}));
  EXPECT_EQ(TestOp("layer_norm", {Float32({2, 8}), Float32({8}), Float32({7})}).Error(),
            "beta must have shape [8] (the last axis of x [2, 8]), not [7]");
  EXPECT_EQ(TestOp("layer_norm", {Float32({2, 8}), Float32({2, 8}), Float32({8})}).Error(),
            "gamma must have shape [8] (the last axis of x [2, 8]), not [2, 8]");
  EXPECT_EQ(TestOp("layer_norm", {Float32({2, 8}), Float32({8})}).Error(), "takes 3 inputs, not 2");
  EXPECT_EQ(TestOp("layer_norm", {Float32({2, 8}), Float32({8}), Float32({8})})
                .Float("epsilon", -1)
                .Error(),
            "attribute 'epsilon' must be finite and >= 0, not -1");
  EXPECT_EQ(
      TestOp("layer_norm", {Float32({2, 8}), Float32({8}), Float32({8})}).Float("eps", 1).Error(),
      "unknown attribute 'eps' (known: epsilon)");
}

TEST(LayerNormOpTest, SignaturesAndLowering) {
  TestOp op("layer_norm", {Float32({2, 5, 8}), Float32({8}), Float32({8})});
  EXPECT_THAT(op.Signatures(2),
              ElementsAre("(S(0), B, B) -> (S(0))", "(S(1), B, B) -> (S(1))", "(B, B, B) -> (B)"));
  EXPECT_THAT(op.Signatures(4), ElementsAre("(S(1), B, B) -> (S(1))", "(B, B, B) -> (B)"));
  absl::StatusOr<plan::KernelConf> conf = op.LowerOnOneDevice();
  ASSERT_TRUE(conf.ok()) << conf.status();
  EXPECT_THAT(AttributeNames(*conf), ElementsAre("epsilon"));
  EXPECT_DOUBLE_EQ(conf->attributes().at("epsilon").float_value(), 1e-5);

  TestOp custom("layer_norm", {Float32({2, 8}), Float32({8}), Float32({8})});
  custom.Float("epsilon", 1e-6);
  conf = custom.LowerOnOneDevice();
  ASSERT_TRUE(conf.ok()) << conf.status();
  EXPECT_DOUBLE_EQ(conf->attributes().at("epsilon").float_value(), 1e-6);
}

TEST(MoeOpsTest, RouteInfersSlotsOfTheCapacityAndValidates) {
  // C = ceil(1.25 * 64 * 2 / 4) = 40; k = 1 with 8 experts: ceil(1.25 * 64 / 8) = 10.
  TestOp route("moe_route", {Float32({16, 64, 4})});
  route.Int("k", 2).Float("capacity_factor", 1.25);
  absl::StatusOr<std::vector<TensorType>> outputs = route.Infer();
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  EXPECT_THAT(*outputs, ElementsAre(Int32({16, 4, 40}), Float32({16, 4, 40}), Float32({16, 4}),
                                    Float32({16})));
  EXPECT_THAT(route.Signatures(2),
              UnorderedElementsAre("(S(0)) -> (S(0), S(0), S(0), S(0))", "(B) -> (B, B, B, B)"));
  absl::StatusOr<plan::KernelConf> conf = route.LowerOnOneDevice();
  ASSERT_TRUE(conf.ok()) << conf.status();
  EXPECT_EQ(conf->attributes().size(), 1u);
  EXPECT_EQ(conf->attributes().at("k").int_value(), 2);
  TestOp top_one("moe_route", {Float32({2, 64, 8})});
  top_one.Int("k", 1).Int("capacity_factor", 1);
  EXPECT_EQ(top_one.Infer()->at(0), Int32({2, 8, 8}));
  // A huge factor is capped at the tokens (an expert takes a token once).
  TestOp huge("moe_route", {Float32({2, 5, 2})});
  huge.Int("k", 2).Float("capacity_factor", 1e30);
  EXPECT_EQ(huge.Infer()->at(0), Int32({2, 2, 5}));

  EXPECT_EQ(
      TestOp("moe_route", {Float32({2, 5, 2})}).Int("k", 3).Float("capacity_factor", 1).Error(),
      "attribute 'k' must be 1 or 2 (experts per token), not 3");
  EXPECT_EQ(
      TestOp("moe_route", {Float32({2, 5, 1})}).Int("k", 2).Float("capacity_factor", 1).Error(),
      "attribute 'k' = 2 is more than the 1 experts (probs' last axis)");
  EXPECT_EQ(TestOp("moe_route", {Float32({2, 5, 2})}).Int("k", 1).Error(),
            "attribute 'capacity_factor' is required (e.g. 1.25)");
  EXPECT_EQ(
      TestOp("moe_route", {Float32({2, 5, 2})}).Int("k", 1).Float("capacity_factor", -1).Error(),
      "attribute 'capacity_factor' must be finite and > 0, not -1");
  EXPECT_EQ(TestOp("moe_route", {Float32({10, 2})}).Int("k", 1).Float("capacity_factor", 1).Error(),
            "input 'probs' must be [groups, tokens, experts], not float32[10, 2]");
  EXPECT_THAT(TestOp("moe_route", {Float32({2, 5, 2})})
                  .Int("k", 1)
                  .Float("capacity_factor", 1)
                  .Int("top_k", 1)
                  .Error(),
              HasSubstr("unknown attribute 'top_k'"));
}

TEST(MoeOpsTest, DispatchAndCombineInferAndValidate) {
  TestOp dispatch("moe_dispatch", {Float32({4, 6, 8}), Int32({4, 3, 5})});
  EXPECT_EQ(dispatch.Output(), Float32({4, 3, 5, 8}));
  EXPECT_THAT(dispatch.Signatures(2),
              UnorderedElementsAre("(S(0), S(0)) -> (S(0))", "(S(2), B) -> (S(3))", "(P, B) -> (P)",
                                   "(B, B) -> (B)"));
  EXPECT_EQ(TestOp("moe_dispatch", {Float32({4, 6, 8}), Int64({4, 3, 5})}).Error(),
            "input 'slot_token' must be int32, not int64");
  EXPECT_EQ(TestOp("moe_dispatch", {Float32({4, 6, 8}), Int32({2, 3, 5})}).Error(),
            "input 'slot_token' must be [groups, experts, capacity] with 4 groups, not "
            "int32[2, 3, 5]");

  TestOp combine("moe_combine", {Float32({4, 3, 5, 8}), Int32({4, 3, 5}), Float32({4, 3, 5})});
  combine.Int("tokens", 6);
  EXPECT_EQ(combine.Output(), Float32({4, 6, 8}));
  EXPECT_THAT(combine.Signatures(2),
              UnorderedElementsAre("(S(0), S(0), S(0)) -> (S(0))", "(S(3), B, B) -> (S(2))",
                                   "(P, B, B) -> (P)", "(B, B, B) -> (B)"));
  EXPECT_EQ(
      TestOp("moe_combine", {Float32({4, 3, 5, 8}), Int32({4, 3, 5}), Float32({4, 3, 5})}).Error(),
      "missing attribute 'tokens'");
  EXPECT_EQ(TestOp("moe_combine", {Float32({4, 3, 5, 8}), Int32({4, 3, 5}), Float32({4, 3})})
                .Int("tokens", 6)
                .Error(),
            "input 'slot_weight' float32[4, 3] must have slot_token's shape int32[4, 3, 5]");
  EXPECT_EQ(TestOp("moe_combine", {Float32({4, 3, 4, 8}), Int32({4, 3, 5}), Float32({4, 3, 5})})
                .Int("tokens", 6)
                .Error(),
            "input 'expert_out' must be [groups, experts, capacity, width] of slot_token "
            "int32[4, 3, 5], not float32[4, 3, 4, 8]");
}

TEST(MoeOpsTest, RouteNamesEveryBadSettingAndInput) {
  auto route_error = [](TensorType probs, int64_t k, double capacity_factor) {
    return TestOp("moe_route", {probs})
        .Int("k", k)
        .Float("capacity_factor", capacity_factor)
        .Error();
  };
  EXPECT_EQ(route_error(Float32({2, 5, 4}), 0, 1),
            "attribute 'k' must be 1 or 2 (experts per token), not 0");
  EXPECT_EQ(route_error(Float32({2, 5, 4}), 1, 0),
            "attribute 'capacity_factor' must be finite and > 0, not 0");
  EXPECT_EQ(route_error(Float32({2, 5, 4}), 1, std::nan("")),
            "attribute 'capacity_factor' must be finite and > 0, not nan");
  EXPECT_EQ(route_error(Float32({2, 5, 4}), 2, std::numeric_limits<double>::infinity()),
            "attribute 'capacity_factor' must be finite and > 0, not inf");
  EXPECT_EQ(route_error(TensorType{Shape({2, 5, 4}), plan::BFLOAT16}, 1, 1),
            "input 'probs' must be float32, not bfloat16");
  EXPECT_EQ(route_error(Float32({2, 2, 5, 4}), 1, 1),
            "input 'probs' must be [groups, tokens, experts], not float32[2, 2, 5, 4]");
  EXPECT_EQ(route_error(Float32({2, 5, 0}), 1, 1),
            "input 'probs' float32[2, 5, 0] needs at least one token and one expert");
  EXPECT_EQ(TestOp("moe_route", {Float32({2, 5, 4})}).Float("capacity_factor", 1).Error(),
            "missing attribute 'k'");
  EXPECT_EQ(TestOp("moe_route", {Float32({2, 5, 4}), Float32({2, 5, 4})})
                .Int("k", 1)
                .Float("capacity_factor", 1)
                .Error(),
            "takes 1 inputs, not 2");
  // Groups fewer than the devices: only the broadcast signature. Cost: 2 |probs|.
  TestOp route("moe_route", {Float32({1, 8, 4})});
  route.Int("k", 1).Float("capacity_factor", 0.1);
  EXPECT_EQ(route.Infer()->at(0), Int32({1, 4, 1}));  // at least one slot
  EXPECT_THAT(route.Signatures(2), ElementsAre("(B) -> (B, B, B, B)"));
  EXPECT_EQ(route.Flops(), 2.0 * 32);
}

TEST(MoeOpsTest, RouteGradInfersSignaturesAndLowers) {
  TestOp grad("moe_route_grad", {Float32({4, 6, 3}), Int32({4, 3, 5}), Float32({4, 3, 5})});
  grad.Int("k", 2);
  EXPECT_EQ(grad.Output(), Float32({4, 6, 3}));
  EXPECT_THAT(grad.Signatures(2), UnorderedElementsAre("(S(0), S(0), S(0)) -> (S(0))",
                                                       "(B, B, P) -> (P)", "(B, B, B) -> (B)"));
  absl::StatusOr<plan::KernelConf> conf = grad.LowerOnOneDevice();
  ASSERT_TRUE(conf.ok()) << conf.status();
  EXPECT_THAT(AttributeNames(*conf), ElementsAre("k"));
  EXPECT_EQ(conf->attributes().at("k").int_value(), 2);
  EXPECT_EQ(TestOp("moe_route_grad", {Float32({4, 6, 3}), Int32({4, 3, 5}), Float32({4, 3, 5})})
                .Int("k", 4)
                .Error(),
            "attribute 'k' must be in [1, experts], not 4");
  EXPECT_EQ(TestOp("moe_route_grad", {Float32({4, 6, 3}), Int32({4, 2, 5}), Float32({4, 2, 5})})
                .Int("k", 1)
                .Error(),
            "slot_token int32[4, 2, 5] and dslot_weight float32[4, 2, 5] must both be [groups, "
            "experts, capacity] of probs float32[4, 6, 3]");
  EXPECT_EQ(TestOp("moe_route_grad", {Float32({4, 6, 3}), Int32({4, 3, 5}), Int32({4, 3, 5})})
                .Int("k", 1)
                .Error(),
            "input 'dslot_weight' must be float32, not int32");
}

TEST(MoeOpsTest, DispatchCombineAndDispatchGradLowerAndCost) {
  TestOp dispatch("moe_dispatch", {Float32({4, 6, 8}), Int32({4, 3, 5})});
  EXPECT_EQ(dispatch.Flops(), 4.0 * 3 * 5 * 8);
  absl::StatusOr<plan::KernelConf> conf = dispatch.LowerOnOneDevice();
  ASSERT_TRUE(conf.ok()) << conf.status();
  EXPECT_THAT(AttributeNames(*conf), IsEmpty());
  // Width smaller than the devices: no width split.
  TestOp narrow("moe_dispatch", {Float32({4, 6, 1}), Int32({4, 3, 5})});
  EXPECT_THAT(narrow.Signatures(2), Not(Contains("(S(2), B) -> (S(3))")));
  EXPECT_EQ(TestOp("moe_dispatch", {Float32({4, 6}), Int32({4, 3, 5})}).Error(),
            "input 'x' must be [groups, tokens, width], not float32[4, 6]");
  EXPECT_EQ(TestOp("moe_dispatch", {Int32({4, 6, 8}), Int32({4, 3, 5})}).Error(),
            "input 'x' must be float32, not int32");

  TestOp combine("moe_combine", {Float32({4, 3, 5, 8}), Int32({4, 3, 5}), Float32({4, 3, 5})});
  combine.Int("tokens", 6);
  EXPECT_EQ(combine.Flops(), 2.0 * 4 * 3 * 5 * 8);
  conf = combine.LowerOnOneDevice();
  ASSERT_TRUE(conf.ok()) << conf.status();
  EXPECT_THAT(AttributeNames(*conf), ElementsAre("tokens"));
  EXPECT_EQ(conf->attributes().at("tokens").int_value(), 6);
  EXPECT_EQ(TestOp("moe_combine", {Float32({4, 3, 5, 8}), Int32({4, 3, 5}), Float32({4, 3, 5})})
                .Int("tokens", 0)
                .Error(),
            "attribute 'tokens' (tokens per group) must be >= 1, not 0");

  TestOp grad("moe_dispatch_grad", {Float32({4, 3, 5, 8}), Int32({4, 3, 5})});
  grad.Int("tokens", 6);
  EXPECT_EQ(grad.Output(), Float32({4, 6, 8}));
  EXPECT_THAT(grad.Signatures(2),
              UnorderedElementsAre("(S(0), S(0)) -> (S(0))", "(S(3), B) -> (S(2))", "(P, B) -> (P)",
                                   "(B, B) -> (B)"));
  EXPECT_EQ(grad.Flops(), 4.0 * 3 * 5 * 8);
  conf = grad.LowerOnOneDevice();
  ASSERT_TRUE(conf.ok()) << conf.status();
  EXPECT_EQ(conf->attributes().at("tokens").int_value(), 6);
  EXPECT_EQ(TestOp("moe_dispatch_grad", {Float32({4, 3, 5, 8}), Int32({4, 3, 5})}).Error(),
            "missing attribute 'tokens'");
}

TEST(EmbeddingOpTest, InfersAndValidates) {
  EXPECT_EQ(TestOp("embedding", {Float32({7, 4}), Int64({2, 3})}).Output(), Float32({2, 3, 4}));
  EXPECT_EQ(TestOp("embedding", {Float32({7, 4}), Int32({5})}).Output(), Float32({5, 4}));
  EXPECT_EQ(TestOp("embedding", {Float32({7, 4}), Float32({5})}).Error(),
            "input 'ids' must be int32 or int64, not float32");
  EXPECT_EQ(TestOp("embedding", {Float32({28}), Int32({5})}).Error(),
            "table must have rank 2 ([rows, embedding dimension]), not [28]");
  EXPECT_THAT(TestOp("embedding", {Float32({7, 4}), Int32({5})}).Int("row_offset", 3).Error(),
              HasSubstr("set by the compiler"));
}

TEST(EmbeddingOpTest, Signatures) {
  TestOp op("embedding", {Float32({7, 4}), Int64({2, 3})});
  EXPECT_THAT(op.Signatures(2),
              UnorderedElementsAre("(B, S(0)) -> (S(0))", "(B, S(1)) -> (S(1))",
                                   "(S(1), B) -> (S(2))", "(S(0), B) -> (P)", "(B, B) -> (B)"));
  // 3 ids per row, 4 columns, 7 rows: only the vocabulary splits 5 ways.
  EXPECT_THAT(op.Signatures(5), UnorderedElementsAre("(S(0), B) -> (P)", "(B, B) -> (B)"));
}

TEST(EmbeddingOpTest, VocabParallelLoweringSetsTheRowOffset) {
  TestOp op("embedding", {Float32({7, 4}), Int64({2, 3})});
  // Rows 7 over 2 devices: [0, 4) and [4, 7).
  absl::StatusOr<plan::KernelConf> conf =
      op.Lower({Split(0), Broadcast()}, {Float32({3, 4}), Int64({2, 3})}, {1}, {2});
  ASSERT_TRUE(conf.ok()) << conf.status();
  EXPECT_EQ(conf->op_type(), "embedding");
  EXPECT_EQ(conf->attributes().at("row_offset").int_value(), 4);
  EXPECT_EQ(conf->attributes().at("logical_rows").int_value(), 7);

  conf = op.Lower({Split(0), Broadcast()}, {Float32({4, 4}), Int64({2, 3})}, {0}, {2});
  ASSERT_TRUE(conf.ok()) << conf.status();
  EXPECT_EQ(conf->attributes().at("row_offset").int_value(), 0);

  // (S(0), S(0)) on [2, 2]: [0, 4) | [4, 7), then [4, 6) | [6, 7) for coordinates (1, 1).
  conf = op.Lower({NdSbp{Sbp::Split(0), Sbp::Split(0)}, NdSbp{Sbp::Broadcast(), Sbp::Broadcast()}},
                  {Float32({1, 4}), Int64({2, 3})}, {1, 1}, {2, 2});
  ASSERT_TRUE(conf.ok()) << conf.status();
  EXPECT_EQ(conf->attributes().at("row_offset").int_value(), 6);

  // A whole table (data parallel) starts at row 0.
  conf = op.Lower({Broadcast(), Split(0)}, {Float32({7, 4}), Int64({1, 3})}, {1}, {2});
  ASSERT_TRUE(conf.ok()) << conf.status();
  EXPECT_EQ(conf->attributes().at("row_offset").int_value(), 0);
  EXPECT_EQ(conf->attributes().at("logical_rows").int_value(), 7);

  // A local table that disagrees with the balanced split is a compiler bug.
  conf = op.Lower({Split(0), Broadcast()}, {Float32({4, 4}), Int64({2, 3})}, {1}, {2});
  EXPECT_EQ(conf.status().code(), absl::StatusCode::kInternal);
}

TEST(ReshapeOpTest, Infers) {
  EXPECT_EQ(TestOp("reshape", {Float32({2, 3})}).IntList("shape", {3, 2}).Output(),
            Float32({3, 2}));
  EXPECT_EQ(TestOp("reshape", {Int64({2, 3, 4})}).IntList("shape", {-1, 4}).Output(),
            Int64({6, 4}));
  EXPECT_EQ(TestOp("reshape", {Float32({2, 3})}).IntList("shape", {}).Error(),
            "cannot reshape [2, 3] (6 elements) into [] (1 elements)");
}

TEST(ReshapeOpTest, RejectsBadShapes) {
  EXPECT_EQ(TestOp("reshape", {Float32({2, 3})}).IntList("shape", {4, 2}).Error(),
            "cannot reshape [2, 3] (6 elements) into [4, 2] (8 elements)");
  EXPECT_EQ(TestOp("reshape", {Float32({2, 3})}).IntList("shape", {4, -1}).Error(),
            "cannot reshape [2, 3] (6 elements) into [4, -1]: no extent for -1 gives 6 elements");
  EXPECT_EQ(TestOp("reshape", {Float32({2, 3})}).IntList("shape", {-1, -1}).Error(),
            "shape [-1, -1] has more than one -1 (at most one extent is inferred)");
  EXPECT_EQ(TestOp("reshape", {Float32({2, 3})}).IntList("shape", {-2, -3}).Error(),
            "shape [-2, -3] has extent -2 (extents are >= 0, or -1 for one inferred extent)");
  EXPECT_EQ(TestOp("reshape", {Float32({2, 3})}).Error(), "missing attribute 'shape'");
}

TEST(ReshapeOpTest, SplitsHeadsWhenTheyDivide) {
  // [B, T, D] -> [B, T, H, Dh] with D = 12, H = 4, Dh = 3.
  TestOp op("reshape", {Float32({2, 8, 12})});
  op.IntList("shape", {2, 8, 4, 3});
  EXPECT_THAT(op.Signatures(2), ElementsAre("(S(0)) -> (S(0))", "(S(1)) -> (S(1))",
                                            "(S(2)) -> (S(2))", "(P) -> (P)", "(B) -> (B)"));
  // 12 divides by 3 but 4 heads do not: device slices of D would cut heads apart.
  EXPECT_THAT(op.Signatures(3), Not(Contains("(S(2)) -> (S(2))")));
  EXPECT_THAT(op.Signatures(4), Contains("(S(2)) -> (S(2))"));
  absl::StatusOr<plan::KernelConf> conf = op.LowerOnOneDevice();
  ASSERT_TRUE(conf.ok()) << conf.status();
  EXPECT_EQ(conf->op_type(), "reshape");
  EXPECT_THAT(AttributeNames(*conf), IsEmpty()) << "the reshape kernel copies bytes";
}

TEST(ReshapeOpTest, MergesAndSplitsAxes) {
  TestOp merge("reshape", {Float32({4, 6})});
  merge.IntList("shape", {24});
  EXPECT_THAT(merge.Signatures(2), Contains("(S(0)) -> (S(0))"));
  EXPECT_THAT(merge.Signatures(2), Not(Contains("(S(1)) -> (S(0))")));
  TestOp uneven("reshape", {Float32({6, 4})});
  uneven.IntList("shape", {24});
  EXPECT_THAT(uneven.Signatures(4), ElementsAre("(P) -> (P)", "(B) -> (B)"));
  // [B, T, H, Dh] -> [B * T, H * Dh]: the heads axis maps to the merged feature axis.
  TestOp flatten("reshape", {Float32({2, 8, 4, 3})});
  flatten.IntList("shape", {16, 12});
  EXPECT_THAT(flatten.Signatures(2),
              ElementsAre("(S(0)) -> (S(0))", "(S(2)) -> (S(1))", "(P) -> (P)", "(B) -> (B)"));
}

TEST(TransposeOpTest, InfersAndMapsSplits) {
  TestOp op("transpose", {Float32({2, 3, 5})});
  op.IntList("permutation", {2, 0, 1});
  EXPECT_EQ(op.Output(), Float32({5, 2, 3}));
  EXPECT_THAT(op.Signatures(2), ElementsAre("(S(2)) -> (S(0))", "(S(0)) -> (S(1))",
                                            "(S(1)) -> (S(2))", "(P) -> (P)", "(B) -> (B)"));
  absl::StatusOr<plan::KernelConf> conf = op.LowerOnOneDevice();
  ASSERT_TRUE(conf.ok()) << conf.status();
  EXPECT_THAT(AttributeNames(*conf), ElementsAre("permutation"));
  EXPECT_THAT(IntListOf(*conf, "permutation"), ElementsAre(2, 0, 1));
}

TEST(TransposeOpTest, RejectsBadPermutations) {
  EXPECT_EQ(TestOp("transpose", {Float32({2, 3, 5})}).IntList("permutation", {0, 0, 1}).Error(),
            "permutation [0, 0, 1] is not a permutation of [0, 1, 2] (the axes of the input "
            "[2, 3, 5])");
  EXPECT_EQ(TestOp("transpose", {Float32({2, 3, 5})}).IntList("permutation", {1, 0}).Error(),
            "permutation [1, 0] is not a permutation of [0, 1, 2] (the axes of the input "
            "[2, 3, 5])");
  EXPECT_EQ(TestOp("transpose", {Float32({2, 3})}).IntList("permutation", {1, 2}).Error(),
            "permutation [1, 2] is not a permutation of [0, 1] (the axes of the input [2, 3])");
}

TEST(SliceOpTest, InfersAndValidates) {
  TestOp op("slice", {Float32({4, 10})});
  op.IntList("begin", {0, 2}).IntList("end", {4, 7});
  EXPECT_EQ(op.Output(), Float32({4, 5}));
  EXPECT_EQ(
      TestOp("slice", {Float32({4, 10})}).IntList("begin", {0, 2}).IntList("end", {4, 11}).Error(),
      "slice [2, 11) of axis 1 is out of range for the input [4, 10] (need 0 <= begin <= "
      "end <= 10)");
  EXPECT_EQ(
      TestOp("slice", {Float32({4, 10})}).IntList("begin", {3, 0}).IntList("end", {2, 10}).Error(),
      "slice [3, 2) of axis 0 is out of range for the input [4, 10] (need 0 <= begin <= "
      "end <= 4)");
  EXPECT_EQ(TestOp("slice", {Float32({4, 10})}).IntList("begin", {0}).IntList("end", {4}).Error(),
            "begin [0] and end [4] need one entry per axis of the input [4, 10]");
}

TEST(SliceOpTest, SplitsOnlyWholeAxesAndLowersToTheLocalExtent) {
  TestOp op("slice", {Float32({5, 10})});
  op.IntList("begin", {0, 2}).IntList("end", {5, 7});
  EXPECT_THAT(op.Signatures(2), ElementsAre("(S(0)) -> (S(0))", "(P) -> (P)", "(B) -> (B)"));
  // Rows 5 over 3 devices: 2, 2 and 1.
  absl::StatusOr<plan::KernelConf> conf = op.Lower({Split(0)}, {Float32({1, 10})}, {2}, {3});
  ASSERT_TRUE(conf.ok()) << conf.status();
  EXPECT_EQ(conf->op_type(), "slice");
  EXPECT_THAT(IntListOf(*conf, "begin"), ElementsAre(0, 2));
  EXPECT_THAT(IntListOf(*conf, "end"), ElementsAre(1, 7));
  // Broadcast: the logical bounds unchanged.
  conf = op.LowerOnOneDevice();
  ASSERT_TRUE(conf.ok()) << conf.status();
  EXPECT_THAT(IntListOf(*conf, "begin"), ElementsAre(0, 2));
  EXPECT_THAT(IntListOf(*conf, "end"), ElementsAre(5, 7));
  // Split on the sliced axis: not a signature, so lowering reports a compiler bug.
  conf = op.Lower({Split(1)}, {Float32({5, 5})}, {0}, {2});
  EXPECT_EQ(conf.status().code(), absl::StatusCode::kInternal);
}

TEST(ConcatOpTest, InfersAndValidates) {
  EXPECT_EQ(TestOp("concat", {Float32({2, 3}), Float32({2, 5})}).Int("axis", 1).Output(),
            Float32({2, 8}));
  EXPECT_EQ(
      TestOp("concat", {Int64({2, 3}), Int64({2, 5}), Int64({2, 1})}).Int("axis", -1).Output(),
      Int64({2, 9}));
  EXPECT_EQ(TestOp("concat", {Float32({2, 3}), Float32({3, 5})}).Int("axis", 1).Error(),
            "input 1 [3, 5] differs from input 0 [2, 3] off the concatenation axis 1");
  EXPECT_EQ(TestOp("concat", {Float32({2, 3}), Float32({2, 3, 1})}).Int("axis", 0).Error(),
            "input 1 [2, 3, 1] differs from input 0 [2, 3] off the concatenation axis 0");
  EXPECT_EQ(TestOp("concat", {Float32({2, 3}), Int32({2, 3})}).Int("axis", 0).Error(),
            "input 1 is int32 but input 0 is float32");
  EXPECT_EQ(TestOp("concat", {Float32({2, 3})}).Int("axis", 2).Error(),
            "axis 2 is out of range for rank 2");
  EXPECT_EQ(TestOp("concat", {}).Int("axis", 0).Error(), "takes at least 1 inputs, not 0");
}

TEST(ConcatOpTest, SignaturesAndLowering) {
  TestOp op("concat", {Float32({4, 3}), Float32({4, 5})});
  op.Int("axis", -1);
  EXPECT_THAT(op.Signatures(2),
              ElementsAre("(S(0), S(0)) -> (S(0))", "(P, P) -> (P)", "(B, B) -> (B)"));
  absl::StatusOr<plan::KernelConf> conf = op.LowerOnOneDevice();
  ASSERT_TRUE(conf.ok()) << conf.status();
  EXPECT_THAT(AttributeNames(*conf), ElementsAre("axis"));
  EXPECT_EQ(conf->attributes().at("axis").int_value(), 1);
}

TEST(ReduceOpsTest, Infers) {
  for (const char* op_type : {"reduce_sum", "reduce_mean"}) {
    SCOPED_TRACE(op_type);
    EXPECT_EQ(TestOp(op_type, {Float32({4, 6, 8})}).IntList("axes", {1}).Output(), Float32({4, 8}));
    EXPECT_EQ(
        TestOp(op_type, {Float32({4, 6, 8})}).IntList("axes", {1}).Bool("keep_dims", true).Output(),
        Float32({4, 1, 8}));
    EXPECT_EQ(TestOp(op_type, {Float32({4, 6, 8})}).IntList("axes", {-1, 0}).Output(),
              Float32({6}));
    EXPECT_EQ(TestOp(op_type, {Float32({4, 6})}).Output(), Float32({}));
    EXPECT_EQ(TestOp(op_type, {Float32({4, 6})}).IntList("axes", {2}).Error(),
              "axis 2 is out of range for rank 2");
    EXPECT_EQ(TestOp(op_type, {Float32({4, 6})}).IntList("axes", {1, -1}).Error(),
              "axis -1 is repeated in [1, -1]");
    EXPECT_EQ(TestOp(op_type, {Float32({4, 6})}).Bool("keepdims", true).Error(),
              "unknown attribute 'keepdims' (known: axes, keep_dims)");
    EXPECT_THAT(TestOp(op_type, {Float32({4, 6})}).Float("divisor", 2).Error(),
                HasSubstr("'divisor' is set by the compiler"));
    EXPECT_EQ(TestOp(op_type, {Int32({4, 6})}).Error(), "input 'x' must be float32, not int32");
  }
}

TEST(ReduceOpsTest, Signatures) {
  TestOp op("reduce_sum", {Float32({4, 6, 8})});
  op.IntList("axes", {1});
  EXPECT_THAT(op.Signatures(2), ElementsAre("(S(0)) -> (S(0))", "(S(2)) -> (S(1))", "(S(1)) -> (P)",
                                            "(P) -> (P)", "(B) -> (B)"));
  TestOp kept("reduce_mean", {Float32({4, 6, 8})});
  kept.IntList("axes", {1}).Bool("keep_dims", true);
  EXPECT_THAT(kept.Signatures(2), ElementsAre("(S(0)) -> (S(0))", "(S(2)) -> (S(2))",
                                              "(S(1)) -> (P)", "(P) -> (P)", "(B) -> (B)"));
  EXPECT_THAT(kept.Signatures(5),
              ElementsAre("(S(2)) -> (S(2))", "(S(1)) -> (P)", "(P) -> (P)", "(B) -> (B)"));
}

TEST(ReduceOpsTest, MeanDividesByTheLogicalCount) {
  TestOp op("reduce_mean", {Float32({4, 6, 8})});
  op.IntList("axes", {-1, 1});
  // Split on reduced axis 1: the device holds 3 of the 6 rows but divides by 6 * 8.
  absl::StatusOr<plan::KernelConf> conf = op.Lower({Split(1)}, {Float32({4, 3, 8})}, {1}, {2});
  ASSERT_TRUE(conf.ok()) << conf.status();
  EXPECT_EQ(conf->op_type(), "reduce_mean");
  EXPECT_DOUBLE_EQ(conf->attributes().at("divisor").float_value(), 48.0);
  EXPECT_THAT(IntListOf(*conf, "axes"), ElementsAre(1, 2));
  EXPECT_FALSE(conf->attributes().at("keep_dims").bool_value());

  TestOp sum("reduce_sum", {Float32({4, 6, 8})});
  sum.IntList("axes", {1});
  conf = sum.Lower({Split(1)}, {Float32({4, 3, 8})}, {1}, {2});
  ASSERT_TRUE(conf.ok()) << conf.status();
  EXPECT_THAT(AttributeNames(*conf), UnorderedElementsAre("axes", "keep_dims"));
}

TEST(SparseCrossEntropyOpTest, InfersAndValidates) {
  EXPECT_EQ(TestOp("sparse_cross_entropy", {Float32({8, 10}), Int32({8})}).Output(), Float32({8}));
  EXPECT_EQ(TestOp("sparse_cross_entropy", {Float32({2, 3, 10}), Int64({2, 3})}).Output(),
            Float32({2, 3}));
  EXPECT_EQ(TestOp("sparse_cross_entropy", {Float32({8, 10}), Float32({8})}).Error(),
            "input 'labels' must be int32 or int64, not float32");
  EXPECT_EQ(TestOp("sparse_cross_entropy", {Float32({8, 10}), Int32({8, 10})}).Error(),
            "labels must have shape [8] (logits [8, 10] without the class axis), not [8, 10]");
  EXPECT_EQ(TestOp("sparse_cross_entropy", {Float32({10}), Int32({})}).Error(),
            "input 'logits' must have rank >= 2, not 1 (shape [10])");
}

TEST(SparseCrossEntropyOpTest, SignaturesAndLowering) {
  TestOp op("sparse_cross_entropy", {Float32({2, 3, 10}), Int64({2, 3})});
  op.Int("ignore_index", -100);
  EXPECT_THAT(op.Signatures(2),
              ElementsAre("(S(0), S(0)) -> (S(0))", "(S(1), S(1)) -> (S(1))", "(B, B) -> (B)"));
  absl::StatusOr<plan::KernelConf> conf = op.LowerOnOneDevice();
  ASSERT_TRUE(conf.ok()) << conf.status();
  EXPECT_EQ(conf->attributes().at("ignore_index").int_value(), -100);

  TestOp plain("sparse_cross_entropy", {Float32({8, 10}), Int32({8})});
  conf = plain.LowerOnOneDevice();
  ASSERT_TRUE(conf.ok()) << conf.status();
  EXPECT_THAT(AttributeNames(*conf), IsEmpty());
}

TEST(CausalAttentionOpTest, InfersAndValidates) {
  const TensorType qkv = Float32({2, 4, 8, 16});
  EXPECT_EQ(TestOp("causal_attention", {qkv, qkv, qkv}).Output(), qkv);
  EXPECT_EQ(TestOp("causal_attention", {qkv, Float32({2, 4, 9, 16}), qkv}).Error(),
            "k [2, 4, 9, 16] must have the shape of q [2, 4, 8, 16]");
  EXPECT_EQ(
      TestOp("causal_attention", {Float32({2, 8, 16}), Float32({2, 8, 16}), Float32({2, 8, 16})})
          .Error(),
      "q must have rank 4 ([batch, heads, tokens, head dimension]), not [2, 8, 16]");
  EXPECT_EQ(TestOp("causal_attention", {qkv, qkv}).Error(), "takes 3 inputs, not 2");
  EXPECT_EQ(TestOp("causal_attention", {qkv, qkv, qkv}).Float("scale", INFINITY).Error(),
            "attribute 'scale' must be finite, not inf");
}

TEST(CausalAttentionOpTest, SignaturesFlopsAndLowering) {
  const TensorType qkv = Float32({2, 4, 8, 16});
  TestOp op("causal_attention", {qkv, qkv, qkv});
  EXPECT_THAT(op.Signatures(2), ElementsAre("(S(0), S(0), S(0)) -> (S(0))",
                                            "(S(1), S(1), S(1)) -> (S(1))", "(B, B, B) -> (B)"));
  EXPECT_THAT(op.Signatures(4), ElementsAre("(S(1), S(1), S(1)) -> (S(1))", "(B, B, B) -> (B)"));
  EXPECT_EQ(op.Flops(), 4.0 * 2 * 4 * 8 * 8 * 16);
  // Heads split 2 ways: the local Dh is the logical one, and so is the default scale.
  absl::StatusOr<plan::KernelConf> conf =
      op.Lower({Split(1), Split(1), Split(1)},
               {Float32({2, 2, 8, 16}), Float32({2, 2, 8, 16}), Float32({2, 2, 8, 16})}, {0}, {2});
  ASSERT_TRUE(conf.ok()) << conf.status();
  EXPECT_DOUBLE_EQ(conf->attributes().at("scale").float_value(), 0.25);

  TestOp scaled("causal_attention", {qkv, qkv, qkv});
  scaled.Float("scale", 0.5);
  conf = scaled.LowerOnOneDevice();
  ASSERT_TRUE(conf.ok()) << conf.status();
  EXPECT_DOUBLE_EQ(conf->attributes().at("scale").float_value(), 0.5);
}

}  // namespace
}  // namespace loom::compiler

namespace loom::compiler {
namespace {

// The ops autodiff emits (compiler/ops/gradient_ops.h).
TEST(GradientOpsTest, ReduceSumTo) {
  TestOp op("reduce_sum_to", {Float32({2, 4, 3})});
  op.IntList("shape", {4, 1});
  EXPECT_EQ(op.Output(), Float32({4, 1}));
  EXPECT_THAT(op.Signatures(2),
              ::testing::ElementsAre("(S(0)) -> (P)", "(S(1)) -> (S(0))", "(S(2)) -> (P)",
                                     "(P) -> (P)", "(B) -> (B)"));
  TestOp bad("reduce_sum_to", {Float32({2, 4, 3})});
  bad.IntList("shape", {5, 3});
  EXPECT_EQ(bad.Error(), "shape [5, 3] does not broadcast to dy's float32[2, 4, 3]");
}

TEST(GradientOpsTest, BroadcastTo) {
  TestOp op("broadcast_to", {Float32({4})});
  op.IntList("shape", {4, 6}).IntList("axes", {1}).Float("scale", 0.5);
  EXPECT_EQ(op.Output(), Float32({4, 6}));
  EXPECT_THAT(op.Signatures(2),
              ::testing::ElementsAre("(S(0)) -> (S(0))", "(P) -> (P)", "(B) -> (B)"));
  TestOp bad("broadcast_to", {Float32({5})});
  bad.IntList("shape", {4, 6}).IntList("axes", {1});
  EXPECT_THAT(bad.Error(), ::testing::HasSubstr("does not broadcast to [4, 6]"));
}

TEST(GradientOpsTest, LayerNormGrad) {
  TestOp op("layer_norm_grad", {Float32({4, 6}), Float32({6}), Float32({4, 6})});
  absl::StatusOr<std::vector<TensorType>> outputs = op.Infer();
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  EXPECT_THAT(*outputs, ::testing::ElementsAre(Float32({4, 6}), Float32({6}), Float32({6})));
  EXPECT_THAT(op.Signatures(2),
              ::testing::ElementsAre("(S(0), B, S(0)) -> (S(0), P, P)", "(B, B, B) -> (B, B, B)"));
  TestOp bad("layer_norm_grad", {Float32({4, 6}), Float32({5}), Float32({4, 6})});
  EXPECT_THAT(bad.Error(), ::testing::HasSubstr("gamma must have shape [6]"));
}

TEST(GradientOpsTest, EmbeddingGradSetsTheRowOffsetOfAVocabSplit) {
  TestOp op("embedding_grad", {Int64({4}), Float32({4, 3})});
  op.Int("rows", 7);
  EXPECT_EQ(op.Output(), Float32({7, 3}));
  EXPECT_THAT(op.Signatures(2), ::testing::ElementsAre("(S(0), S(0)) -> (P)", "(B, S(1)) -> (S(1))",
                                                       "(B, B) -> (S(0))", "(B, B) -> (B)"));
  // Rank 1 of 2 holds rows [4, 7) of a vocab-split dtable, as embedding's lowering says.
  const OpDefinition* definition = op.definition();
  LoweringContext lowering;
  lowering.op = &op.context();
  lowering.input_sbp = {NdSbp{Sbp::Broadcast()}, NdSbp{Sbp::Broadcast()}};
  lowering.output_sbp = {NdSbp{Sbp::Split(0)}};
  lowering.local_outputs = {Float32({3, 3})};
  lowering.coordinates = {1};
  lowering.hierarchy = {2};
  absl::StatusOr<plan::KernelConf> conf = definition->Lower("embedding_grad", lowering);
  ASSERT_TRUE(conf.ok()) << conf.status();
  EXPECT_EQ(conf->attributes().at("row_offset").int_value(), 4);
  EXPECT_EQ(conf->attributes().at("logical_rows").int_value(), 7);
  EXPECT_THAT(AttributeNames(*conf), UnorderedElementsAre("row_offset", "logical_rows"));
  TestOp bad("embedding_grad", {Float32({4}), Float32({4, 3})});
  bad.Int("rows", 7);
  EXPECT_THAT(bad.Error(), ::testing::HasSubstr("ids"));
}

TEST(GradientOpsTest, ActivationAndSoftmaxGrads) {
  TestOp relu("relu_grad", {Float32({4, 6}), Float32({4, 6})});
  EXPECT_THAT(relu.Signatures(2), ::testing::Contains("(B, P) -> (P)"));
  TestOp softmax("softmax_grad", {Float32({4, 6}), Float32({4, 6})});
  EXPECT_THAT(softmax.Signatures(2),
              ::testing::ElementsAre("(S(0), S(0)) -> (S(0))", "(B, B) -> (B)"));
  TestOp bad("tanh_grad", {Float32({4, 6}), Float32({4, 5})});
  EXPECT_EQ(bad.Error(), "x and dy differ in shape: x is float32[4, 6], dy is float32[4, 5]");
}

TEST(GradientOpsTest, CausalAttentionGrad) {
  const TensorType t = Float32({2, 4, 5, 3});
  TestOp op("causal_attention_grad", {t, t, t, t});
  absl::StatusOr<std::vector<TensorType>> outputs = op.Infer();
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  EXPECT_EQ(outputs->size(), 3u);
  EXPECT_THAT(op.Signatures(2),
              ::testing::ElementsAre("(S(0), S(0), S(0), S(0)) -> (S(0), S(0), S(0))",
                                     "(S(1), S(1), S(1), S(1)) -> (S(1), S(1), S(1))",
                                     "(B, B, B, B) -> (B, B, B)"));
}

}  // namespace
}  // namespace loom::compiler
