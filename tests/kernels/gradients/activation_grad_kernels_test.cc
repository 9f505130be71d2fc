#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/kernels/gradients/gradient_test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace loom::kernel_test {
namespace {

using ::testing::HasSubstr;

// Checks `grad_op`(forward tensor, dy) against central differences of `forward_op`, where the
// forward tensor is the forward's input x or, with `from_output`, its output y.
void ExpectActivationGradMatches(const std::string& forward_op, const std::string& grad_op,
                                 const std::vector<float>& x, bool from_output) {
  const Shape shape({3, static_cast<int64_t>(x.size()) / 3});
  const std::vector<float> dy = RandomFloats(shape.NumElements(), 12, -2.0f, 2.0f);
  OpCall forward(forward_op);
  forward.Input(FloatTensor(shape, x)).Output(shape);
  absl::StatusOr<std::vector<float>> y = RunForward(forward);
  ASSERT_TRUE(y.ok()) << y.status();
  absl::StatusOr<std::vector<double>> numeric = NumericGradient(forward, 0, {dy});
  ASSERT_TRUE(numeric.ok()) << numeric.status();

  OpCall grad(grad_op);
  grad.Input(FloatTensor(shape, from_output ? *y : x)).Input(FloatTensor(shape, dy)).Output(shape);
  absl::Status status = RunGradient(grad);
  ASSERT_TRUE(status.ok()) << status;
  ExpectGradientNear(grad.OutputFloats(), *numeric, grad_op);
}

TEST(ActivationGradKernelsTest, ReluGradMatchesFiniteDifferences) {
  // Away from the kink at 0, which the differences would straddle.
  ExpectActivationGradMatches("relu", "relu_grad", AwayFromZero(RandomFloats(18, 11), 0.1f),
                              /*from_output=*/false);
}

TEST(ActivationGradKernelsTest, ReluGradIsZeroAtZero) {
  OpCall grad("relu_grad");
  grad.Input(FloatTensor({3}, {0.0f, -1.0f, 2.0f}))
      .Input(FloatTensor({3}, {5.0f, 5.0f, 5.0f}))
      .Output({3});
  absl::Status status = RunGradient(grad);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_THAT(grad.OutputFloats(), ::testing::ElementsAre(0.0f, 0.0f, 5.0f));
}

TEST(ActivationGradKernelsTest, GeluGradMatchesFiniteDifferences) {
  ExpectActivationGradMatches("gelu", "gelu_grad", RandomFloats(24, 13, -4.0f, 4.0f),
                              /*from_output=*/false);
}

TEST(ActivationGradKernelsTest, TanhGradMatchesFiniteDifferencesFromTheOutput) {
  ExpectActivationGradMatches("tanh", "tanh_grad", RandomFloats(24, 14, -2.5f, 2.5f),
                              /*from_output=*/true);
}

TEST(ActivationGradKernelsTest, RejectsMismatchedShapes) {
  OpCall grad("gelu_grad");
  grad.Input(MakeTensor({2, 3})).Input(MakeTensor({3, 2})).Output({2, 3});
  absl::Status status = BuildGradient(grad).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("gelu_grad: input 'dy' has shape [3, 2] but input 'x' has shape [2, 3]"));

  OpCall output("tanh_grad");
  output.Input(MakeTensor({4})).Input(MakeTensor({4})).Output({5});
  status = BuildGradient(output).status();
  EXPECT_THAT(status.message(),
              HasSubstr("tanh_grad: output 'dx' has shape [5] but input 'y' has shape [4]"));
}

TEST(ActivationGradKernelsTest, RejectsWrongArityAndDataType) {
  OpCall arity("relu_grad");
  arity.Input(MakeTensor({4})).Output({4});
  absl::Status status = BuildGradient(arity).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("relu_grad: expects 2 inputs and 1 output, got 1 input and 1 output"));

  OpCall type("relu_grad");
  type.Input(MakeTensor({4}, plan::INT32)).Input(MakeTensor({4})).Output({4});
  status = BuildGradient(type).status();
  EXPECT_THAT(status.message(), HasSubstr("relu_grad: input 0 must be float32, got int32"));
}

}  // namespace
}  // namespace loom::kernel_test
