#include <chrono>
#include <cstdint>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/kernels/kernel_test_util.h"

namespace loom::kernel_test {
namespace {

using ::testing::HasSubstr;

TEST(SleepKernelTest, WaitsAtLeastTheTime) {
  OpCall call("sleep");
  call.Attribute("microseconds", IntAttribute(20000));
  absl::StatusOr<std::unique_ptr<Kernel>> kernel = call.Build();
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  for (int repeat = 0; repeat < 2; ++repeat) {
    const auto start = std::chrono::steady_clock::now();
    ASSERT_TRUE(call.Compute(**kernel).ok());
    EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::microseconds(20000));
  }
}

TEST(SleepKernelTest, ZeroMicrosecondsReturns) {
  OpCall call("sleep");
  call.Attribute("microseconds", IntAttribute(0)).Output({2});
  EXPECT_TRUE(call.Run().ok());
}

TEST(SleepKernelTest, CopiesInputZeroWhenByteSizesMatch) {
  OpCall call("sleep");
  call.Attribute("microseconds", IntAttribute(100))
      .Input(FloatTensor({2, 2}, {1, 2, 3, 4}))
      .Input(MakeTensor({7}, plan::INT64))
      .Output({4})
      .Output({3}, plan::UINT8);
  for (std::byte& byte : call.output(1).bytes) byte = std::byte{9};
  ASSERT_TRUE(call.Run().ok());
  EXPECT_THAT(call.OutputFloats(0), ::testing::ElementsAre(1, 2, 3, 4));
  EXPECT_THAT(call.output(1).bytes, ::testing::Each(std::byte{9}));
}

TEST(SleepKernelTest, LeavesOutputWhenByteSizesDiffer) {
  OpCall call("sleep");
  call.Attribute("microseconds", IntAttribute(0))
      .Input(FloatTensor({3}, {1, 2, 3}))
      .Output({2}, plan::INT32);
  for (std::byte& byte : call.output(0).bytes) byte = std::byte{7};
  ASSERT_TRUE(call.Run().ok());
  EXPECT_THAT(call.output(0).bytes, ::testing::Each(std::byte{7}));
}

TEST(SleepKernelTest, RequiresNonNegativeMicroseconds) {
  OpCall missing("sleep");
  EXPECT_THAT(missing.Build().status().message(),
              HasSubstr("sleep: missing attribute 'microseconds'"));
  OpCall negative("sleep");
  negative.Attribute("microseconds", IntAttribute(-5));
  absl::Status status = negative.Build().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("'microseconds' must be >= 0, got -5"));
}

}  // namespace
}  // namespace loom::kernel_test
