#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/kernels/kernel_test_util.h"

namespace loom::kernel_test {
namespace {

using ::testing::HasSubstr;

struct RandomSettings {
  int64_t seed = 1;
  std::string distribution = "uniform";
  int64_t offset = 0;
  bool same_every_piece = false;
  int64_t piece = 0;
};

std::vector<float> Generate(const Shape& shape, const RandomSettings& settings) {
  OpCall call("random");
  call.Attribute("seed", IntAttribute(settings.seed))
      .Attribute("distribution", StringAttribute(settings.distribution))
      .Attribute("offset", IntAttribute(settings.offset))
      .Attribute("same_every_piece", BoolAttribute(settings.same_every_piece))
      .Output(shape);
  absl::Status status = call.Run(settings.piece);
  EXPECT_TRUE(status.ok()) << status;
  return call.OutputFloats();
}

// How many positions hold equal values.
int CountEqual(const std::vector<float>& a, const std::vector<float>& b) {
  int count = 0;
  for (size_t i = 0; i < a.size(); ++i) count += a[i] == b[i] ? 1 : 0;
  return count;
}

class RandomDistributionTest : public ::testing::TestWithParam<std::string> {};

TEST_P(RandomDistributionTest, SameSeedSameValues) {
  RandomSettings settings{.seed = 42, .distribution = GetParam()};
  EXPECT_EQ(Generate({8, 16}, settings), Generate({8, 16}, settings));
}

TEST_P(RandomDistributionTest, DifferentSeedsDiffer) {
  const std::vector<float> first = Generate({128}, {.seed = 1, .distribution = GetParam()});
  const std::vector<float> second = Generate({128}, {.seed = 2, .distribution = GetParam()});
  EXPECT_LE(CountEqual(first, second), 1);
}

TEST_P(RandomDistributionTest, DifferentPiecesDifferUnlessSameEveryPiece) {
  const std::vector<float> piece0 = Generate({128}, {.distribution = GetParam(), .piece = 0});
  const std::vector<float> piece1 = Generate({128}, {.distribution = GetParam(), .piece = 1});
  EXPECT_LE(CountEqual(piece0, piece1), 1);
  const std::vector<float> shared0 =
      Generate({128}, {.distribution = GetParam(), .same_every_piece = true, .piece = 0});
  const std::vector<float> shared7 =
      Generate({128}, {.distribution = GetParam(), .same_every_piece = true, .piece = 7});
  EXPECT_EQ(shared0, shared7);
}

TEST_P(RandomDistributionTest, SliceMatchesUnslicedTensor) {
  const std::vector<float> whole = Generate({4, 25}, {.seed = 9, .distribution = GetParam()});
  for (int64_t offset : {0, 1, 13, 50}) {
    const std::vector<float> slice =
        Generate({37}, {.seed = 9, .distribution = GetParam(), .offset = offset});
    EXPECT_EQ(slice, std::vector<float>(whole.begin() + offset, whole.begin() + offset + 37))
        << "offset " << offset;
  }
}

TEST_P(RandomDistributionTest, KernelIsReusable) {
  OpCall call("random");
  call.Attribute("seed", IntAttribute(5))
      .Attribute("distribution", StringAttribute(GetParam()))
      .Output({64});
  ASSERT_TRUE(call.Run(3).ok());
  const std::vector<float> first = call.OutputFloats();
  ASSERT_TRUE(call.Run(4).ok());
  ASSERT_TRUE(call.Run(3).ok());
  EXPECT_EQ(call.OutputFloats(), first);
}

INSTANTIATE_TEST_SUITE_P(Distributions, RandomDistributionTest,
                         ::testing::Values("uniform", "normal"));

struct Moments {
  double mean;
  double standard_deviation;
};

Moments ComputeMoments(const std::vector<float>& values) {
  double sum = 0.0;
  for (float value : values) sum += value;
  const double mean = sum / values.size();
  double squares = 0.0;
  for (float value : values) squares += (value - mean) * (value - mean);
  return {mean, std::sqrt(squares / values.size())};
}

TEST(RandomKernelTest, UniformMoments) {
  OpCall call("random");
  call.Attribute("seed", IntAttribute(123))
      .Attribute("low", FloatAttribute(-2.0))
      .Attribute("high", FloatAttribute(3.0))
      .Output({100000});
  ASSERT_TRUE(call.Run().ok());
  const std::vector<float> values = call.OutputFloats();
  for (float value : values) {
    ASSERT_GE(value, -2.0f);
    ASSERT_LT(value, 3.0f);
  }
  const Moments moments = ComputeMoments(values);
  // Standard errors: 5 / sqrt(12 * 1e5) = 0.0046 for the mean.
  EXPECT_NEAR(moments.mean, 0.5, 0.02);
  EXPECT_NEAR(moments.standard_deviation, 5.0 / std::sqrt(12.0), 0.01);
}

TEST(RandomKernelTest, DefaultUniformIsUnitInterval) {
  const std::vector<float> values = Generate({10000}, {});
  const Moments moments = ComputeMoments(values);
  EXPECT_NEAR(moments.mean, 0.5, 0.02);
  for (float value : values) {
    ASSERT_GE(value, 0.0f);
    ASSERT_LT(value, 1.0f);
  }
}

TEST(RandomKernelTest, NormalMoments) {
  OpCall call("random");
  call.Attribute("seed", IntAttribute(321))
      .Attribute("distribution", StringAttribute("normal"))
      .Attribute("mean", FloatAttribute(1.5))
      .Attribute("std", FloatAttribute(2.0))
      .Output({100000});
  ASSERT_TRUE(call.Run().ok());
  const std::vector<float> values = call.OutputFloats();
  const Moments moments = ComputeMoments(values);
  // Standard error of the mean: 2 / sqrt(1e5) = 0.0063.
  EXPECT_NEAR(moments.mean, 1.5, 0.03);
  EXPECT_NEAR(moments.standard_deviation, 2.0, 0.03);
  // The shape is normal: about 68.27% within one standard deviation.
  int within = 0;
  for (float value : values) within += std::abs(value - 1.5) < 2.0 ? 1 : 0;
  EXPECT_NEAR(within / 100000.0, 0.6827, 0.01);
}

TEST(RandomKernelTest, RequiresSeed) {
  OpCall call("random", "init_w");
  call.Output({4});
  absl::Status status = call.Build().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "task 'init_w' (op 'random'): random: missing attribute 'seed'");
}

TEST(RandomKernelTest, RejectsBadAttributes) {
  OpCall unknown_distribution("random");
  unknown_distribution.Attribute("seed", IntAttribute(1))
      .Attribute("distribution", StringAttribute("poisson"))
      .Output({4});
  EXPECT_THAT(unknown_distribution.Build().status().message(),
              HasSubstr("'distribution' must be \"uniform\" or \"normal\", got \"poisson\""));

  OpCall negative_std("random");
  negative_std.Attribute("seed", IntAttribute(1))
      .Attribute("distribution", StringAttribute("normal"))
      .Attribute("std", FloatAttribute(-1.0))
      .Output({4});
  EXPECT_THAT(negative_std.Build().status().message(), HasSubstr("'std' must be >= 0"));

  OpCall inverted_range("random");
  inverted_range.Attribute("seed", IntAttribute(1))
      .Attribute("low", FloatAttribute(2.0))
      .Attribute("high", FloatAttribute(1.0))
      .Output({4});
  EXPECT_THAT(inverted_range.Build().status().message(), HasSubstr("'low' (2) is above 'high'"));

  OpCall foreign("random");
  foreign.Attribute("seed", IntAttribute(1)).Attribute("std", FloatAttribute(1.0)).Output({4});
  EXPECT_THAT(foreign.Build().status().message(),
              HasSubstr("attribute 'std' does not apply to distribution \"uniform\""));

  OpCall negative_offset("random");
  negative_offset.Attribute("seed", IntAttribute(1))
      .Attribute("offset", IntAttribute(-1))
      .Output({4});
  EXPECT_THAT(negative_offset.Build().status().message(), HasSubstr("'offset' must be >= 0"));

  OpCall not_float("random");
  not_float.Attribute("seed", IntAttribute(1)).Output({4}, plan::INT32);
  EXPECT_THAT(not_float.Build().status().message(),
              HasSubstr("random: output 0 must be float32, got int32"));
}

// The window [begin, begin + shape) of a row-major tensor of `logical` holding `values`.
template <typename T>
std::vector<T> Window(const std::vector<T>& values, const std::vector<int64_t>& logical,
                      const std::vector<int64_t>& begin, const std::vector<int64_t>& shape) {
  std::vector<T> window;
  for (int64_t a = 0; a < shape[0]; ++a) {
    for (int64_t b = 0; b < shape[1]; ++b) {
      for (int64_t c = 0; c < shape[2]; ++c) {
        window.push_back(
            values[((begin[0] + a) * logical[1] + begin[1] + b) * logical[2] + begin[2] + c]);
      }
    }
  }
  return window;
}

// The windows of a split of `logical` along `axis` at `bounds` (first 0, last the dimension).
std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> Split(
    const std::vector<int64_t>& logical, int axis, const std::vector<int64_t>& bounds) {
  std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> windows;
  for (size_t part = 0; part + 1 < bounds.size(); ++part) {
    std::vector<int64_t> begin(3, 0);
    std::vector<int64_t> shape = logical;
    begin[axis] = bounds[part];
    shape[axis] = bounds[part + 1] - bounds[part];
    windows.push_back({begin, shape});
  }
  return windows;
}

// Every window that the tests cut from a [5, 7, 6] tensor: uneven splits along each axis, and
// windows cut along two and three axes at once.
std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> TestWindows(
    const std::vector<int64_t>& logical) {
  std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> windows;
  for (const auto& split : {Split(logical, 0, {0, 2, 5}), Split(logical, 0, {0, 1, 2, 3, 4, 5}),
                            Split(logical, 1, {0, 3, 4, 7}), Split(logical, 1, {0, 4, 7}),
                            Split(logical, 2, {0, 1, 6}), Split(logical, 2, {0, 3, 6})}) {
    windows.insert(windows.end(), split.begin(), split.end());
  }
  windows.push_back({{1, 0, 2}, {3, 7, 3}});
  windows.push_back({{2, 3, 1}, {2, 2, 4}});
  windows.push_back({{4, 6, 5}, {1, 1, 1}});
  windows.push_back({{0, 2, 0}, {5, 0, 6}});
  return windows;
}

TEST_P(RandomDistributionTest, WindowsOfALogicalTensorMatchTheWholeTensor) {
  const std::vector<int64_t> logical = {5, 7, 6};
  for (int64_t piece : {0, 3}) {
    OpCall whole("random");
    whole.Attribute("seed", IntAttribute(77))
        .Attribute("distribution", StringAttribute(GetParam()))
        .Output(Shape(logical));
    ASSERT_TRUE(whole.Run(piece).ok());
    const std::vector<float> values = whole.OutputFloats();
    for (const auto& [begin, shape] : TestWindows(logical)) {
      OpCall window("random");
      window.Attribute("seed", IntAttribute(77))
          .Attribute("distribution", StringAttribute(GetParam()))
          .Attribute("logical_shape", IntListAttribute(logical))
          .Attribute("slice_begin", IntListAttribute(begin))
          .Output(Shape(shape));
      absl::Status status = window.Run(piece);
      ASSERT_TRUE(status.ok()) << status;
      EXPECT_EQ(window.OutputFloats(), Window(values, logical, begin, shape))
          << "begin " << ::testing::PrintToString(begin) << " shape "
          << ::testing::PrintToString(shape);
    }
  }
}

TEST_P(RandomDistributionTest, FullWindowEqualsDefaultAndOffsetStillApplies) {
  const std::vector<float> plain = Generate({4, 6}, {.seed = 3, .distribution = GetParam()});
  OpCall full("random");
  full.Attribute("seed", IntAttribute(3))
      .Attribute("distribution", StringAttribute(GetParam()))
      .Attribute("logical_shape", IntListAttribute({4, 6}))
      .Output({4, 6});
  ASSERT_TRUE(full.Run().ok());
  EXPECT_EQ(full.OutputFloats(), plain);

  // logical_shape with an offset: the logical tensor starts at counter `offset`.
  const std::vector<float> shifted =
      Generate({24}, {.seed = 3, .distribution = GetParam(), .offset = 24});
  OpCall window("random");
  window.Attribute("seed", IntAttribute(3))
      .Attribute("distribution", StringAttribute(GetParam()))
      .Attribute("offset", IntAttribute(24))
      .Attribute("logical_shape", IntListAttribute({4, 6}))
      .Attribute("slice_begin", IntListAttribute({1, 2}))
      .Output({2, 3});
  ASSERT_TRUE(window.Run().ok());
  EXPECT_EQ(window.OutputFloats(), std::vector<float>({shifted[8], shifted[9], shifted[10],
                                                       shifted[14], shifted[15], shifted[16]}));
}

TEST(RandomKernelTest, RejectsBadWindows) {
  OpCall outside("random");
  outside.Attribute("seed", IntAttribute(1))
      .Attribute("logical_shape", IntListAttribute({4, 6}))
      .Attribute("slice_begin", IntListAttribute({2, 0}))
      .Output({3, 6});
  absl::Status status = outside.Build().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("random: the output window at slice_begin [2, 0] of shape [3, 6] does "
                        "not lie inside logical_shape [4, 6] (axis 0)"));

  OpCall rank("random");
  rank.Attribute("seed", IntAttribute(1))
      .Attribute("logical_shape", IntListAttribute({24}))
      .Output({4, 6});
  EXPECT_THAT(rank.Build().status().message(),
              HasSubstr("random: attribute 'logical_shape' [24] has rank 1 but the output [4, 6] "
                        "has rank 2"));

  OpCall begin_rank("random");
  begin_rank.Attribute("seed", IntAttribute(1))
      .Attribute("logical_shape", IntListAttribute({4, 6}))
      .Attribute("slice_begin", IntListAttribute({0}))
      .Output({4, 6});
  EXPECT_THAT(begin_rank.Build().status().message(),
              HasSubstr("random: attribute 'slice_begin' [0] has 1 entries but the output has "
                        "rank 2"));

  OpCall alone("random");
  alone.Attribute("seed", IntAttribute(1))
      .Attribute("slice_begin", IntListAttribute({0}))
      .Output({4});
  EXPECT_THAT(alone.Build().status().message(),
              HasSubstr("random: attribute 'slice_begin' needs 'logical_shape'"));
}

std::vector<int64_t> IntegerValues(const HostTensor& tensor) {
  std::vector<int64_t> values;
  if (tensor.data_type == plan::INT32) {
    for (int32_t value : tensor.Values<int32_t>()) values.push_back(value);
  } else {
    for (int64_t value : tensor.Values<int64_t>()) values.push_back(value);
  }
  return values;
}

TEST(RandomIntegersKernelTest, ValuesInRangeAndRoughlyUniform) {
  for (plan::DataType data_type : {plan::INT32, plan::INT64}) {
    OpCall call("random_integers");
    call.Attribute("seed", IntAttribute(5))
        .Attribute("high", IntAttribute(10))
        .Output({20000}, data_type);
    ASSERT_TRUE(call.Run().ok());
    std::vector<int> histogram(10, 0);
    for (int64_t value : IntegerValues(call.output(0))) {
      ASSERT_GE(value, 0);
      ASSERT_LT(value, 10);
      ++histogram[value];
    }
    // 2000 expected per bucket; the standard deviation is about 42.
    for (int count : histogram) EXPECT_NEAR(count, 2000, 250);
  }
}

TEST(RandomIntegersKernelTest, Int32AndInt64AgreeAndLargeRangesWork) {
  OpCall narrow("random_integers");
  narrow.Attribute("seed", IntAttribute(8))
      .Attribute("high", IntAttribute(int64_t{1} << 31))
      .Output({64}, plan::INT32);
  OpCall wide("random_integers");
  wide.Attribute("seed", IntAttribute(8))
      .Attribute("high", IntAttribute(int64_t{1} << 31))
      .Output({64}, plan::INT64);
  ASSERT_TRUE(narrow.Run().ok());
  ASSERT_TRUE(wide.Run().ok());
  EXPECT_EQ(IntegerValues(narrow.output(0)), IntegerValues(wide.output(0)));
  for (int64_t value : IntegerValues(narrow.output(0))) {
    EXPECT_GE(value, 0);
    EXPECT_LT(value, int64_t{1} << 31);
  }
}

TEST(RandomIntegersKernelTest, PiecesDifferUnlessSameEveryPiece) {
  auto generate = [](int64_t piece, bool same_every_piece) {
    OpCall call("random_integers");
    call.Attribute("seed", IntAttribute(9))
        .Attribute("high", IntAttribute(1000000))
        .Attribute("same_every_piece", BoolAttribute(same_every_piece))
        .Output({128}, plan::INT64);
    EXPECT_TRUE(call.Run(piece).ok());
    return IntegerValues(call.output(0));
  };
  const std::vector<int64_t> piece0 = generate(0, false);
  const std::vector<int64_t> piece1 = generate(1, false);
  int equal = 0;
  for (size_t i = 0; i < piece0.size(); ++i) equal += piece0[i] == piece1[i] ? 1 : 0;
  EXPECT_LE(equal, 1);
  EXPECT_EQ(generate(0, true), generate(5, true));
}

TEST(RandomIntegersKernelTest, WindowsOfALogicalTensorMatchTheWholeTensor) {
  const std::vector<int64_t> logical = {5, 7, 6};
  OpCall whole("random_integers");
  whole.Attribute("seed", IntAttribute(21))
      .Attribute("high", IntAttribute(50000))
      .Output(Shape(logical), plan::INT32);
  ASSERT_TRUE(whole.Run(2).ok());
  const std::vector<int64_t> values = IntegerValues(whole.output(0));
  for (const auto& [begin, shape] : TestWindows(logical)) {
    OpCall window("random_integers");
    window.Attribute("seed", IntAttribute(21))
        .Attribute("high", IntAttribute(50000))
        .Attribute("logical_shape", IntListAttribute(logical))
        .Attribute("slice_begin", IntListAttribute(begin))
        .Output(Shape(shape), plan::INT64);
    absl::Status status = window.Run(2);
    ASSERT_TRUE(status.ok()) << status;
    EXPECT_EQ(IntegerValues(window.output(0)), Window(values, logical, begin, shape))
        << "begin " << ::testing::PrintToString(begin);
  }
}

TEST(RandomIntegersKernelTest, RejectsBadAttributes) {
  OpCall zero("random_integers");
  zero.Attribute("seed", IntAttribute(1))
      .Attribute("high", IntAttribute(0))
      .Output({4}, plan::INT32);
  absl::Status status = zero.Build().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("random_integers: attribute 'high' must be in [1, 2147483648] for int32, "
                        "got 0"));

  OpCall too_high("random_integers");
  too_high.Attribute("seed", IntAttribute(1))
      .Attribute("high", IntAttribute((int64_t{1} << 31) + 1))
      .Output({4}, plan::INT32);
  EXPECT_THAT(too_high.Build().status().message(), HasSubstr("'high' must be in [1, 2147483648]"));

  OpCall missing("random_integers", "ids");
  missing.Attribute("seed", IntAttribute(1)).Output({4}, plan::INT64);
  EXPECT_EQ(missing.Build().status().message(),
            "task 'ids' (op 'random_integers'): random_integers: missing attribute 'high'");

  OpCall data_type("random_integers");
  data_type.Attribute("seed", IntAttribute(1)).Attribute("high", IntAttribute(4)).Output({4});
  EXPECT_THAT(data_type.Build().status().message(),
              HasSubstr("random_integers: output must be int32 or int64, got float32"));
}

}  // namespace
}  // namespace loom::kernel_test
