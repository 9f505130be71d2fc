#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/kernels/kernel_test_util.h"

namespace loom::kernel_test {
namespace {

TEST(OnesLikeKernelTest, WritesOnesWhateverTheOutputHeld) {
  OpCall call("ones_like");
  call.Input(FloatTensor({2, 3}, {1, -2, 3, 4, 5, 6})).Output({2, 3});
  ASSERT_TRUE(call.Run().ok());
  EXPECT_THAT(call.OutputFloats(), ::testing::Each(1.0f));
  std::fill(call.output(0).bytes.begin(), call.output(0).bytes.end(), std::byte{0x7f});
  ASSERT_TRUE(call.Run(1).ok());
  EXPECT_THAT(call.OutputFloats(), ::testing::Each(1.0f));
}

TEST(OnesLikeKernelTest, ScalarAndIntegerInputs) {
  OpCall scalar("ones_like");
  scalar.Input(FloatTensor({}, {5})).Output({});
  ASSERT_TRUE(scalar.Run().ok());
  EXPECT_THAT(scalar.OutputFloats(), ::testing::ElementsAre(1.0f));
  OpCall integers("ones_like");
  integers.Input(Int64Tensor({3}, {7, 8, 9})).Output({3});
  ASSERT_TRUE(integers.Run().ok());
  EXPECT_THAT(integers.OutputFloats(), ::testing::Each(1.0f));
}

TEST(OnesLikeKernelTest, OutputMustBeFloat32OfTheInputsShape) {
  OpCall mismatched("ones_like");
  mismatched.Input(FloatTensor({3}, {1, 2, 3})).Output({4});
  absl::StatusOr<std::unique_ptr<Kernel>> shape = mismatched.Build();
  ASSERT_FALSE(shape.ok());
  EXPECT_EQ(shape.status().code(), absl::StatusCode::kInvalidArgument);
  OpCall integer_output("ones_like");
  integer_output.Input(FloatTensor({3}, {1, 2, 3})).Output({3}, plan::INT64);
  absl::StatusOr<std::unique_ptr<Kernel>> type = integer_output.Build();
  ASSERT_FALSE(type.ok());
  EXPECT_EQ(type.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace loom::kernel_test
