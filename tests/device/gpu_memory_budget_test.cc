// device/gpu_memory_budget.h: the reserve and the default budget of a GPU.
#include "device/gpu_memory_budget.h"

#include <cstdint>

#include "gtest/gtest.h"

namespace loom {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

TEST(GpuMemoryBudgetTest, TheReserveIsOneGibibyteOrAtwentieth) {
  EXPECT_EQ(GpuMemoryReserve(8 * kGiB), kGiB);        // 1/20 would be 0.4 GiB
  EXPECT_EQ(GpuMemoryReserve(80 * kGiB), 4 * kGiB);   // an H100
  EXPECT_EQ(GpuMemoryReserve(140 * kGiB), 7 * kGiB);  // an H200
}

TEST(GpuMemoryBudgetTest, TheBudgetIsTheFreeMemoryLessTheReserve) {
  EXPECT_EQ(DefaultGpuMemoryBudget({.free_bytes = 79 * kGiB, .total_bytes = 80 * kGiB}), 75 * kGiB);
  EXPECT_EQ(DefaultGpuMemoryBudget({.free_bytes = 6 * kGiB, .total_bytes = 8 * kGiB}), 5 * kGiB);
  // A GPU others already filled: every job is refused rather than one admitted to fail.
  EXPECT_EQ(DefaultGpuMemoryBudget({.free_bytes = kGiB / 2, .total_bytes = 80 * kGiB}), 1);
}

}  // namespace
}  // namespace loom
