#include <cmath>
#include <cstdint>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/kernels/kernel_test_util.h"

namespace loom::kernel_test {
namespace {

using ::testing::HasSubstr;

// -6 .. 6 in steps of 0.01, and a few special points.
std::vector<float> SamplePoints() {
  std::vector<float> values;
  for (int i = -600; i <= 600; ++i) values.push_back(static_cast<float>(i) * 0.01f);
  for (float value : {-30.0f, -10.0f, 10.0f, 30.0f, 1e-7f, -1e-7f}) values.push_back(value);
  return values;
}

std::vector<float> RunUnary(OpCall& call, const std::vector<float>& input, const Shape& shape) {
  call.Input(FloatTensor(shape, input)).Output(shape);
  absl::Status status = call.Run();
  EXPECT_TRUE(status.ok()) << status;
  return call.OutputFloats();
}

TEST(UnaryKernelTest, Relu) {
  OpCall call("relu");
  EXPECT_THAT(RunUnary(call, {-2.0f, -0.0f, 0.0f, 0.5f, 3.0f, -1e-30f}, {2, 3}),
              ::testing::ElementsAre(0.0f, 0.0f, 0.0f, 0.5f, 3.0f, 0.0f));
}

TEST(UnaryKernelTest, GeluMatchesErfFormula) {
  const std::vector<float> input = SamplePoints();
  OpCall call("gelu");
  const std::vector<float> output = RunUnary(call, input, {static_cast<int64_t>(input.size())});
  for (size_t i = 0; i < input.size(); ++i) {
    const double x = input[i];
    const double expected = 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    EXPECT_NEAR(output[i], expected, 1e-6 + 1e-6 * std::abs(expected)) << "x = " << x;
  }
}

TEST(UnaryKernelTest, TanhMatchesStandardLibrary) {
  const std::vector<float> input = SamplePoints();
  OpCall call("tanh");
  const std::vector<float> output = RunUnary(call, input, {static_cast<int64_t>(input.size())});
  for (size_t i = 0; i < input.size(); ++i) {
    EXPECT_NEAR(output[i], std::tanh(static_cast<double>(input[i])), 1e-6) << "x = " << input[i];
  }
}

TEST(UnaryKernelTest, Scale) {
  OpCall call("scale");
  call.Attribute("scale", FloatAttribute(-2.5));
  EXPECT_THAT(RunUnary(call, {1.0f, -2.0f, 0.0f, 4.0f}, {4}),
              ::testing::ElementsAre(-2.5f, 5.0f, -0.0f, -10.0f));
}

TEST(UnaryKernelTest, ScaleAcceptsIntegerAttribute) {
  OpCall call("scale");
  call.Attribute("scale", IntAttribute(3));
  EXPECT_THAT(RunUnary(call, {1.0f, -2.0f}, {2}), ::testing::ElementsAre(3.0f, -6.0f));
}

TEST(UnaryKernelTest, ScaleRequiresAttribute) {
  OpCall call("scale", "scaler");
  call.Input(MakeTensor({4})).Output({4});
  absl::Status status = call.Build().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "task 'scaler' (op 'scale'): scale: missing attribute 'scale'");
}

TEST(UnaryKernelTest, RejectsWrongDataType) {
  OpCall call("relu");
  call.Input(MakeTensor({4}, plan::INT32)).Output({4});
  absl::Status status = call.Build().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("relu: input 0 must be float32, got int32"));
}

TEST(UnaryKernelTest, RejectsShapeChange) {
  OpCall call("gelu");
  call.Input(MakeTensor({2, 3})).Output({3, 2});
  absl::Status status = call.Build().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("gelu: output has shape [3, 2] but input has shape [2, 3]"));
}

TEST(UnaryKernelTest, RejectsWrongInputCount) {
  OpCall call("tanh");
  call.Input(MakeTensor({2})).Input(MakeTensor({2})).Output({2});
  EXPECT_THAT(call.Build().status().message(), HasSubstr("tanh: expects 1 input and 1 output"));
}

TEST(BiasAddKernelTest, AddsAlongLastAxis) {
  const std::vector<float> x = RandomFloats(24, 5);
  const std::vector<float> bias = {1.0f, -2.0f, 3.0f, 0.5f};
  OpCall call("bias_add");
  call.Input(FloatTensor({2, 3, 4}, x)).Input(FloatTensor({4}, bias)).Output({2, 3, 4});
  ASSERT_TRUE(call.Run().ok());
  const std::vector<float> output = call.OutputFloats();
  for (int i = 0; i < 24; ++i) EXPECT_EQ(output[i], x[i] + bias[i % 4]) << i;
}

TEST(BiasAddKernelTest, RankOne) {
  OpCall call("bias_add");
  call.Input(FloatTensor({3}, {1, 2, 3})).Input(FloatTensor({3}, {10, 20, 30})).Output({3});
  ASSERT_TRUE(call.Run().ok());
  EXPECT_THAT(call.OutputFloats(), ::testing::ElementsAre(11, 22, 33));
}

TEST(BiasAddKernelTest, RejectsBiasOfWrongLength) {
  OpCall call("bias_add");
  call.Input(MakeTensor({2, 4})).Input(MakeTensor({3})).Output({2, 4});
  absl::Status status = call.Build().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("bias_add: bias must have shape [4]"));
}

TEST(IdentityKernelTest, CopiesFloat32) {
  const std::vector<float> x = RandomFloats(6, 6);
  OpCall call("identity");
  call.Input(FloatTensor({2, 3}, x)).Output({2, 3});
  ASSERT_TRUE(call.Run().ok());
  EXPECT_EQ(call.OutputFloats(), x);
}

TEST(IdentityKernelTest, CopiesAnyDataType) {
  OpCall call("identity");
  HostTensor input = MakeTensor({3}, plan::INT64);
  for (size_t i = 0; i < input.bytes.size(); ++i) input.bytes[i] = std::byte(i);
  const std::vector<std::byte> bytes = input.bytes;
  call.Input(std::move(input)).Output({3}, plan::INT64);
  ASSERT_TRUE(call.Run().ok());
  EXPECT_EQ(call.output(0).bytes, bytes);
}

TEST(IdentityAfterKernelTest, CopiesItsFirstInputWhateverTheOthersAre) {
  const std::vector<float> x = RandomFloats(6, 7);
  OpCall call("identity_after");
  call.Input(FloatTensor({2, 3}, x))
      .Input(MakeTensor({5}, plan::INT64))
      .Input(FloatTensor({1}, {42.0f}))
      .Output({2, 3});
  ASSERT_TRUE(call.Run().ok());
  EXPECT_EQ(call.OutputFloats(), x);
}

TEST(IdentityAfterKernelTest, NeedsSomethingToWaitFor) {
  OpCall alone("identity_after");
  alone.Input(MakeTensor({3})).Output({3});
  EXPECT_EQ(alone.Build().status().code(), absl::StatusCode::kInvalidArgument);
  OpCall different_shape("identity_after");
  different_shape.Input(MakeTensor({3})).Input(MakeTensor({3})).Output({4});
  EXPECT_EQ(different_shape.Build().status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(IdentityKernelTest, RejectsDifferentDataTypeOrShape) {
  OpCall different_type("identity");
  different_type.Input(MakeTensor({3})).Output({3}, plan::INT32);
  EXPECT_THAT(different_type.Build().status().message(),
              HasSubstr("identity: output must be float32, got int32"));
  OpCall different_shape("identity");
  different_shape.Input(MakeTensor({3})).Output({4});
  EXPECT_EQ(different_shape.Build().status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace loom::kernel_test
