#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/broadcast.h"
#include "tests/kernels/kernel_test_util.h"

namespace loom::kernel_test {
namespace {

using ::testing::HasSubstr;

struct BinaryOperation {
  std::string op_type;
  std::function<float(float, float)> function;
};

std::vector<BinaryOperation> AllOperations() {
  return {{"add", [](float a, float b) { return a + b; }},
          {"subtract", [](float a, float b) { return a - b; }},
          {"multiply", [](float a, float b) { return a * b; }},
          {"divide", [](float a, float b) { return a / b; }}};
}

// The index into `shape` (aligned to the trailing axes of `output`) of the output element at
// `coordinates`, with broadcast axes read at 0.
int64_t BroadcastIndex(const Shape& shape, const Shape& output,
                       const std::vector<int64_t>& coordinates) {
  int64_t index = 0;
  const int leading = output.rank() - shape.rank();
  for (int axis = 0; axis < shape.rank(); ++axis) {
    const int64_t coordinate = shape.dimension(axis) == 1 ? 0 : coordinates[leading + axis];
    index = index * shape.dimension(axis) + coordinate;
  }
  return index;
}

// NumPy semantics, one output element at a time.
std::vector<float> ReferenceBinary(const std::function<float(float, float)>& function,
                                   const std::vector<float>& a, const Shape& a_shape,
                                   const std::vector<float>& b, const Shape& b_shape,
                                   const Shape& output) {
  std::vector<float> result(output.NumElements());
  std::vector<int64_t> coordinates(output.rank());
  for (int64_t flat = 0; flat < output.NumElements(); ++flat) {
    int64_t remainder = flat;
    for (int axis = output.rank() - 1; axis >= 0; --axis) {
      coordinates[axis] = remainder % output.dimension(axis);
      remainder /= output.dimension(axis);
    }
    result[flat] = function(a[BroadcastIndex(a_shape, output, coordinates)],
                            b[BroadcastIndex(b_shape, output, coordinates)]);
  }
  return result;
}

struct BroadcastCase {
  Shape a;
  Shape b;
  Shape output;
};

void PrintTo(const BroadcastCase& shapes, std::ostream* stream) {
  *stream << shapes.a.ToString() << " with " << shapes.b.ToString() << " -> "
          << shapes.output.ToString();
}

class BinaryKernelTest : public ::testing::TestWithParam<BroadcastCase> {};

TEST_P(BinaryKernelTest, MatchesNumpyBroadcasting) {
  const BroadcastCase& shapes = GetParam();
  const std::vector<float> a = RandomFloats(shapes.a.NumElements(), 3, 0.5f, 2.0f);
  const std::vector<float> b = RandomFloats(shapes.b.NumElements(), 4, 0.5f, 2.0f);
  for (const BinaryOperation& operation : AllOperations()) {
    SCOPED_TRACE(operation.op_type + " " + shapes.a.ToString() + " " + shapes.b.ToString());
    OpCall call(operation.op_type);
    call.Input(FloatTensor(shapes.a, a)).Input(FloatTensor(shapes.b, b)).Output(shapes.output);
    ASSERT_TRUE(call.Run().ok());
    const std::vector<float> expected =
        ReferenceBinary(operation.function, a, shapes.a, b, shapes.b, shapes.output);
    EXPECT_EQ(call.OutputFloats(), expected);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, BinaryKernelTest,
    ::testing::Values(
        BroadcastCase{{2, 3, 4}, {2, 3, 4}, {2, 3, 4}}, BroadcastCase{{2, 3, 4}, {4}, {2, 3, 4}},
        BroadcastCase{{4}, {2, 3, 4}, {2, 3, 4}}, BroadcastCase{{2, 1, 4}, {3, 1}, {2, 3, 4}},
        BroadcastCase{{2, 3}, {1}, {2, 3}}, BroadcastCase{{1}, {2, 3}, {2, 3}},
        BroadcastCase{{}, {5}, {5}}, BroadcastCase{{1}, {1}, {1}},
        BroadcastCase{{3, 1}, {1, 4}, {3, 4}}, BroadcastCase{{2, 3, 1}, {2, 1, 5}, {2, 3, 5}},
        BroadcastCase{{5, 1, 1, 3}, {4, 1}, {5, 1, 4, 3}},
        BroadcastCase{{2, 1, 3, 1, 2}, {1, 4, 3, 5, 1}, {2, 4, 3, 5, 2}},
        BroadcastCase{{2, 3, 4}, {1, 3, 4}, {2, 3, 4}},
        BroadcastCase{{2, 3, 4}, {2, 3, 1}, {2, 3, 4}}, BroadcastCase{{0, 3}, {3}, {0, 3}}));

TEST(BinaryKernelTest, DivideFollowsIeee) {
  OpCall call("divide");
  call.Input(FloatTensor({2}, {1.0f, -1.0f})).Input(FloatTensor({1}, {0.0f})).Output({2});
  ASSERT_TRUE(call.Run().ok());
  EXPECT_THAT(call.OutputFloats(), ::testing::ElementsAre(std::numeric_limits<float>::infinity(),
                                                          -std::numeric_limits<float>::infinity()));
}

TEST(BinaryKernelTest, RunsRepeatedly) {
  OpCall call("add");
  call.Input(FloatTensor({2, 2}, {1, 2, 3, 4})).Input(FloatTensor({2, 1}, {10, 20})).Output({2, 2});
  ASSERT_TRUE(call.Run().ok());
  ASSERT_TRUE(call.Run().ok());
  EXPECT_THAT(call.OutputFloats(), ::testing::ElementsAre(11, 12, 23, 24));
}

TEST(BinaryKernelTest, RejectsShapesThatDoNotBroadcast) {
  OpCall call("multiply");
  call.Input(MakeTensor({2, 3})).Input(MakeTensor({4})).Output({2, 3});
  absl::Status status = call.Build().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("multiply: shapes [2, 3] and [4] do not broadcast"));
}

TEST(BinaryKernelTest, RejectsOutputOfWrongShape) {
  OpCall call("add");
  call.Input(MakeTensor({2, 1})).Input(MakeTensor({3})).Output({2, 1});
  absl::Status status = call.Build().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("broadcast to [2, 3]"));
}

TEST(BinaryKernelTest, RejectsWrongInputCount) {
  OpCall call("subtract");
  call.Input(MakeTensor({2})).Output({2});
  absl::Status status = call.Build().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("subtract: expects 2 inputs and 1 output, got 1 input and 1 output"));
}

TEST(BroadcastTest, ShapesFollowNumpyRules) {
  EXPECT_EQ(*cpu::BroadcastShapes({2, 1, 4}, {3, 1}), Shape({2, 3, 4}));
  EXPECT_EQ(*cpu::BroadcastShapes({}, {3}), Shape({3}));
  EXPECT_EQ(*cpu::BroadcastShapes({1}, {}), Shape({1}));
  EXPECT_EQ(*cpu::BroadcastShapes({0}, {1}), Shape({0}));
  EXPECT_FALSE(cpu::BroadcastShapes({0}, {2}).ok());
  EXPECT_FALSE(cpu::BroadcastShapes({2, 3}, {3, 3}).ok());
}

TEST(BroadcastTest, PlanMergesContiguousAxes) {
  // Both inputs contiguous: one axis.
  cpu::BroadcastIteration same = cpu::BroadcastIteration::Plan({2, 3, 4}, {2, 3, 4}, {2, 3, 4});
  EXPECT_THAT(same.dimensions, ::testing::ElementsAre(24));
  // A bias: the rows repeat b.
  cpu::BroadcastIteration bias = cpu::BroadcastIteration::Plan({2, 3, 4}, {4}, {2, 3, 4});
  EXPECT_THAT(bias.dimensions, ::testing::ElementsAre(6, 4));
  EXPECT_THAT(bias.a_strides, ::testing::ElementsAre(4, 1));
  EXPECT_THAT(bias.b_strides, ::testing::ElementsAre(0, 1));
  // Size-1 output axes vanish; a single element still has one axis.
  cpu::BroadcastIteration scalar = cpu::BroadcastIteration::Plan({1, 1}, {1}, {1, 1});
  EXPECT_THAT(scalar.dimensions, ::testing::ElementsAre(1));
}

}  // namespace
}  // namespace loom::kernel_test
