#ifndef LOOM_KERNELS_CPU_DATA_DATASET_SAMPLING_H_
#define LOOM_KERNELS_CPU_DATA_DATASET_SAMPLING_H_

// The arithmetic of token datasets (docs/DATA.md defines it; this is that definition in C++):
// SplitMix64 and HashValues, the seeded permutation of [0, n) in constant memory
// (Permutation: a Feistel network with cycle walking) behind the per-epoch shuffles, and
// BlendPattern, which deals the global samples to the sources of a blend by their weights.

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "absl/status/statusor.h"

namespace loom::cpu {

uint64_t SplitMix64(uint64_t value);
// h = 0; for each value: h = SplitMix64(h ^ value).
uint64_t HashValues(std::initializer_list<uint64_t> values);

// The purposes of a shuffle's key: HashValues({seed, source, epoch, purpose}).
inline constexpr uint64_t kShuffleDocuments = 1;
inline constexpr uint64_t kShuffleSamples = 2;

// A one-to-one map of [0, n) onto itself chosen by `key` (n >= 1).
class Permutation {
 public:
  Permutation(uint64_t n, uint64_t key);
  // The image of i < n.
  uint64_t operator()(uint64_t i) const;

 private:
  uint64_t Feistel(uint64_t value) const;

  uint64_t n_;
  uint64_t key_;
  // Half the bits of the network's domain, and its mask.
  int half_bits_;
  uint64_t mask_;
};

// The deal of global samples to the sources of a blend: a pattern of kPeriod samples in which
// source j has quota_j of them.
class BlendPattern {
 public:
  static constexpr int64_t kPeriod = 10000;

  // `weights`: each finite and > 0 (the caller maps an unset 0 to 1). INVALID_ARGUMENT naming the
  // source (its index) whose quota would be 0 or whose weight is not positive and finite.
  static absl::StatusOr<BlendPattern> Create(const std::vector<double>& weights);

  struct Pick {
    int source = 0;
    // The sample's number among the source's samples.
    int64_t index = 0;
  };
  // Global sample g >= 0.
  Pick Choose(int64_t g) const;

  const std::vector<int64_t>& quotas() const { return quotas_; }

 private:
  std::vector<int64_t> quotas_;
  // pattern_[r]: the source of position r of the period.
  std::vector<int32_t> pattern_;
  // rank_[r]: the count of pattern_[r] in pattern_[0, r).
  std::vector<int32_t> rank_;
};

}  // namespace loom::cpu

#endif  // LOOM_KERNELS_CPU_DATA_DATASET_SAMPLING_H_
