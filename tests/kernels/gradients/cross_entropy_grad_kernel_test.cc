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

// Checks sparse_cross_entropy_grad against central differences of sparse_cross_entropy with
// respect to the logits [2, 3, 5]; `ignore_index` is set when not -100.
void ExpectCrossEntropyGradMatches(const HostTensor& labels, int64_t ignore_index) {
  const Shape logits_shape({2, 3, 5});
  const Shape samples({2, 3});
  const std::vector<float> logits = RandomFloats(logits_shape.NumElements(), 91, -3.0f, 3.0f);
  const std::vector<float> dloss = RandomFloats(samples.NumElements(), 92, 0.1f, 2.0f);
  OpCall forward("sparse_cross_entropy");
  if (ignore_index != -100) forward.Attribute("ignore_index", IntAttribute(ignore_index));
  forward.Input(FloatTensor(logits_shape, logits)).Input(labels).Output(samples);
  absl::StatusOr<std::vector<double>> numeric = NumericGradient(forward, 0, {dloss});
  ASSERT_TRUE(numeric.ok()) << numeric.status();

  OpCall grad("sparse_cross_entropy_grad");
  if (ignore_index != -100) grad.Attribute("ignore_index", IntAttribute(ignore_index));
  grad.Input(FloatTensor(logits_shape, logits))
      .Input(labels)
      .Input(FloatTensor(samples, dloss))
      .Output(logits_shape);
  // Stale values, which must be overwritten.
  grad.output(0) = FloatTensor(logits_shape, std::vector<float>(30, 9.0f));
  absl::Status status = RunGradient(grad);
  ASSERT_TRUE(status.ok()) << status;
  ExpectGradientNear(grad.OutputFloats(), *numeric, "dlogits");
}

TEST(CrossEntropyGradKernelTest, MatchesFiniteDifferences) {
  ExpectCrossEntropyGradMatches(Int32Tensor({2, 3}, {0, 4, 2, 2, 1, 3}), -100);
  ExpectCrossEntropyGradMatches(Int64Tensor({2, 3}, {4, 4, 0, 1, 3, 2}), -100);
}

TEST(CrossEntropyGradKernelTest, IgnoredSamplesGetZeroRows) {
  ExpectCrossEntropyGradMatches(Int64Tensor({2, 3}, {-100, 4, 2, -100, 1, 3}), -100);
  ExpectCrossEntropyGradMatches(Int32Tensor({2, 3}, {0, 4, 7, 2, 7, 3}), 7);

  OpCall grad("sparse_cross_entropy_grad");
  grad.Input(FloatTensor({2, 2}, {1.0f, 2.0f, 3.0f, 4.0f}))
      .Input(Int32Tensor({2}, {-100, 0}))
      .Input(FloatTensor({2}, {1.0f, 1.0f}))
      .Output({2, 2});
  grad.output(0) = FloatTensor({2, 2}, {9.0f, 9.0f, 9.0f, 9.0f});
  absl::Status status = RunGradient(grad);
  ASSERT_TRUE(status.ok()) << status;
  const std::vector<float> dlogits = grad.OutputFloats();
  EXPECT_EQ(dlogits[0], 0.0f);
  EXPECT_EQ(dlogits[1], 0.0f);
  // softmax([3, 4]) - [1, 0], the row summing to 0.
  EXPECT_NEAR(dlogits[2], 1.0 / (1.0 + std::exp(1.0)) - 1.0, 1e-6);
  EXPECT_NEAR(dlogits[2] + dlogits[3], 0.0, 1e-6);
}

TEST(CrossEntropyGradKernelTest, ComputeRejectsLabelsOutOfRange) {
  OpCall grad("sparse_cross_entropy_grad");
  grad.Input(MakeTensor({3, 4}))
      .Input(Int64Tensor({3}, {0, 4, 1}))
      .Input(MakeTensor({3}))
      .Output({3, 4});
  absl::Status status = RunGradient(grad);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("sparse_cross_entropy_grad: label 4 at labels[1] is "
                                          "outside [0, 4) (ignore_index is -100)"));
}

TEST(CrossEntropyGradKernelTest, RejectsBadConfigurations) {
  OpCall arity("sparse_cross_entropy_grad");
  arity.Input(MakeTensor({3, 4})).Input(Int32Tensor({3}, {0, 1, 2})).Output({3, 4});
  absl::Status status = BuildGradient(arity).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("sparse_cross_entropy_grad: expects 3 inputs and 1 "
                                          "output, got 2 inputs and 1 output"));

  OpCall labels("sparse_cross_entropy_grad");
  labels.Input(MakeTensor({3, 4})).Input(MakeTensor({3})).Input(MakeTensor({3})).Output({3, 4});
  status = BuildGradient(labels).status();
  EXPECT_THAT(status.message(), HasSubstr("sparse_cross_entropy_grad: input 'labels' must be "
                                          "int32 or int64, got float32"));

  OpCall dloss("sparse_cross_entropy_grad");
  dloss.Input(MakeTensor({3, 4}))
      .Input(Int32Tensor({3}, {0, 1, 2}))
      .Input(MakeTensor({1}))
      .Output({3, 4});
  status = BuildGradient(dloss).status();
  EXPECT_THAT(status.message(), HasSubstr("sparse_cross_entropy_grad: input 'dloss' has shape "
                                          "[1] but logits without its last axis has shape [3]"));

  OpCall output("sparse_cross_entropy_grad");
  output.Input(MakeTensor({3, 4}))
      .Input(Int32Tensor({3}, {0, 1, 2}))
      .Input(MakeTensor({3}))
      .Output({3, 4}, plan::INT32);
  status = BuildGradient(output).status();
  EXPECT_THAT(status.message(), HasSubstr("sparse_cross_entropy_grad: output 'dlogits' must be "
                                          "float32, got int32"));

  OpCall scalar("sparse_cross_entropy_grad");
  scalar.Input(MakeTensor({})).Input(Int32Tensor({}, {0})).Input(MakeTensor({})).Output({});
  status = BuildGradient(scalar).status();
  EXPECT_THAT(status.message(), HasSubstr("sparse_cross_entropy_grad: input 'logits' must have "
                                          "rank >= 1, got a scalar"));
}

}  // namespace
}  // namespace loom::kernel_test
