// The cast kernel: float32 <-> bfloat16 rounding (to nearest, ties to even; NaN, infinities,
// overflow) and the type and shape checks.
#include "kernels/cpu/cast_kernel.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/kernels/kernel_test_util.h"

namespace loom::kernel_test {
namespace {

using ::testing::HasSubstr;

std::vector<uint16_t> Bits16(const HostTensor& tensor) {
  std::vector<uint16_t> bits(tensor.bytes.size() / 2);
  std::memcpy(bits.data(), tensor.bytes.data(), tensor.bytes.size());
  return bits;
}

TEST(CastKernelTest, Float32ToBfloat16RoundsToNearestEven) {
  const float tie_down = 1.0f + std::ldexp(1.0f, -8);    // halfway between 1 and 1 + 2^-7
  const float tie_up = 1.0f + 3 * std::ldexp(1.0f, -8);  // halfway between 1 + 2^-7 and 1 + 2^-6
  const float above_tie = 1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20);
  const float largest = std::numeric_limits<float>::max();
  OpCall call("cast");
  call.Input(FloatTensor({8}, {1.0f, -2.5f, tie_down, tie_up, above_tie, largest,
                               -std::numeric_limits<float>::infinity(),
                               std::numeric_limits<float>::quiet_NaN()}))
      .Output({8}, plan::BFLOAT16);
  ASSERT_TRUE(call.Run().ok());
  const std::vector<uint16_t> bits = Bits16(call.output(0));
  EXPECT_EQ(bits[0], 0x3f80);  // 1
  EXPECT_EQ(bits[1], 0xc020);  // -2.5
  EXPECT_EQ(bits[2], 0x3f80);  // the tie goes to the even mantissa: 1
  EXPECT_EQ(bits[3], 0x3f82);  // ... here up: 1 + 2^-6
  EXPECT_EQ(bits[4], 0x3f81);  // just above the tie rounds up: 1 + 2^-7
  EXPECT_EQ(bits[5], 0x7f80);  // past the largest bfloat16: infinity
  EXPECT_EQ(bits[6], 0xff80);  // -infinity
  EXPECT_TRUE(std::isnan(cpu::Bfloat16ToFloat32(bits[7])));
}

TEST(CastKernelTest, Bfloat16ToFloat32IsExactAndARoundTripKeepsBfloat16Values) {
  const std::vector<float> values = RandomFloats(1000, 7, -100.0f, 100.0f);
  OpCall down("cast");
  down.Input(FloatTensor({1000}, values)).Output({1000}, plan::BFLOAT16);
  ASSERT_TRUE(down.Run().ok());
  OpCall up("cast");
  up.Input(down.output(0)).Output({1000});
  ASSERT_TRUE(up.Run().ok());
  const std::vector<float> rounded = up.OutputFloats();
  for (int i = 0; i < 1000; ++i) {
    // Within half a bfloat16 unit in the last place (8 bits of mantissa): relative 2^-8.
    EXPECT_LE(std::fabs(rounded[i] - values[i]), std::ldexp(std::fabs(values[i]), -8)) << i;
    EXPECT_EQ(cpu::Float32ToBfloat16(rounded[i]), Bits16(down.output(0))[i]) << i;
  }
}

TEST(CastKernelTest, ACastToTheSameTypeCopies) {
  OpCall call("cast");
  call.Input(FloatTensor({2, 2}, {1.5f, -3.0f, 0.1f, 7.0f})).Output({2, 2});
  ASSERT_TRUE(call.Run().ok());
  EXPECT_THAT(call.OutputFloats(), ::testing::ElementsAre(1.5f, -3.0f, 0.1f, 7.0f));
}

TEST(CastKernelTest, OtherTypesAndShapesAreRejectedNamingTheOp) {
  OpCall integers("cast");
  integers.Input(Int64Tensor({3}, {1, 2, 3})).Output({3});
  absl::StatusOr<std::unique_ptr<Kernel>> kernel = integers.Build();
  ASSERT_FALSE(kernel.ok());
  EXPECT_EQ(kernel.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(kernel.status().message(),
              HasSubstr("cast: casts between float32 and bfloat16, not from int64 to float32"));
  OpCall shapes("cast");
  shapes.Input(FloatTensor({3}, {1, 2, 3})).Output({4}, plan::BFLOAT16);
  EXPECT_EQ(shapes.Build().status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace loom::kernel_test
