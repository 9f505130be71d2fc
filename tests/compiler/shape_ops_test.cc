// The ops of compiler/ops/ that rearrange or reduce a tensor's axes (reshape, transpose, slice,
// concat, reduce_sum and reduce_mean): type inference, SBP signatures and lowering.
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
using ::loom::compiler::testing::Broadcast;
using ::loom::compiler::testing::Float32;
using ::loom::compiler::testing::Int32;
using ::loom::compiler::testing::Int64;
using ::loom::compiler::testing::IntListOf;
using ::loom::compiler::testing::Split;
using ::loom::compiler::testing::TestOp;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::UnorderedElementsAre;

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

}  // namespace
}  // namespace loom::compiler
