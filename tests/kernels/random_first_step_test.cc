// "random" and "random_integers" with "first_step": a resumed job draws, at each step, the values
// the uninterrupted run drew there.
#include <cstdint>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/kernels/kernel_test_util.h"

namespace loom::kernel_test {
namespace {

using ::testing::HasSubstr;

// An op and its output's data type.
struct Draw {
  std::string op_type;
  plan::DataType data_type;
};

// The output bytes of `draw` (seed 7, output [3, 4]) at `piece` with "first_step" `first_step`
// (left unset when 0).
std::vector<std::byte> DrawBytes(const Draw& draw, int64_t piece, int64_t first_step,
                                 bool same_every_piece = false) {
  OpCall call(draw.op_type);
  call.Attribute("seed", IntAttribute(7)).Output({3, 4}, draw.data_type);
  if (draw.op_type == "random") {
    call.Attribute("distribution", StringAttribute("normal"));
  } else {
    call.Attribute("high", IntAttribute(1000));
  }
  if (first_step != 0) call.Attribute("first_step", IntAttribute(first_step));
  if (same_every_piece) call.Attribute("same_every_piece", BoolAttribute(true));
  absl::Status status = call.Run(piece);
  EXPECT_TRUE(status.ok()) << status;
  return call.output(0).bytes;
}

class RandomFirstStepTest : public ::testing::TestWithParam<Draw> {};

TEST_P(RandomFirstStepTest, PieceOfAResumedRunIsStepFirstStepPlusPiece) {
  for (int64_t first_step : {1, 5, 1000}) {
    for (int64_t piece : {0, 1, 3}) {
      EXPECT_EQ(DrawBytes(GetParam(), piece, first_step),
                DrawBytes(GetParam(), first_step + piece, 0))
          << "first_step " << first_step << ", piece " << piece;
    }
  }
  EXPECT_NE(DrawBytes(GetParam(), 0, 1), DrawBytes(GetParam(), 0, 0));
}

TEST_P(RandomFirstStepTest, SameEveryPieceIgnoresTheStep) {
  EXPECT_EQ(DrawBytes(GetParam(), 2, 9, /*same_every_piece=*/true),
            DrawBytes(GetParam(), 0, 0, /*same_every_piece=*/true));
}

TEST_P(RandomFirstStepTest, NegativeFirstStepIsRejected) {
  OpCall call(GetParam().op_type);
  call.Attribute("seed", IntAttribute(7))
      .Attribute("first_step", IntAttribute(-1))
      .Output({2}, GetParam().data_type);
  if (GetParam().op_type == "random_integers") call.Attribute("high", IntAttribute(10));
  absl::Status status = call.Build().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr(GetParam().op_type + ": attribute 'first_step' must be "
                                                               ">= 0, got -1"));
}

INSTANTIATE_TEST_SUITE_P(Ops, RandomFirstStepTest,
                         ::testing::Values(Draw{"random", plan::FLOAT32},
                                           Draw{"random_integers", plan::INT64}),
                         [](const ::testing::TestParamInfo<Draw>& info) {
                           return info.param.op_type;
                         });

}  // namespace
}  // namespace loom::kernel_test
