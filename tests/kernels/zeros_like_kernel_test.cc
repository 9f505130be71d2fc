#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/kernels/kernel_test_util.h"

namespace loom::kernel_test {
namespace {

TEST(ZerosLikeKernelTest, WritesZerosWhateverTheOutputHeld) {
  OpCall call("zeros_like");
  call.Input(FloatTensor({2, 3}, {1, -2, 3, 4, 5, 6})).Output({2, 3});
  ASSERT_TRUE(call.Run().ok());
  std::fill(call.output(0).bytes.begin(), call.output(0).bytes.end(), std::byte{0x7f});
  ASSERT_TRUE(call.Run(1).ok());
  EXPECT_THAT(call.OutputFloats(), ::testing::Each(0.0f));
}

TEST(ZerosLikeKernelTest, AnyDataTypeButShapesMustMatch) {
  OpCall integers("zeros_like");
  integers.Input(Int64Tensor({3}, {7, 8, 9})).Output({3}, plan::INT64);
  ASSERT_TRUE(integers.Run().ok());
  OpCall mismatched("zeros_like");
  mismatched.Input(FloatTensor({3}, {1, 2, 3})).Output({4});
  absl::StatusOr<std::unique_ptr<Kernel>> kernel = mismatched.Build();
  ASSERT_FALSE(kernel.ok());
  EXPECT_EQ(kernel.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace loom::kernel_test
