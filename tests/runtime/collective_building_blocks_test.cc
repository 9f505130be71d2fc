// The building blocks of the collectives on their own: the balanced split of an axis and the copy
// of a block between tensors, against naive loops.
#include <cstdint>
#include <vector>

#include "core/balanced_split.h"
#include "core/tensor.h"
#include "gtest/gtest.h"
#include "proto/plan.pb.h"
#include "runtime/block_copy.h"
#include "tests/runtime/collective_test_util.h"

namespace loom::testing {
namespace {

TEST(BalancedRangeTest, TheRemainderGoesToTheFirstParts) {
  const int64_t expected_7_over_3[][2] = {{0, 3}, {3, 5}, {5, 7}};
  for (int index = 0; index < 3; ++index) {
    EXPECT_EQ(BalancedRange(7, 3, index).begin, expected_7_over_3[index][0]);
    EXPECT_EQ(BalancedRange(7, 3, index).end, expected_7_over_3[index][1]);
  }
  const int64_t expected_7_over_4[][2] = {{0, 2}, {2, 4}, {4, 6}, {6, 7}};
  for (int index = 0; index < 4; ++index) {
    EXPECT_EQ(BalancedRange(7, 4, index).begin, expected_7_over_4[index][0]);
    EXPECT_EQ(BalancedRange(7, 4, index).end, expected_7_over_4[index][1]);
  }
  EXPECT_EQ(BalancedRange(2, 4, 3).size(), 0);
  for (int64_t length : {0, 1, 5, 8, 13}) {
    for (int64_t parts : {1, 2, 3, 5}) {
      int64_t next = 0;
      for (int64_t index = 0; index < parts; ++index) {
        EXPECT_EQ(BalancedRange(length, parts, index).begin, next);
        EXPECT_EQ(BalancedRange(length, parts, index).size(), SliceOf(length, parts, index).second);
        next = BalancedRange(length, parts, index).end;
      }
      EXPECT_EQ(next, length);
    }
  }
}

TEST(BlockCopyTest, CopiesBlocksAlongEveryAxisLikeANaiveLoop) {
  const Shape source_shape{3, 4, 5};
  std::vector<int32_t> source(source_shape.NumElements());
  for (size_t i = 0; i < source.size(); ++i) source[i] = static_cast<int32_t>(i);
  const Shape destination_shape{4, 6, 5};
  for (int axis = 0; axis < 3; ++axis) {
    for (int destination_axis = 0; destination_axis < 3; ++destination_axis) {
      Shape block = source_shape;
      block.set_dimension(axis, 2);
      std::vector<int32_t> destination(destination_shape.NumElements(), -1);
      auto source_origin = AxisOrigin(3, axis, 1);
      auto destination_origin = AxisOrigin(3, destination_axis, 1);
      bool fits = true;
      for (int a = 0; a < 3; ++a) {
        fits = fits && destination_origin[a] + block.dimension(a) <= destination_shape.dimension(a);
      }
      if (!fits) continue;
      CopyBlock(TensorView{source.data(), plan::INT32, source_shape}, source_origin,
                TensorView{destination.data(), plan::INT32, destination_shape}, destination_origin,
                block);
      ReferenceTensor from{source_shape, {}};
      ReferenceTensor to{destination_shape, {}};
      for (int64_t flat = 0; flat < block.NumElements(); ++flat) {
        ReferenceTensor block_index{block, {}};
        std::vector<int64_t> index = block_index.Unravel(flat);
        std::vector<int64_t> at_source = index;
        std::vector<int64_t> at_destination = index;
        for (int a = 0; a < 3; ++a) {
          at_source[a] += source_origin[a];
          at_destination[a] += destination_origin[a];
        }
        ASSERT_EQ(destination[to.Ravel(at_destination)], source[from.Ravel(at_source)])
            << "axis " << axis << " destination axis " << destination_axis;
        destination[to.Ravel(at_destination)] = -1;
      }
      // Nothing outside the block was written.
      for (int32_t value : destination) ASSERT_EQ(value, -1);
    }
  }
}

}  // namespace
}  // namespace loom::testing
