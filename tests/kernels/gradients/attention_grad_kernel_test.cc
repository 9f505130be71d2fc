#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/kernels/gradients/gradient_test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace loom::kernel_test {
namespace {

using ::testing::HasSubstr;

// Checks causal_attention_grad against central differences of causal_attention with respect to
// q, k and v; `scale` <= 0 leaves the attribute out (the default 1 / sqrt(Dh)).
void ExpectAttentionGradMatches(const Shape& shape, double scale) {
  const int64_t count = shape.NumElements();
  const std::vector<float> q = RandomFloats(count, 101, -1.5f, 1.5f);
  const std::vector<float> k = RandomFloats(count, 102, -1.5f, 1.5f);
  const std::vector<float> v = RandomFloats(count, 103);
  const std::vector<float> dy = RandomFloats(count, 104, -2.0f, 2.0f);
  OpCall forward("causal_attention");
  if (scale > 0.0) forward.Attribute("scale", FloatAttribute(scale));
  forward.Input(FloatTensor(shape, q))
      .Input(FloatTensor(shape, k))
      .Input(FloatTensor(shape, v))
      .Output(shape);
  std::vector<std::vector<double>> numeric;
  for (int input = 0; input < 3; ++input) {
    absl::StatusOr<std::vector<double>> gradient = NumericGradient(forward, input, {dy});
    ASSERT_TRUE(gradient.ok()) << gradient.status();
    numeric.push_back(*gradient);
  }

  OpCall grad("causal_attention_grad");
  if (scale > 0.0) grad.Attribute("scale", FloatAttribute(scale));
  grad.Input(FloatTensor(shape, q))
      .Input(FloatTensor(shape, k))
      .Input(FloatTensor(shape, v))
      .Input(FloatTensor(shape, dy))
      .Output(shape)
      .Output(shape)
      .Output(shape);
  absl::StatusOr<std::unique_ptr<Kernel>> kernel = BuildGradient(grad);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  // Twice through the same kernel: the scratch carries nothing from one call to the next.
  for (int round = 0; round < 2; ++round) {
    absl::Status status = grad.Compute(**kernel);
    ASSERT_TRUE(status.ok()) << status;
    ExpectGradientNear(grad.OutputFloats(0), numeric[0], "dq");
    ExpectGradientNear(grad.OutputFloats(1), numeric[1], "dk");
    ExpectGradientNear(grad.OutputFloats(2), numeric[2], "dv");
  }
}

TEST(AttentionGradKernelTest, MatchesFiniteDifferences) {
  ExpectAttentionGradMatches(Shape({2, 2, 5, 3}), /*scale=*/0.0);
}

TEST(AttentionGradKernelTest, MatchesFiniteDifferencesWithAScale) {
  ExpectAttentionGradMatches(Shape({1, 3, 4, 4}), /*scale=*/0.8);
}

TEST(AttentionGradKernelTest, OnePosition) {
  // With T = 1 the probabilities are all 1: dq and dk are 0 and dv is dy.
  ExpectAttentionGradMatches(Shape({2, 1, 1, 3}), /*scale=*/0.0);
}

TEST(AttentionGradKernelTest, EmptyShapesAreFine) {
  for (const Shape& shape : {Shape({2, 2, 0, 3}), Shape({2, 2, 3, 0}), Shape({0, 2, 3, 4})}) {
    OpCall grad("causal_attention_grad");
    for (int input = 0; input < 4; ++input) grad.Input(MakeTensor(shape));
    grad.Output(shape).Output(shape).Output(shape);
    absl::Status status = RunGradient(grad);
    EXPECT_TRUE(status.ok()) << shape.ToString() << ": " << status;
  }
}

TEST(AttentionGradKernelTest, RejectsBadConfigurations) {
  const Shape shape({1, 2, 3, 4});
  OpCall arity("causal_attention_grad");
  arity.Input(MakeTensor(shape)).Input(MakeTensor(shape)).Input(MakeTensor(shape)).Output(shape);
  absl::Status status = BuildGradient(arity).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("causal_attention_grad: expects 4 inputs and 3 "
                                          "outputs, got 3 inputs and 1 output"));

  OpCall rank("causal_attention_grad");
  for (int input = 0; input < 4; ++input) rank.Input(MakeTensor({2, 3, 4}));
  rank.Output({2, 3, 4}).Output({2, 3, 4}).Output({2, 3, 4});
  status = BuildGradient(rank).status();
  EXPECT_THAT(status.message(), HasSubstr("causal_attention_grad: q must have rank 4 [B, H, T, "
                                          "Dh], got [2, 3, 4]"));

  OpCall mismatch("causal_attention_grad");
  mismatch.Input(MakeTensor(shape))
      .Input(MakeTensor(shape))
      .Input(MakeTensor(shape))
      .Input(MakeTensor(shape))
      .Output(shape)
      .Output({1, 2, 3, 5})
      .Output(shape);
  status = BuildGradient(mismatch).status();
  EXPECT_THAT(status.message(), HasSubstr("causal_attention_grad: output 'dk' has shape [1, 2, 3, "
                                          "5] but input 'q' has shape [1, 2, 3, 4]"));

  OpCall type("causal_attention_grad");
  type.Input(MakeTensor(shape))
      .Input(MakeTensor(shape))
      .Input(MakeTensor(shape))
      .Input(MakeTensor(shape, plan::INT64))
      .Output(shape)
      .Output(shape)
      .Output(shape);
  status = BuildGradient(type).status();
  EXPECT_THAT(status.message(),
              HasSubstr("causal_attention_grad: input 'dy' must be float32, got int64"));

  OpCall scale("causal_attention_grad");
  scale.Attribute("scale", FloatAttribute(INFINITY));
  for (int input = 0; input < 4; ++input) scale.Input(MakeTensor(shape));
  scale.Output(shape).Output(shape).Output(shape);
  status = BuildGradient(scale).status();
  EXPECT_THAT(status.message(),
              HasSubstr("causal_attention_grad: attribute 'scale' must be finite, got inf"));
}

TEST(AttentionGradKernelTest, Bfloat16IsTheFloat32GradientOfTheRoundedInputsWithinRounding) {
  const Shape shape({1, 3, 11, 4});
  const int64_t count = shape.NumElements();
  std::vector<std::vector<float>> rounded(4);
  OpCall narrow("causal_attention_grad");
  OpCall wide("causal_attention_grad");
  const float bounds[] = {1.5f, 1.5f, 1.0f, 2.0f};
  for (int input = 0; input < 4; ++input) {
    narrow.Input(Bfloat16Tensor(
        shape, RandomFloats(count, 101 + input, -bounds[input], bounds[input]), &rounded[input]));
    wide.Input(FloatTensor(shape, rounded[input]));
  }
  for (int output = 0; output < 3; ++output) {
    narrow.Output(shape, plan::BFLOAT16);
    wide.Output(shape);
  }
  absl::Status status = narrow.Run();
  ASSERT_TRUE(status.ok()) << status;
  ASSERT_TRUE(wide.Run().ok());
  const char* names[] = {"dq", "dk", "dv"};
  for (int output = 0; output < 3; ++output) {
    const std::vector<float> got = WidenedValues(narrow.output(output));
    const std::vector<float> want = wide.OutputFloats(output);
    ASSERT_EQ(got.size(), want.size());
    // P and dS rounded to bfloat16 (2^-8 relative each) before the products, which are rounded
    // too: a few bfloat16 steps of the largest magnitude.
    float largest = 0.0f;
    for (float value : want) largest = std::max(largest, std::fabs(value));
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_NEAR(got[i], want[i], 4 * std::ldexp(largest, -8)) << names[output] << " " << i;
    }
  }
}

}  // namespace
}  // namespace loom::kernel_test
