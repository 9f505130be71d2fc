// Checked arithmetic (core/checked_arithmetic.h) and the limits on a tensor's size
// (core/tensor.h): counts that overflow int64 are reported, never wrapped (issue 56, finding 2).
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>

#include "core/checked_arithmetic.h"
#include "core/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

TEST(CheckedArithmeticTest, MultiplyReportsOverflowInsteadOfWrapping) {
  EXPECT_EQ(CheckedMultiply(6, 7), 42);
  EXPECT_EQ(CheckedMultiply(-6, 7), -42);
  EXPECT_EQ(CheckedMultiply(kMax, 1), kMax);
  EXPECT_EQ(CheckedMultiply(kMax, 0), 0);
  EXPECT_EQ(CheckedMultiply(24, 768614336404564651), std::nullopt);              // 8 modulo 2^64
  EXPECT_EQ(CheckedMultiply(7, 7905747460161236407), std::nullopt);              // 1 modulo 2^64
  EXPECT_EQ(CheckedMultiply(int64_t{1} << 31, int64_t{1} << 32), std::nullopt);  // 2^63
  EXPECT_EQ(CheckedMultiply(int64_t{1} << 31, int64_t{1} << 31), int64_t{1} << 62);
  EXPECT_EQ(CheckedMultiply(kMin, -1), std::nullopt);
}

TEST(CheckedArithmeticTest, AddReportsOverflowInsteadOfWrapping) {
  EXPECT_EQ(CheckedAdd(40, 2), 42);
  EXPECT_EQ(CheckedAdd(kMax, 0), kMax);
  EXPECT_EQ(CheckedAdd(kMax, 1), std::nullopt);
  EXPECT_EQ(CheckedAdd(kMin, -1), std::nullopt);
  EXPECT_EQ(CheckedAdd(kMax, kMin), -1);
}

TEST(ShapeTest, ElementCountThatOverflowsIsNotWrapped) {
  const Shape wraps({24, 768614336404564651});
  EXPECT_EQ(wraps.CheckedNumElements(), std::nullopt);
  // Saturated, never the wrapped 8: an allocation sized from it fails rather than being small.
  EXPECT_EQ(wraps.NumElements(), kMax);
  EXPECT_EQ(wraps.ElementsAfter(0), 768614336404564651);
  EXPECT_EQ(wraps.ElementsBefore(1), 24);
  EXPECT_EQ(Shape({2, -3}).CheckedNumElements(), std::nullopt);
  EXPECT_EQ(Shape({2, 3, 4}).CheckedNumElements(), 24);
  EXPECT_EQ(Shape({}).CheckedNumElements(), 1);
  EXPECT_EQ(Shape({0, kMax, kMax}).CheckedNumElements(), 0);
  TensorView view{nullptr, plan::FLOAT32, Shape({int64_t{1} << 62})};
  EXPECT_EQ(view.ByteSize(), kMax);
}

TEST(CheckedTensorBytesTest, ValidShapesGiveTheirBytes) {
  EXPECT_EQ(*CheckedTensorBytes({2, 3}, plan::FLOAT32), 24);
  EXPECT_EQ(*CheckedTensorBytes({}, plan::INT64), 8);
  EXPECT_EQ(*CheckedTensorBytes({0, 5}, plan::BFLOAT16), 0);
  EXPECT_EQ(*CheckedTensorBytes({kMaxTensorElements}, plan::INT64), kMaxTensorBytes);
  EXPECT_EQ(*CheckedTensorBytes({int64_t{1} << 24, int64_t{1} << 24}, plan::UINT8),
            kMaxTensorElements);
}

TEST(CheckedTensorBytesTest, ShapesBeyondTheLimitsAreRefused) {
  auto refused = [](std::initializer_list<int64_t> shape, plan::DataType data_type) {
    absl::StatusOr<int64_t> bytes = CheckedTensorBytes(shape, data_type);
    EXPECT_EQ(bytes.status().code(), absl::StatusCode::kInvalidArgument) << bytes.status();
    return std::string(bytes.status().message());
  };
  EXPECT_THAT(refused({24, 768614336404564651}, plan::FLOAT32),
              HasSubstr("shape [24, 768614336404564651] has more than 2^48"));
  EXPECT_THAT(refused({kMaxTensorElements + 1}, plan::UINT8), HasSubstr("has more than 2^48"));
  EXPECT_THAT(refused({int64_t{1} << 31, int64_t{1} << 31}, plan::FLOAT32),
              HasSubstr("has more than 2^48"));
  EXPECT_THAT(refused({int64_t{1} << 40, int64_t{1} << 40}, plan::FLOAT32),
              HasSubstr("(beyond int64)"));
  EXPECT_THAT(refused({4, -1}, plan::FLOAT32), HasSubstr("shape [4, -1] has a negative extent"));
  EXPECT_THAT(refused({4}, plan::DATA_TYPE_UNSPECIFIED), HasSubstr("has no data type"));
  // A zero extent does not hide the others: every sub-product is bounded too.
  EXPECT_THAT(refused({0, kMax}, plan::FLOAT32), HasSubstr("has more than 2^48"));
}

}  // namespace
}  // namespace loom
