#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "absl/types/span.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/kernels/kernel_test_util.h"
#include "tests/kernels/optimizers/golden_values.h"
#include "tests/kernels/optimizers/optimizer_test_util.h"

namespace loom::kernel_test {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<float> ToVector(absl::Span<const float> values) {
  return std::vector<float>(values.begin(), values.end());
}

// Builds `call` through RegisterCpuOptimizerKernels, runs it once and returns its output.
absl::StatusOr<std::vector<float>> RunOp(OpCall& call) {
  absl::StatusOr<std::unique_ptr<Kernel>> kernel = BuildOptimizerKernel(call);
  if (!kernel.ok()) return kernel.status();
  absl::Status status = call.Compute(**kernel);
  if (!status.ok()) return status;
  return call.OutputFloats();
}

absl::StatusOr<float> SquaredNorm(const Shape& shape, const std::vector<float>& values) {
  OpCall call("squared_norm");
  call.Input(FloatTensor(shape, values)).Output({1});
  absl::StatusOr<std::vector<float>> output = RunOp(call);
  if (!output.ok()) return output.status();
  return (*output)[0];
}

absl::StatusOr<float> ClipCoefficient(float total_squared_norm, double max_norm) {
  OpCall call("clip_coefficient");
  call.Attribute("max_norm", FloatAttribute(max_norm));
  call.Input(FloatTensor({1}, {total_squared_norm})).Output({1});
  absl::StatusOr<std::vector<float>> output = RunOp(call);
  if (!output.ok()) return output.status();
  return (*output)[0];
}

absl::StatusOr<std::vector<float>> ScaleBy(const Shape& shape, const std::vector<float>& values,
                                           float coefficient) {
  OpCall call("scale_by");
  call.Input(FloatTensor(shape, values)).Input(FloatTensor({1}, {coefficient})).Output(shape);
  return RunOp(call);
}

TEST(SquaredNormKernelTest, SumsSquares) {
  absl::StatusOr<float> norm = SquaredNorm({2, 2}, {1.0f, -2.0f, 3.0f, 0.5f});
  ASSERT_TRUE(norm.ok()) << norm.status();
  EXPECT_EQ(*norm, 14.25f);

  const std::vector<float> values = RandomFloats(10007, 3, -4, 4);
  double expected = 0.0;
  for (float value : values) expected += static_cast<double>(value) * value;
  norm = SquaredNorm({10007}, values);
  ASSERT_TRUE(norm.ok()) << norm.status();
  EXPECT_FLOAT_EQ(*norm, static_cast<float>(expected));  // Accumulated in double.
}

TEST(SquaredNormKernelTest, EmptyAndScalarInputs) {
  absl::StatusOr<float> norm = SquaredNorm({0, 3}, {});
  ASSERT_TRUE(norm.ok()) << norm.status();
  EXPECT_EQ(*norm, 0.0f);
  norm = SquaredNorm({}, {-3.0f});
  ASSERT_TRUE(norm.ok()) << norm.status();
  EXPECT_EQ(*norm, 9.0f);
}

TEST(ClipCoefficientKernelTest, Formula) {
  // max_norm / (sqrt(total) + 1e-6), at most 1.
  absl::StatusOr<float> coefficient = ClipCoefficient(16.0f, 2.0);
  ASSERT_TRUE(coefficient.ok()) << coefficient.status();
  EXPECT_FLOAT_EQ(*coefficient, static_cast<float>(2.0 / (4.0 + 1e-6)));
  coefficient = ClipCoefficient(16.0f, 4.0);  // Just below 1: 4 / 4.000001.
  ASSERT_TRUE(coefficient.ok()) << coefficient.status();
  EXPECT_LT(*coefficient, 1.0f);
  EXPECT_NEAR(*coefficient, 4.0 / (4.0 + 1e-6), 1e-7);
  coefficient = ClipCoefficient(16.0f, 5.0);
  ASSERT_TRUE(coefficient.ok()) << coefficient.status();
  EXPECT_EQ(*coefficient, 1.0f);
  coefficient = ClipCoefficient(0.0f, 1.0);  // Zero gradients stay zero: no division by zero.
  ASSERT_TRUE(coefficient.ok()) << coefficient.status();
  EXPECT_EQ(*coefficient, 1.0f);
}

TEST(ClipCoefficientKernelTest, NonFiniteNormsAsPyTorch) {
  // clip_grad_norm_ with error_if_nonfinite=False: a NaN norm makes NaN gradients, an infinite
  // one zero gradients.
  absl::StatusOr<float> coefficient = ClipCoefficient(std::numeric_limits<float>::quiet_NaN(), 1.0);
  ASSERT_TRUE(coefficient.ok()) << coefficient.status();
  EXPECT_TRUE(std::isnan(*coefficient));
  coefficient = ClipCoefficient(std::numeric_limits<float>::infinity(), 1.0);
  ASSERT_TRUE(coefficient.ok()) << coefficient.status();
  EXPECT_EQ(*coefficient, 0.0f);
}

TEST(ScaleByKernelTest, Scales) {
  absl::StatusOr<std::vector<float>> scaled = ScaleBy({3}, {1.0f, -2.0f, 0.5f}, 0.5f);
  ASSERT_TRUE(scaled.ok()) << scaled.status();
  EXPECT_THAT(*scaled, ElementsAre(0.5f, -1.0f, 0.25f));
}

TEST(ScaleByKernelTest, InPlace) {
  OpCall call("scale_by");
  call.Input(MakeTensor({2, 2})).Input(MakeTensor({1})).Output({2, 2});
  absl::StatusOr<std::unique_ptr<Kernel>> kernel = BuildOptimizerKernel(call);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  std::vector<HostTensor> inputs = {FloatTensor({2, 2}, {1.0f, 2.0f, -3.0f, 4.0f}),
                                    FloatTensor({1}, {-2.0f})};
  ASSERT_TRUE(ComputeInPlace(**kernel, inputs, {0}, 0).ok());
  EXPECT_THAT(FloatValues(inputs[0]), ElementsAre(-2.0f, -4.0f, 6.0f, -8.0f));
}

// squared_norm of each gradient, summed (the compiler's all-reduce), clip_coefficient, then
// scale_by each gradient: PyTorch's clip_grad_norm_ over both.
void ExpectMatchesClipGradNorm(double max_norm, absl::Span<const float> first,
                               absl::Span<const float> second, float torch_total_norm,
                               absl::Span<const float> first_clipped,
                               absl::Span<const float> second_clipped) {
  absl::StatusOr<float> first_norm = SquaredNorm({2, 3}, ToVector(first));
  absl::StatusOr<float> second_norm = SquaredNorm({4}, ToVector(second));
  ASSERT_TRUE(first_norm.ok()) << first_norm.status();
  ASSERT_TRUE(second_norm.ok()) << second_norm.status();
  const float total = *first_norm + *second_norm;
  EXPECT_NEAR(std::sqrt(total), torch_total_norm, 1e-6 * torch_total_norm);

  // The hand-computed coefficient, in double.
  double sum = 0.0;
  for (float value : first) sum += static_cast<double>(value) * value;
  for (float value : second) sum += static_cast<double>(value) * value;
  const double expected_coefficient = std::min(1.0, max_norm / (std::sqrt(sum) + 1e-6));
  absl::StatusOr<float> coefficient = ClipCoefficient(total, max_norm);
  ASSERT_TRUE(coefficient.ok()) << coefficient.status();
  EXPECT_NEAR(*coefficient, expected_coefficient, 1e-6 * expected_coefficient);

  absl::StatusOr<std::vector<float>> first_scaled = ScaleBy({2, 3}, ToVector(first), *coefficient);
  absl::StatusOr<std::vector<float>> second_scaled = ScaleBy({4}, ToVector(second), *coefficient);
  ASSERT_TRUE(first_scaled.ok()) << first_scaled.status();
  ASSERT_TRUE(second_scaled.ok()) << second_scaled.status();
  // PyTorch sums norms of norms in float32 and we sum squares in double, so the coefficient may
  // differ in the last bit.
  EXPECT_THAT(*first_scaled, ::testing::Pointwise(::testing::FloatEq(), first_clipped));
  EXPECT_THAT(*second_scaled, ::testing::Pointwise(::testing::FloatEq(), second_clipped));
}

TEST(ClipGradNormTest, MatchesPyTorchWhenClipping) {
  ExpectMatchesClipGradNorm(1.0, golden::kClipActiveFirst, golden::kClipActiveSecond,
                            golden::kClipActiveTotalNorm[0], golden::kClipActiveFirstClipped,
                            golden::kClipActiveSecondClipped);
}

TEST(ClipGradNormTest, MatchesPyTorchWhenNotClipping) {
  ExpectMatchesClipGradNorm(10.0, golden::kClipInactiveFirst, golden::kClipInactiveSecond,
                            golden::kClipInactiveTotalNorm[0], golden::kClipInactiveFirstClipped,
                            golden::kClipInactiveSecondClipped);
  // Below max_norm the coefficient is exactly 1, so the gradients are unchanged bit for bit.
  absl::StatusOr<std::vector<float>> scaled =
      ScaleBy({4}, ToVector(golden::kClipInactiveSecond), 1.0f);
  ASSERT_TRUE(scaled.ok()) << scaled.status();
  EXPECT_THAT(*scaled, ::testing::ElementsAreArray(golden::kClipInactiveSecondClipped));
}

absl::Status BuildStatus(const OpCall& call) { return BuildOptimizerKernel(call).status(); }

TEST(ClipGradKernelsTest, FactoryErrors) {
  OpCall no_max_norm("clip_coefficient", "clip");
  no_max_norm.Input(MakeTensor({1})).Output({1});
  absl::Status status = BuildStatus(no_max_norm);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "task 'clip' (op 'clip_coefficient'): clip_coefficient: missing attribute 'max_norm'");

  OpCall zero_max_norm("clip_coefficient");
  zero_max_norm.Attribute("max_norm", FloatAttribute(0.0));
  zero_max_norm.Input(MakeTensor({1})).Output({1});
  EXPECT_THAT(BuildStatus(zero_max_norm).message(),
              HasSubstr("clip_coefficient: attribute 'max_norm' must be > 0, got 0"));

  OpCall wide_norm("clip_coefficient");
  wide_norm.Attribute("max_norm", FloatAttribute(1.0));
  wide_norm.Input(MakeTensor({2})).Output({1});
  EXPECT_THAT(BuildStatus(wide_norm).message(),
              HasSubstr("clip_coefficient: input 'total_squared_norm' has shape [2] but a "
                        "one-element tensor has shape [1]"));

  OpCall scalar_output("squared_norm");
  scalar_output.Input(MakeTensor({3})).Output({});
  EXPECT_THAT(
      BuildStatus(scalar_output).message(),
      HasSubstr("squared_norm: output has shape [] but a one-element tensor has shape [1]"));

  OpCall two_inputs("squared_norm");
  two_inputs.Input(MakeTensor({3})).Input(MakeTensor({3})).Output({1});
  EXPECT_THAT(BuildStatus(two_inputs).message(),
              HasSubstr("squared_norm: expects 1 input and 1 output, got 2 inputs and 1 output"));

  OpCall wide_coefficient("scale_by");
  wide_coefficient.Input(MakeTensor({3})).Input(MakeTensor({3})).Output({3});
  EXPECT_THAT(BuildStatus(wide_coefficient).message(),
              HasSubstr("scale_by: input 'coefficient' has shape [3] but a one-element tensor "
                        "has shape [1]"));

  OpCall other_output("scale_by");
  other_output.Input(MakeTensor({3})).Input(MakeTensor({1})).Output({4});
  EXPECT_THAT(BuildStatus(other_output).message(),
              HasSubstr("scale_by: output has shape [4] but input 'x' has shape [3]"));

  OpCall integer_x("scale_by");
  integer_x.Input(MakeTensor({3}, plan::INT32)).Input(MakeTensor({1})).Output({3});
  EXPECT_THAT(BuildStatus(integer_x).message(),
              HasSubstr("scale_by: input 0 must be float32, got int32"));
}

}  // namespace
}  // namespace loom::kernel_test
