#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/kernels/gradients/gradient_test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace loom::kernel_test {
namespace {

using ::testing::HasSubstr;

// Checks `grad_op`(y, dy) against central differences of `forward_op` (y its output).
void ExpectRowGradMatches(const std::string& forward_op, const std::string& grad_op,
                          const Shape& shape) {
  const std::vector<float> x = RandomFloats(shape.NumElements(), 21, -3.0f, 3.0f);
  const std::vector<float> dy = RandomFloats(shape.NumElements(), 22, -2.0f, 2.0f);
  OpCall forward(forward_op);
  forward.Input(FloatTensor(shape, x)).Output(shape);
  absl::StatusOr<std::vector<float>> y = RunForward(forward);
  ASSERT_TRUE(y.ok()) << y.status();
  absl::StatusOr<std::vector<double>> numeric = NumericGradient(forward, 0, {dy});
  ASSERT_TRUE(numeric.ok()) << numeric.status();

  OpCall grad(grad_op);
  grad.Input(FloatTensor(shape, *y)).Input(FloatTensor(shape, dy)).Output(shape);
  absl::Status status = RunGradient(grad);
  ASSERT_TRUE(status.ok()) << status;
  ExpectGradientNear(grad.OutputFloats(), *numeric, grad_op);
}

TEST(SoftmaxGradKernelsTest, SoftmaxGradMatchesFiniteDifferences) {
  ExpectRowGradMatches("softmax", "softmax_grad", Shape({2, 3, 7}));
}

TEST(SoftmaxGradKernelsTest, SoftmaxGradOfAVector) {
  ExpectRowGradMatches("softmax", "softmax_grad", Shape({9}));
}

TEST(SoftmaxGradKernelsTest, LogSoftmaxGradMatchesFiniteDifferences) {
  ExpectRowGradMatches("log_softmax", "log_softmax_grad", Shape({4, 6}));
}

TEST(SoftmaxGradKernelsTest, EmptyRowsAreFine) {
  OpCall grad("softmax_grad");
  grad.Input(MakeTensor({3, 0})).Input(MakeTensor({3, 0})).Output({3, 0});
  absl::Status status = RunGradient(grad);
  EXPECT_TRUE(status.ok()) << status;
}

TEST(SoftmaxGradKernelsTest, RejectsScalarsAndMismatchedShapes) {
  OpCall scalar("softmax_grad");
  scalar.Input(MakeTensor({})).Input(MakeTensor({})).Output({});
  absl::Status status = BuildGradient(scalar).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("softmax_grad: input 'y' must have rank >= 1, got a scalar"));

  OpCall mismatch("log_softmax_grad");
  mismatch.Input(MakeTensor({2, 5})).Input(MakeTensor({2, 4})).Output({2, 5});
  status = BuildGradient(mismatch).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("log_softmax_grad: input 'dy' has shape [2, 4] but "
                                          "input 'y' has shape [2, 5]"));
}

TEST(SoftmaxGradKernelsTest, ComputeRejectsOtherShapes) {
  OpCall grad("softmax_grad");
  grad.Input(MakeTensor({2, 5})).Input(MakeTensor({2, 5})).Output({2, 5});
  absl::StatusOr<std::unique_ptr<Kernel>> kernel = BuildGradient(grad);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  OpCall other("softmax_grad");
  other.Input(MakeTensor({5, 2})).Input(MakeTensor({5, 2})).Output({5, 2});
  absl::Status status = other.Compute(**kernel);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("softmax_grad: input 0 is float32[5, 2]"));
}

}  // namespace
}  // namespace loom::kernel_test
