// The ops autodiff emits (compiler/ops/gradient_ops.h): type inference, SBP signatures and
// lowering.
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
using ::loom::compiler::testing::Float32;
using ::loom::compiler::testing::Int64;
using ::loom::compiler::testing::TestOp;
using ::testing::UnorderedElementsAre;

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
              ::testing::ElementsAre("(S(0)) -> (S(0))", "(B) -> (B)", "(P) -> (P)"));
  TestOp bad("broadcast_to", {Float32({5})});
  bad.IntList("shape", {4, 6}).IntList("axes", {1});
  EXPECT_THAT(bad.Error(), ::testing::HasSubstr("does not broadcast to [4, 6]"));
}

// Only the shape matters: a partial input (the loss before its all-reduce) gives ones everywhere.
TEST(GradientOpsTest, OnesLike) {
  TestOp op("ones_like", {Float32({4, 6})});
  EXPECT_EQ(op.Output(), Float32({4, 6}));
  EXPECT_THAT(op.Signatures(2),
              ::testing::ElementsAre("(S(0)) -> (S(0))", "(S(1)) -> (S(1))", "(B) -> (B)",
                                     "(P) -> (B)", "(P(max)) -> (B)"));
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
