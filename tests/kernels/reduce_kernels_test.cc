#include <cmath>
#include <cstdint>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/kernels/kernel_test_util.h"

namespace loom::kernel_test {
namespace {

using ::testing::HasSubstr;

struct Reduction {
  std::vector<double> values;
  Shape shape;
  int64_t reduced_count = 1;
};

// Sums of `input` over `axes` (empty: all) by visiting every input element, in double.
Reduction ReferenceSum(const std::vector<float>& input, const Shape& shape,
                       const std::vector<int64_t>& axes, bool keep_dims) {
  const int rank = shape.rank();
  std::vector<bool> reduced(rank, axes.empty());
  for (int64_t axis : axes) reduced[axis < 0 ? axis + rank : axis] = true;
  Reduction result;
  std::vector<int64_t> dimensions;
  std::vector<int64_t> kept_dimensions;
  for (int axis = 0; axis < rank; ++axis) {
    if (reduced[axis]) {
      result.reduced_count *= shape.dimension(axis);
      if (keep_dims) dimensions.push_back(1);
    } else {
      dimensions.push_back(shape.dimension(axis));
      kept_dimensions.push_back(shape.dimension(axis));
    }
  }
  result.shape = Shape(dimensions);
  result.values.assign(result.shape.NumElements(), 0.0);
  for (int64_t flat = 0; flat < shape.NumElements(); ++flat) {
    int64_t remainder = flat;
    std::vector<int64_t> index(rank);
    for (int axis = rank - 1; axis >= 0; --axis) {
      index[axis] = remainder % shape.dimension(axis);
      remainder /= shape.dimension(axis);
    }
    int64_t output = 0;
    size_t kept = 0;
    for (int axis = 0; axis < rank; ++axis) {
      if (reduced[axis]) continue;
      output = output * kept_dimensions[kept++] + index[axis];
    }
    result.values[output] += input[flat];
  }
  return result;
}

struct Case {
  std::vector<int64_t> axes;
  bool keep_dims;
};

class ReduceKernelTest : public ::testing::TestWithParam<Case> {};

TEST_P(ReduceKernelTest, SumAndMeanMatchReference) {
  const Shape shape({3, 4, 5, 2});
  const std::vector<float> input = RandomFloats(shape.NumElements(), 17, -2.0f, 2.0f);
  const Case& test_case = GetParam();
  const Reduction expected = ReferenceSum(input, shape, test_case.axes, test_case.keep_dims);
  for (bool mean : {false, true}) {
    OpCall call(mean ? "reduce_mean" : "reduce_sum");
    call.Attribute("keep_dims", BoolAttribute(test_case.keep_dims))
        .Input(FloatTensor(shape, input))
        .Output(expected.shape);
    if (!test_case.axes.empty()) call.Attribute("axes", IntListAttribute(test_case.axes));
    absl::Status status = call.Run();
    ASSERT_TRUE(status.ok()) << status;
    // Run twice: the accumulators are reset between calls.
    status = call.Run();
    ASSERT_TRUE(status.ok()) << status;
    const std::vector<float> output = call.OutputFloats();
    ASSERT_EQ(output.size(), expected.values.size());
    for (size_t i = 0; i < output.size(); ++i) {
      const double value = mean ? expected.values[i] / static_cast<double>(expected.reduced_count)
                                : expected.values[i];
      EXPECT_NEAR(output[i], value, 1e-5 * (1.0 + std::abs(value)))
          << (mean ? "mean " : "sum ") << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AxesSets, ReduceKernelTest,
                         ::testing::Values(Case{{}, false}, Case{{}, true}, Case{{0}, false},
                                           Case{{1}, true}, Case{{3}, false}, Case{{-1}, true},
                                           Case{{0, 2}, false}, Case{{0, 2}, true},
                                           Case{{1, 3}, false}, Case{{1, 2}, true},
                                           Case{{2, 0}, false}, Case{{0, 1, 2, 3}, false},
                                           Case{{0, 1, 3}, true}));

TEST(ReduceKernelTestMisc, EmptyAxesListMeansAll) {
  OpCall call("reduce_sum");
  call.Attribute("axes", IntListAttribute({})).Input(FloatTensor({2, 2}, {1, 2, 3, 4})).Output({});
  ASSERT_TRUE(call.Run().ok());
  EXPECT_THAT(call.OutputFloats(), ::testing::ElementsAre(10.0f));
}

TEST(ReduceKernelTestMisc, SizeOneAxesAndScalar) {
  OpCall ones("reduce_sum");
  ones.Attribute("axes", IntListAttribute({1}))
      .Input(FloatTensor({1, 3, 1}, {1, 2, 3}))
      .Output({1, 1});
  ASSERT_TRUE(ones.Run().ok());
  EXPECT_THAT(ones.OutputFloats(), ::testing::ElementsAre(6.0f));

  OpCall scalar("reduce_mean");
  scalar.Input(FloatTensor({}, {2.5f})).Output({});
  ASSERT_TRUE(scalar.Run().ok());
  EXPECT_THAT(scalar.OutputFloats(), ::testing::ElementsAre(2.5f));
}

TEST(ReduceKernelTestMisc, MeanDividesByGivenDivisor) {
  // A slice of 2 rows of a logical tensor of 8: the partial means sum to the logical mean.
  OpCall call("reduce_mean");
  call.Attribute("axes", IntListAttribute({0}))
      .Attribute("divisor", FloatAttribute(8.0))
      .Input(FloatTensor({2, 3}, {1, 2, 3, 5, 6, 7}))
      .Output({3});
  ASSERT_TRUE(call.Run().ok());
  EXPECT_THAT(call.OutputFloats(), ::testing::ElementsAre(0.75f, 1.0f, 1.25f));
}

TEST(ReduceKernelTestMisc, EmptyReductionIsZeroSumAndNanMean) {
  OpCall sum("reduce_sum");
  sum.Attribute("axes", IntListAttribute({1})).Input(MakeTensor({2, 0})).Output({2});
  ASSERT_TRUE(sum.Run().ok());
  EXPECT_THAT(sum.OutputFloats(), ::testing::ElementsAre(0.0f, 0.0f));

  OpCall mean("reduce_mean");
  mean.Attribute("axes", IntListAttribute({1})).Input(MakeTensor({2, 0})).Output({2});
  ASSERT_TRUE(mean.Run().ok());
  EXPECT_TRUE(std::isnan(mean.OutputFloats()[0]));
}

TEST(ReduceKernelTestMisc, RejectsBadAxesAndShapes) {
  OpCall duplicate("reduce_sum");
  duplicate.Attribute("axes", IntListAttribute({1, -2}))
      .Input(MakeTensor({2, 3, 4}))
      .Output({2, 4});
  absl::Status status = duplicate.Build().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("reduce_sum: attribute 'axes' [1, -2] names axis 1 twice"));

  OpCall range("reduce_mean");
  range.Attribute("axes", IntListAttribute({3})).Input(MakeTensor({2, 3, 4})).Output({2, 3});
  EXPECT_THAT(range.Build().status().message(),
              HasSubstr("reduce_mean: attribute 'axes' [3] has axis 3 outside input [2, 3, 4]"));

  OpCall shape("reduce_sum");
  shape.Attribute("axes", IntListAttribute({1}))
      .Attribute("keep_dims", BoolAttribute(true))
      .Input(MakeTensor({2, 3, 4}))
      .Output({2, 4});
  EXPECT_THAT(shape.Build().status().message(),
              HasSubstr("reduce_sum: output has shape [2, 4] but reducing input [2, 3, 4] over "
                        "axes [1] with keep_dims=true gives [2, 1, 4]"));

  OpCall divisor("reduce_mean");
  divisor.Attribute("divisor", FloatAttribute(0.0)).Input(MakeTensor({2})).Output({});
  EXPECT_THAT(divisor.Build().status().message(),
              HasSubstr("reduce_mean: attribute 'divisor' must be finite and > 0, got 0"));

  OpCall sum_divisor("reduce_sum");
  sum_divisor.Attribute("divisor", FloatAttribute(2.0)).Input(MakeTensor({2})).Output({});
  EXPECT_THAT(sum_divisor.Build().status().message(),
              HasSubstr("reduce_sum: attribute 'divisor' applies to reduce_mean only"));

  OpCall data_type("reduce_sum");
  data_type.Input(MakeTensor({2}, plan::INT32)).Output({});
  EXPECT_THAT(data_type.Build().status().message(),
              HasSubstr("reduce_sum: input 0 must be float32, got int32"));
}

}  // namespace
}  // namespace loom::kernel_test
