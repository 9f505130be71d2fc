// Every collective kind as actors over the shared-memory backend, numerically, on 2, 3 and 4
// ranks, against the reference computed in collective_test_util.
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/data_type.h"
#include "gtest/gtest.h"
#include "proto/plan.pb.h"
#include "tests/runtime/collective_test_util.h"

namespace loom::testing {
namespace {

TEST(CollectiveTest, AllReduceSumAndMax) {
  for (int k : {2, 3, 4}) {
    for (plan::ReduceOperation reduce : {plan::REDUCE_SUM, plan::REDUCE_MAX}) {
      for (std::vector<int64_t> shape : {std::vector<int64_t>{5, 7}, std::vector<int64_t>{3}}) {
        CollectiveCase c;
        c.label = absl::StrCat("all_reduce_", k, "_", reduce, "_", shape.size());
        c.kind = plan::ALL_REDUCE;
        c.reduce = reduce;
        c.inputs = SameShapes(shape, k);
        RunAndCheck(c);
      }
    }
  }
}

TEST(CollectiveTest, AllGatherEvenAndUnevenAlongEveryAxis) {
  for (int k : {2, 3, 4}) {
    // Axis length 7 (uneven over 2, 3 and 4) on the leading, a middle and the last axis; 8 even.
    const std::vector<std::pair<std::vector<int64_t>, int>> cases = {
        {{7, 3}, 0}, {{2, 7, 3}, 1}, {{2, 3, 7}, 2}, {{8, 2}, 0}};
    for (const auto& [logical, axis] : cases) {
      CollectiveCase c;
      c.label = absl::StrCat("all_gather_", k, "_axis", axis, "_", logical[axis]);
      c.kind = plan::ALL_GATHER;
      c.axis = axis;
      c.inputs = SplitShapes(logical, axis, k);
      RunAndCheck(c);
    }
  }
}

TEST(CollectiveTest, ReduceScatterEvenAndUnevenAlongEveryAxis) {
  for (int k : {2, 3, 4}) {
    const std::vector<std::pair<std::vector<int64_t>, int>> cases = {
        {{7, 3}, 0}, {{2, 7, 3}, 1}, {{3, 7}, 1}, {{8}, 0}};
    for (const auto& [shape, axis] : cases) {
      for (plan::ReduceOperation reduce : {plan::REDUCE_SUM, plan::REDUCE_MAX}) {
        CollectiveCase c;
        c.label = absl::StrCat("reduce_scatter_", k, "_axis", axis, "_", reduce);
        c.kind = plan::REDUCE_SCATTER;
        c.reduce = reduce;
        c.axis = axis;
        c.inputs = SameShapes(shape, k);
        RunAndCheck(c);
      }
    }
  }
}

TEST(CollectiveTest, AllToAllBetweenSplitsOfUnevenAxes) {
  for (int k : {2, 3, 4}) {
    // S(concat_axis) -> S(axis) of a logical [7, 5, 6] tensor, and the same-axis form.
    struct Axes {
      int axis;
      int concat_axis;
    };
    for (Axes axes : {Axes{1, 0}, Axes{0, 1}, Axes{2, 1}, Axes{0, 2}}) {
      CollectiveCase c;
      c.label = absl::StrCat("all_to_all_", k, "_split", axes.axis, "_concat", axes.concat_axis);
      c.kind = plan::ALL_TO_ALL;
      c.axis = axes.axis;
      c.concat_axis = axes.concat_axis;
      c.inputs = SplitShapes({7, 5, 6}, axes.concat_axis, k);
      RunAndCheck(c);
    }
    CollectiveCase same_axis;
    same_axis.label = absl::StrCat("all_to_all_", k, "_same_axis");
    same_axis.kind = plan::ALL_TO_ALL;
    same_axis.axis = 1;
    same_axis.concat_axis = 1;
    same_axis.inputs = SameShapes({2, 7, 3}, k);
    RunAndCheck(same_axis);
  }
}

TEST(CollectiveTest, GatherAndAllToAllMoveAnyDataType) {
  for (int k : {2, 3}) {
    for (plan::DataType data_type : {plan::INT64, plan::INT32, plan::UINT8, plan::UINT16}) {
      CollectiveCase gather;
      gather.label = absl::StrCat("gather_", DataTypeName(data_type), "_", k);
      gather.kind = plan::ALL_GATHER;
      gather.axis = 1;
      gather.data_type = data_type;
      gather.inputs = SplitShapes({3, 7}, 1, k);
      RunAndCheck(gather);

      CollectiveCase all_to_all;
      all_to_all.label = absl::StrCat("all_to_all_", DataTypeName(data_type), "_", k);
      all_to_all.kind = plan::ALL_TO_ALL;
      all_to_all.axis = 1;
      all_to_all.concat_axis = 0;
      all_to_all.data_type = data_type;
      all_to_all.inputs = SplitShapes({5, 7}, 0, k);
      RunAndCheck(all_to_all);
    }
  }
}

TEST(CollectiveTest, ManyPiecesThroughOneCollective) {
  CollectiveCase c;
  c.label = "many_pieces";
  c.kind = plan::ALL_REDUCE;
  c.inputs = SameShapes({64}, 3);
  c.pieces = 50;
  RunAndCheck(c);
}

TEST(CollectiveTest, ASingleRankCommunicatorCopies) {
  CollectiveCase c;
  c.label = "single_rank";
  c.kind = plan::ALL_GATHER;
  c.axis = 1;
  c.inputs = SameShapes({2, 3}, 1);
  RunAndCheck(c);
}

}  // namespace
}  // namespace loom::testing
