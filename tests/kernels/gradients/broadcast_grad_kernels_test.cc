#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/kernels/gradients/gradient_test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace loom::kernel_test {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Checks reduce_sum_to(dy) against central differences of the broadcasting `forward_op`(a, b)
// ("add" or "bias_add") with respect to input `input` (0 for a, 1 for b).
void ExpectReduceSumToMatches(const std::string& forward_op, const Shape& a, const Shape& b,
                              const Shape& output, int input) {
  const std::vector<float> a_values = RandomFloats(a.NumElements(), 111);
  const std::vector<float> b_values = RandomFloats(b.NumElements(), 112);
  const std::vector<float> dy = RandomFloats(output.NumElements(), 113, -2.0f, 2.0f);
  OpCall forward(forward_op);
  forward.Input(FloatTensor(a, a_values)).Input(FloatTensor(b, b_values)).Output(output);
  absl::StatusOr<std::vector<double>> numeric = NumericGradient(forward, input, {dy});
  ASSERT_TRUE(numeric.ok()) << numeric.status();

  const Shape& target = input == 0 ? a : b;
  OpCall grad("reduce_sum_to");
  grad.Input(FloatTensor(output, dy)).Output(target);
  // Stale values, which must be overwritten.
  grad.output(0) = FloatTensor(target, std::vector<float>(target.NumElements(), 9.0f));
  absl::Status status = RunGradient(grad);
  ASSERT_TRUE(status.ok()) << status;
  ExpectGradientNear(
      grad.OutputFloats(), *numeric,
      absl::StrCat(forward_op, " ", a.ToString(), " ", b.ToString(), " d", input == 0 ? "a" : "b"));
}

TEST(ReduceSumToKernelTest, MatchesFiniteDifferencesOfBroadcastingAdd) {
  const Shape output({2, 3, 4});
  ExpectReduceSumToMatches("add", output, Shape({3, 1}), output, 1);
  ExpectReduceSumToMatches("add", output, Shape({}), output, 1);
  ExpectReduceSumToMatches("add", output, Shape({1, 4}), output, 1);
  ExpectReduceSumToMatches("add", output, Shape({2, 1, 4}), output, 1);
  ExpectReduceSumToMatches("add", output, Shape({1, 1, 1}), output, 1);
  ExpectReduceSumToMatches("add", output, Shape({4}), output, 1);
  // Both operands broadcast.
  ExpectReduceSumToMatches("add", Shape({3, 1}), Shape({2, 1, 4}), output, 0);
  ExpectReduceSumToMatches("add", Shape({3, 1}), Shape({2, 1, 4}), output, 1);
  // Nothing to sum.
  ExpectReduceSumToMatches("add", output, output, output, 0);
}

TEST(ReduceSumToKernelTest, MatchesFiniteDifferencesOfBiasAdd) {
  ExpectReduceSumToMatches("bias_add", Shape({2, 3, 5}), Shape({5}), Shape({2, 3, 5}), 1);
}

TEST(ReduceSumToKernelTest, GivesTheGradientOfBroadcastingMultiplyAfterAMultiply) {
  // d(a * b)/db for b [3, 1] broadcast to a [2, 3, 4]: reduce_sum_to(multiply(dy, a)).
  const Shape a({2, 3, 4});
  const Shape b({3, 1});
  const std::vector<float> a_values = RandomFloats(a.NumElements(), 121);
  const std::vector<float> b_values = RandomFloats(b.NumElements(), 122);
  const std::vector<float> dy = RandomFloats(a.NumElements(), 123, -2.0f, 2.0f);
  OpCall forward("multiply");
  forward.Input(FloatTensor(a, a_values)).Input(FloatTensor(b, b_values)).Output(a);
  absl::StatusOr<std::vector<double>> numeric = NumericGradient(forward, 1, {dy});
  ASSERT_TRUE(numeric.ok()) << numeric.status();

  OpCall product("multiply");
  product.Input(FloatTensor(a, dy)).Input(FloatTensor(a, a_values)).Output(a);
  absl::StatusOr<std::vector<float>> weighted = RunForward(product);
  ASSERT_TRUE(weighted.ok()) << weighted.status();
  OpCall grad("reduce_sum_to");
  grad.Input(FloatTensor(a, *weighted)).Output(b);
  absl::Status status = RunGradient(grad);
  ASSERT_TRUE(status.ok()) << status;
  ExpectGradientNear(grad.OutputFloats(), *numeric, "db");
}

TEST(ReduceSumToKernelTest, ExactSums) {
  OpCall grad("reduce_sum_to");
  grad.Input(FloatTensor({2, 3}, {1.0f, 2.0f, 3.0f, 10.0f, 20.0f, 30.0f})).Output({2, 1});
  absl::Status status = RunGradient(grad);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_THAT(grad.OutputFloats(), ElementsAre(6.0f, 60.0f));

  OpCall empty("reduce_sum_to");
  empty.Input(MakeTensor({0, 3})).Output({1, 3});
  empty.output(0) = FloatTensor({1, 3}, {9.0f, 9.0f, 9.0f});
  status = RunGradient(empty);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_THAT(empty.OutputFloats(), ElementsAre(0.0f, 0.0f, 0.0f));
}

TEST(ReduceSumToKernelTest, RejectsShapesThatDoNotBroadcast) {
  OpCall mismatch("reduce_sum_to");
  mismatch.Input(MakeTensor({2, 3, 4})).Output({3, 2});
  absl::Status status = BuildGradient(mismatch).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("reduce_sum_to: output 'dx' has shape [3, 2] which does not broadcast "
                        "to input 'dy' [2, 3, 4] (2 vs 4 at axis 2 of input 'dy')"));

  OpCall rank("reduce_sum_to");
  rank.Input(MakeTensor({3})).Output({1, 3});
  status = BuildGradient(rank).status();
  EXPECT_THAT(status.message(),
              HasSubstr("reduce_sum_to: output 'dx' has shape [1, 3] which does not broadcast "
                        "to input 'dy' [3] (rank 2 > 1)"));

  OpCall type("reduce_sum_to");
  type.Input(MakeTensor({3}, plan::INT32)).Output({3});
  status = BuildGradient(type).status();
  EXPECT_THAT(status.message(), HasSubstr("reduce_sum_to: input 0 must be float32, got int32"));
}

// Checks broadcast_to(w) against central differences of `forward_op`(x) ("reduce_sum" or
// "reduce_mean" with `forward_axes` and `keep_dims`), where broadcast_to gets `grad_axes` (none
// when empty) and `scale` (none when 1).
void ExpectBroadcastToMatches(const std::string& forward_op, const Shape& x,
                              const std::vector<int64_t>& forward_axes, bool keep_dims,
                              const Shape& reduced, const std::vector<int64_t>& grad_axes,
                              double scale) {
  const std::vector<float> x_values = RandomFloats(x.NumElements(), 131);
  const std::vector<float> weights = RandomFloats(reduced.NumElements(), 132, -2.0f, 2.0f);
  OpCall forward(forward_op);
  if (!forward_axes.empty()) forward.Attribute("axes", IntListAttribute(forward_axes));
  if (keep_dims) forward.Attribute("keep_dims", BoolAttribute(true));
  forward.Input(FloatTensor(x, x_values)).Output(reduced);
  absl::StatusOr<std::vector<double>> numeric = NumericGradient(forward, 0, {weights});
  ASSERT_TRUE(numeric.ok()) << numeric.status();

  OpCall grad("broadcast_to");
  if (!grad_axes.empty()) grad.Attribute("axes", IntListAttribute(grad_axes));
  if (scale != 1.0) grad.Attribute("scale", FloatAttribute(scale));
  grad.Input(FloatTensor(reduced, weights)).Output(x);
  absl::Status status = RunGradient(grad);
  ASSERT_TRUE(status.ok()) << status;
  ExpectGradientNear(grad.OutputFloats(), *numeric,
                     absl::StrCat(forward_op, " of ", x.ToString(), " to ", reduced.ToString()));
}

TEST(BroadcastToKernelTest, MatchesFiniteDifferencesOfReduceSumWithoutKeepDims) {
  const Shape x({2, 3, 4});
  ExpectBroadcastToMatches("reduce_sum", x, {1}, false, Shape({2, 4}), {1}, 1.0);
  ExpectBroadcastToMatches("reduce_sum", x, {0, 2}, false, Shape({3}), {0, 2}, 1.0);
  ExpectBroadcastToMatches("reduce_sum", x, {-1}, false, Shape({2, 3}), {-1}, 1.0);
  ExpectBroadcastToMatches("reduce_sum", x, {0}, false, Shape({3, 4}), {0}, 1.0);
  // All axes: a scalar, which plain broadcasting covers.
  ExpectBroadcastToMatches("reduce_sum", x, {}, false, Shape({}), {}, 1.0);
  ExpectBroadcastToMatches("reduce_sum", x, {0, 1, 2}, false, Shape({}), {0, 1, 2}, 1.0);
}

TEST(BroadcastToKernelTest, MatchesFiniteDifferencesOfReduceMeanWithAScale) {
  const Shape x({2, 3, 4});
  ExpectBroadcastToMatches("reduce_mean", x, {0, -1}, false, Shape({3}), {0, -1}, 1.0 / 8.0);
  ExpectBroadcastToMatches("reduce_mean", x, {1}, true, Shape({2, 1, 4}), {}, 1.0 / 3.0);
}

TEST(BroadcastToKernelTest, MatchesFiniteDifferencesOfReduceSumWithKeepDims) {
  const Shape x({2, 3, 4});
  ExpectBroadcastToMatches("reduce_sum", x, {1}, true, Shape({2, 1, 4}), {}, 1.0);
  ExpectBroadcastToMatches("reduce_sum", x, {0, 2}, true, Shape({1, 3, 1}), {}, 1.0);
  // The keep_dims shape is accepted with the axes too.
  ExpectBroadcastToMatches("reduce_sum", x, {0, 2}, true, Shape({1, 3, 1}), {0, 2}, 1.0);
}

TEST(BroadcastToKernelTest, PlainBroadcasting) {
  OpCall grad("broadcast_to");
  grad.Input(FloatTensor({2, 1}, {1.0f, 2.0f})).Output({3, 2, 2});
  absl::Status status = RunGradient(grad);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_THAT(grad.OutputFloats(),
              ElementsAre(1.0f, 1.0f, 2.0f, 2.0f, 1.0f, 1.0f, 2.0f, 2.0f, 1.0f, 1.0f, 2.0f, 2.0f));

  OpCall middle("broadcast_to");
  middle.Attribute("axes", IntListAttribute({1}))
      .Attribute("scale", FloatAttribute(0.5))
      .Input(FloatTensor({2, 2}, {1.0f, 2.0f, 3.0f, 4.0f}))
      .Output({2, 2, 2});
  status = RunGradient(middle);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_THAT(middle.OutputFloats(), ElementsAre(0.5f, 1.0f, 0.5f, 1.0f, 1.5f, 2.0f, 1.5f, 2.0f));

  OpCall empty("broadcast_to");
  empty.Input(MakeTensor({1, 3})).Output({0, 3});
  status = RunGradient(empty);
  EXPECT_TRUE(status.ok()) << status;
}

TEST(BroadcastToKernelTest, RejectsBadConfigurations) {
  OpCall numpy("broadcast_to");
  numpy.Input(MakeTensor({3})).Output({3, 2});
  absl::Status status = BuildGradient(numpy).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("broadcast_to: input 'x' has shape [3] which does not broadcast to "
                        "output 'y' [3, 2] (3 vs 2 at axis 1 of output 'y')"));

  OpCall wrong("broadcast_to");
  wrong.Attribute("axes", IntListAttribute({0})).Input(MakeTensor({3})).Output({3, 2});
  status = BuildGradient(wrong).status();
  EXPECT_THAT(status.message(),
              HasSubstr("broadcast_to: input 'x' has shape [3] but output 'y' [3, 2] without "
                        "axes [0] is [2] (or [1, 2] keeping them as 1)"));

  OpCall range("broadcast_to");
  range.Attribute("axes", IntListAttribute({2})).Input(MakeTensor({3})).Output({3, 2});
  status = BuildGradient(range).status();
  EXPECT_THAT(status.message(),
              HasSubstr("broadcast_to: attribute 'axes' [2] has axis 2 outside output 'y' [3, 2]"));

  OpCall twice("broadcast_to");
  twice.Attribute("axes", IntListAttribute({1, -1})).Input(MakeTensor({3})).Output({3, 2});
  status = BuildGradient(twice).status();
  EXPECT_THAT(status.message(),
              HasSubstr("broadcast_to: attribute 'axes' [1, -1] names axis 1 twice"));

  OpCall list("broadcast_to");
  list.Attribute("axes", IntAttribute(1)).Input(MakeTensor({3})).Output({3, 2});
  status = BuildGradient(list).status();
  EXPECT_THAT(status.message(),
              HasSubstr("broadcast_to: attribute 'axes' must be a list of integers"));

  OpCall scale("broadcast_to");
  scale.Attribute("scale", FloatAttribute(NAN)).Input(MakeTensor({3})).Output({2, 3});
  status = BuildGradient(scale).status();
  EXPECT_THAT(status.message(), HasSubstr("broadcast_to: attribute 'scale' must be finite"));

  OpCall arity("broadcast_to");
  arity.Input(MakeTensor({3})).Input(MakeTensor({3})).Output({2, 3});
  status = BuildGradient(arity).status();
  EXPECT_THAT(status.message(),
              HasSubstr("broadcast_to: expects 1 input and 1 output, got 2 inputs and 1 output"));
}

}  // namespace
}  // namespace loom::kernel_test
