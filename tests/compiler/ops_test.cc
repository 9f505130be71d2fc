// Op definitions of compiler/ops/: type inference (good inputs and the messages for bad ones), SBP
// signatures, cost hints and lowering. Here the registry and the dense ops (matmul, cast, bias_add,
// softmax, layer_norm, embedding, sparse_cross_entropy, causal_attention); the mixture-of-experts,
// shape and gradient ops have their own files beside this one (moe_ops_test.cc,
// shape_ops_test.cc, gradient_ops_test.cc).
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compiler/op_definition.h"
#include "compiler/sbp.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/compiler/op_test_util.h"

namespace loom::compiler {
namespace {

using ::loom::compiler::testing::AttributeNames;
using ::loom::compiler::testing::Bfloat16;
using ::loom::compiler::testing::Broadcast;
using ::loom::compiler::testing::Float32;
using ::loom::compiler::testing::Int32;
using ::loom::compiler::testing::Int64;
using ::loom::compiler::testing::Split;
using ::loom::compiler::testing::TestOp;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::UnorderedElementsAre;

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
