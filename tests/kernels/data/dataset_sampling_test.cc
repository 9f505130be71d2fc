// The arithmetic of token datasets (kernels/cpu/data/dataset_sampling.h): SplitMix64's published
// values, permutations that are one-to-one for every size, and blend patterns that give each
// source its quota and never run ahead of its share by more than one sample.

#include "kernels/cpu/data/dataset_sampling.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <set>
#include <vector>

#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom::cpu {
namespace {

using ::testing::HasSubstr;

TEST(DatasetSamplingTest, SplitMix64MatchesItsReferenceSequence) {
  // The generator seeded with 0 (state += golden ratio, then the mix) yields these first values.
  EXPECT_EQ(SplitMix64(0), 0xE220A8397B1DCDAFULL);
  EXPECT_EQ(SplitMix64(0x9E3779B97F4A7C15ULL), 0x6E789E6AA1B965F4ULL);
  EXPECT_EQ(HashValues({}), 0u);
  EXPECT_EQ(HashValues({5}), SplitMix64(5));
  EXPECT_EQ(HashValues({5, 9}), SplitMix64(SplitMix64(5) ^ 9));
}

TEST(DatasetSamplingTest, PermutationsAreOneToOneForEverySize) {
  for (uint64_t n = 1; n <= 300; ++n) {
    for (uint64_t key : {0ULL, 1ULL, 0xDEADBEEFULL, ~0ULL}) {
      const Permutation permutation(n, key);
      std::vector<bool> hit(n, false);
      for (uint64_t i = 0; i < n; ++i) {
        const uint64_t image = permutation(i);
        ASSERT_LT(image, n) << "n " << n << " key " << key;
        ASSERT_FALSE(hit[image]) << "n " << n << " key " << key << " i " << i;
        hit[image] = true;
      }
    }
  }
}

TEST(DatasetSamplingTest, LargePermutationsStayInRangeWithoutCollisions) {
  for (uint64_t n : {uint64_t{1} << 20, uint64_t{1000000007}, uint64_t{1} << 40,
                     std::numeric_limits<uint64_t>::max() / 3}) {
    const Permutation permutation(n, 42);
    std::set<uint64_t> images;
    for (uint64_t i = 0; i < 20000; ++i) {
      const uint64_t image = permutation(n - 1 - i);
      ASSERT_LT(image, n);
      images.insert(image);
    }
    EXPECT_EQ(images.size(), 20000u) << n;
  }
}

TEST(DatasetSamplingTest, ShufflesDependOnTheKey) {
  const Permutation first(1000, HashValues({1, 0, 0, kShuffleSamples}));
  const Permutation second(1000, HashValues({1, 0, 1, kShuffleSamples}));
  int same = 0;
  for (uint64_t i = 0; i < 1000; ++i) same += first(i) == second(i) ? 1 : 0;
  EXPECT_LT(same, 20);
}

TEST(DatasetSamplingTest, BlendPatternsGiveQuotasAndStayWithinOneOfTheShare) {
  const std::vector<std::vector<double>> blends = {{1},       {3, 1},       {1, 1},
                                                   {1, 2},    {0.3, 0.7},   {5, 3, 2},
                                                   {1, 1, 1}, {1000, 1, 1}, {0.1, 7, 2.5, 9}};
  for (const std::vector<double>& weights : blends) {
    absl::StatusOr<BlendPattern> blend = BlendPattern::Create(weights);
    ASSERT_TRUE(blend.ok()) << blend.status();
    double total = 0;
    for (double weight : weights) total += weight;
    int64_t quota_sum = 0;
    for (size_t j = 0; j < weights.size(); ++j) {
      EXPECT_LE(std::abs(static_cast<double>(blend->quotas()[j]) -
                         weights[j] / total * BlendPattern::kPeriod),
                1.0);
      quota_sum += blend->quotas()[j];
    }
    EXPECT_EQ(quota_sum, BlendPattern::kPeriod);
    // Over two periods: each source's samples are numbered 0, 1, 2, ... in order, and its count
    // never strays more than one sample from its quota's share.
    std::vector<int64_t> counts(weights.size(), 0);
    for (int64_t g = 0; g < 2 * BlendPattern::kPeriod; ++g) {
      const BlendPattern::Pick pick = blend->Choose(g);
      ASSERT_EQ(pick.index, counts[pick.source]) << "g " << g;
      ++counts[pick.source];
      for (size_t j = 0; j < weights.size(); ++j) {
        const double share = static_cast<double>(blend->quotas()[j]) * static_cast<double>(g + 1) /
                             BlendPattern::kPeriod;
        ASSERT_LE(std::abs(static_cast<double>(counts[j]) - share), 1.0) << "g " << g;
      }
    }
    for (size_t j = 0; j < weights.size(); ++j) {
      EXPECT_EQ(counts[j], 2 * blend->quotas()[j]);
    }
  }
}

TEST(DatasetSamplingTest, ThreeToOneIsExactPerPeriod) {
  absl::StatusOr<BlendPattern> blend = BlendPattern::Create({3, 1});
  ASSERT_TRUE(blend.ok()) << blend.status();
  EXPECT_EQ(blend->quotas(), (std::vector<int64_t>{7500, 2500}));
  const BlendPattern::Pick far = blend->Choose(int64_t{1} << 60);
  EXPECT_GE(far.index, 0);
}

TEST(DatasetSamplingTest, BadWeightsAreRefusedNamingTheSource) {
  EXPECT_THAT(BlendPattern::Create({}).status().message(), HasSubstr("at least one source"));
  EXPECT_THAT(BlendPattern::Create({1, 0}).status().message(), HasSubstr("source 1: weight 0"));
  EXPECT_THAT(BlendPattern::Create({1, -2}).status().message(), HasSubstr("source 1"));
  EXPECT_THAT(BlendPattern::Create({std::nan(""), 1}).status().message(), HasSubstr("source 0"));
  EXPECT_THAT(BlendPattern::Create({1, 1e-5}).status().message(),
              HasSubstr("source 1: weight 1e-05 is under 1/10000"));
}

}  // namespace
}  // namespace loom::cpu
