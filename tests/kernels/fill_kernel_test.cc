#include <cstdint>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/kernels/kernel_test_util.h"

namespace loom::kernel_test {
namespace {

using ::testing::Each;
using ::testing::HasSubstr;
using ::testing::SizeIs;

TEST(FillKernelTest, Float32) {
  OpCall call("fill");
  call.Attribute("value", FloatAttribute(2.5)).Output({2, 3});
  ASSERT_TRUE(call.Run().ok());
  EXPECT_THAT(call.OutputFloats(), ::testing::AllOf(SizeIs(6), Each(2.5f)));
}

TEST(FillKernelTest, DefaultsToZero) {
  OpCall call("fill");
  call.Output({4});
  for (std::byte& byte : call.output(0).bytes) byte = std::byte{0x55};
  ASSERT_TRUE(call.Run().ok());
  EXPECT_THAT(call.OutputFloats(), Each(0.0f));
}

TEST(FillKernelTest, Int32FromIntegerAndWholeFloat) {
  OpCall from_integer("fill");
  from_integer.Attribute("value", IntAttribute(-7)).Output({5}, plan::INT32);
  ASSERT_TRUE(from_integer.Run().ok());
  EXPECT_THAT(from_integer.output(0).Values<int32_t>(), ::testing::AllOf(SizeIs(5), Each(-7)));

  OpCall from_float("fill");
  from_float.Attribute("value", FloatAttribute(3.0)).Output({2, 2}, plan::INT32);
  ASSERT_TRUE(from_float.Run().ok());
  EXPECT_THAT(from_float.output(0).Values<int32_t>(), ::testing::AllOf(SizeIs(4), Each(3)));
}

TEST(FillKernelTest, Int64KeepsLargeIntegersExact) {
  const int64_t value = (int64_t{1} << 60) + 1;
  OpCall call("fill");
  call.Attribute("value", IntAttribute(value)).Output({3}, plan::INT64);
  ASSERT_TRUE(call.Run().ok());
  EXPECT_THAT(call.output(0).Values<int64_t>(), ::testing::AllOf(SizeIs(3), Each(value)));
}

TEST(FillKernelTest, RejectsFractionForIntegerOutput) {
  OpCall call("fill");
  call.Attribute("value", FloatAttribute(2.5)).Output({3}, plan::INT32);
  absl::Status status = call.Build().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("fill: value 2.5 is not a whole number"));
}

TEST(FillKernelTest, RejectsOutOfRangeInt32) {
  OpCall call("fill");
  call.Attribute("value", IntAttribute(int64_t{1} << 40)).Output({3}, plan::INT32);
  absl::Status status = call.Build().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("does not fit in int32"));
}

TEST(FillKernelTest, RejectsOtherDataTypesAndInputs) {
  OpCall unsupported("fill");
  unsupported.Output({3}, plan::UINT8);
  EXPECT_THAT(unsupported.Build().status().message(),
              HasSubstr("fill: output must be float32, int32 or int64, got uint8"));
  OpCall with_input("fill");
  with_input.Input(MakeTensor({3})).Output({3});
  EXPECT_THAT(with_input.Build().status().message(),
              HasSubstr("fill: expects 0 inputs and 1 output, got 1 input and 1 output"));
}

TEST(FillKernelTest, RejectsNonNumericValue) {
  OpCall call("fill");
  call.Attribute("value", StringAttribute("one")).Output({3});
  absl::Status status = call.Build().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("fill: attribute 'value' must be a number"));
}

}  // namespace
}  // namespace loom::kernel_test
