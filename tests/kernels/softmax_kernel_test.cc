#include <cmath>
#include <cstdint>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/kernels/kernel_test_util.h"

namespace loom::kernel_test {
namespace {

using ::testing::HasSubstr;

// Softmax of each row of `input` (rows of `row_length`), in double.
std::vector<double> ReferenceSoftmax(const std::vector<float>& input, int64_t row_length) {
  std::vector<double> output(input.size());
  for (size_t start = 0; start < input.size(); start += row_length) {
    double maximum = input[start];
    for (int64_t i = 0; i < row_length; ++i) maximum = std::max<double>(maximum, input[start + i]);
    double sum = 0.0;
    for (int64_t i = 0; i < row_length; ++i) sum += std::exp(input[start + i] - maximum);
    for (int64_t i = 0; i < row_length; ++i) {
      output[start + i] = std::exp(input[start + i] - maximum) / sum;
    }
  }
  return output;
}

std::vector<float> RunSoftmax(const std::vector<float>& input, const Shape& shape) {
  OpCall call("softmax");
  call.Input(FloatTensor(shape, input)).Output(shape);
  absl::Status status = call.Run();
  EXPECT_TRUE(status.ok()) << status;
  return call.OutputFloats();
}

TEST(SoftmaxKernelTest, MatchesReferenceAndRowsSumToOne) {
  const Shape shape({2, 3, 17});
  const std::vector<float> input = RandomFloats(shape.NumElements(), 7, -5.0f, 5.0f);
  const std::vector<float> output = RunSoftmax(input, shape);
  const std::vector<double> expected = ReferenceSoftmax(input, 17);
  for (size_t i = 0; i < input.size(); ++i) EXPECT_NEAR(output[i], expected[i], 1e-6) << i;
  for (int row = 0; row < 6; ++row) {
    double sum = 0.0;
    for (int i = 0; i < 17; ++i) sum += output[row * 17 + i];
    EXPECT_NEAR(sum, 1.0, 1e-5) << "row " << row;
  }
}

TEST(SoftmaxKernelTest, StableWithLargeInputs) {
  const std::vector<float> output = RunSoftmax(
      {1000.0f, 999.0f, 998.0f, -1000.0f, -1001.0f, -1002.0f, 1e30f, 0.0f, -1e30f}, {3, 3});
  const double denominator = 1.0 + std::exp(-1.0) + std::exp(-2.0);
  const std::vector<double> row = {1.0 / denominator, std::exp(-1.0) / denominator,
                                   std::exp(-2.0) / denominator};
  for (int i = 0; i < 9; ++i) ASSERT_TRUE(std::isfinite(output[i])) << i;
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(output[i], row[i], 1e-6);
    EXPECT_NEAR(output[3 + i], row[i], 1e-6);
  }
  EXPECT_THAT(std::vector<float>(output.begin() + 6, output.end()),
              ::testing::ElementsAre(1.0f, 0.0f, 0.0f));
}

TEST(SoftmaxKernelTest, SingleElementRowsAreOne) {
  EXPECT_THAT(RunSoftmax({-3.0f, 0.0f, 42.0f}, {3, 1}), ::testing::ElementsAre(1.0f, 1.0f, 1.0f));
}

TEST(SoftmaxKernelTest, RejectsScalar) {
  OpCall call("softmax");
  call.Input(MakeTensor({})).Output({});
  absl::Status status = call.Build().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("softmax: input must have rank >= 1"));
}

std::vector<float> RunLogSoftmax(const std::vector<float>& input, const Shape& shape) {
  OpCall call("log_softmax");
  call.Input(FloatTensor(shape, input)).Output(shape);
  absl::Status status = call.Run();
  EXPECT_TRUE(status.ok()) << status;
  return call.OutputFloats();
}

TEST(LogSoftmaxKernelTest, MatchesReference) {
  const Shape shape({3, 2, 19});
  const std::vector<float> input = RandomFloats(shape.NumElements(), 8, -6.0f, 6.0f);
  const std::vector<float> output = RunLogSoftmax(input, shape);
  const std::vector<double> expected = ReferenceSoftmax(input, 19);
  for (size_t i = 0; i < input.size(); ++i) {
    EXPECT_NEAR(output[i], std::log(expected[i]), 2e-6 * (1.0 + std::abs(std::log(expected[i]))))
        << i;
  }
}

TEST(LogSoftmaxKernelTest, StableWithLargeInputs) {
  const std::vector<float> output =
      RunLogSoftmax({1000.0f, 999.0f, -1001.0f, -1000.0f, 1e30f, 0.0f}, {3, 2});
  const double log_pair = std::log(1.0 + std::exp(-1.0));
  EXPECT_NEAR(output[0], -log_pair, 1e-6);
  EXPECT_NEAR(output[1], -1.0 - log_pair, 1e-6);
  EXPECT_NEAR(output[2], -1.0 - log_pair, 1e-6);
  EXPECT_NEAR(output[3], -log_pair, 1e-6);
  EXPECT_EQ(output[4], 0.0f);
  EXPECT_EQ(output[5], -1e30f);
  for (float value : output) EXPECT_TRUE(std::isfinite(value));
}

TEST(LogSoftmaxKernelTest, RejectsMismatchedShapes) {
  OpCall call("log_softmax");
  call.Input(MakeTensor({2, 3})).Output({3, 2});
  absl::Status status = call.Build().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("log_softmax: output has shape [3, 2] but input has shape [2, 3]"));
}

}  // namespace
}  // namespace loom::kernel_test
