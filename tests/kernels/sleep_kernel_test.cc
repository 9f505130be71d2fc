#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/sleep_kernel.h"
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

TEST(SleepKernelTest, ReturnsCancelledSoonAfterTheJobEnds) {
  OpCall call("sleep");
  call.Attribute("microseconds", IntAttribute(1'000'000'000'000));  // about 11.6 days
  std::atomic<bool> ending{false};
  KernelInit init = call.Init();
  init.ending = &ending;
  absl::StatusOr<std::unique_ptr<Kernel>> kernel = cpu::CreateSleepKernel(init);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  std::chrono::steady_clock::time_point set_at;
  std::thread ender([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    set_at = std::chrono::steady_clock::now();
    ending.store(true);
  });
  absl::Status status = call.Compute(**kernel);
  const auto returned_at = std::chrono::steady_clock::now();
  ender.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
  EXPECT_THAT(status.message(), HasSubstr("sleep: interrupted"));
  EXPECT_LT(returned_at - set_at, std::chrono::milliseconds(100));
}

TEST(SleepKernelTest, AnEndedJobSleepsNoMore) {
  OpCall call("sleep");
  call.Attribute("microseconds", IntAttribute(int64_t{1} << 62));  // no overflow either
  std::atomic<bool> ending{true};
  KernelInit init = call.Init();
  init.ending = &ending;
  absl::StatusOr<std::unique_ptr<Kernel>> kernel = cpu::CreateSleepKernel(init);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  EXPECT_EQ(call.Compute(**kernel).code(), absl::StatusCode::kCancelled);
}

TEST(SleepKernelTest, SlicesKeepTheTotalExact) {
  // Longer than a slice, not a multiple of it.
  OpCall call("sleep");
  call.Attribute("microseconds", IntAttribute(45'000));
  std::atomic<bool> ending{false};
  KernelInit init = call.Init();
  init.ending = &ending;
  absl::StatusOr<std::unique_ptr<Kernel>> kernel = cpu::CreateSleepKernel(init);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(call.Compute(**kernel).ok());
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_GE(elapsed, std::chrono::microseconds(45'000));
  EXPECT_LT(elapsed, std::chrono::seconds(1));
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
