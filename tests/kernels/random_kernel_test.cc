#include <cmath>
#include <cstdint>
#include <string>
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

}  // namespace
}  // namespace loom::kernel_test
