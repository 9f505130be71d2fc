#include "kernels/cpu/data/dataset_sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace loom::cpu {

uint64_t SplitMix64(uint64_t value) {
  uint64_t z = value + 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

uint64_t HashValues(std::initializer_list<uint64_t> values) {
  uint64_t hash = 0;
  for (uint64_t value : values) hash = SplitMix64(hash ^ value);
  return hash;
}

Permutation::Permutation(uint64_t n, uint64_t key) : n_(n), key_(key) {
  int bits = 0;  // the least c with 2^c >= n
  while (bits < 64 && (uint64_t{1} << bits) < n) ++bits;
  half_bits_ = std::max(1, (bits + 1) / 2);
  mask_ = (uint64_t{1} << half_bits_) - 1;
}

uint64_t Permutation::Feistel(uint64_t value) const {
  uint64_t left = value >> half_bits_;
  uint64_t right = value & mask_;
  for (uint64_t round = 0; round < 4; ++round) {
    const uint64_t mixed = left ^ (HashValues({key_, round, right}) & mask_);
    left = right;
    right = mixed;
  }
  return (left << half_bits_) | right;
}

uint64_t Permutation::operator()(uint64_t i) const {
  if (n_ <= 1) return 0;
  // The network permutes [0, 4^half_bits) >= n: walking the cycle from i < n reaches a value
  // below n again (after 4 steps on average at most).
  uint64_t value = Feistel(i);
  while (value >= n_) value = Feistel(value);
  return value;
}

absl::StatusOr<BlendPattern> BlendPattern::Create(const std::vector<double>& weights) {
  if (weights.empty()) return absl::InvalidArgumentError("a blend needs at least one source");
  double total = 0;
  for (size_t j = 0; j < weights.size(); ++j) {
    if (!std::isfinite(weights[j]) || weights[j] <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("source ", j, ": weight ", weights[j], " is not a finite number > 0"));
    }
    total += weights[j];
  }
  const int sources = static_cast<int>(weights.size());
  BlendPattern blend;
  std::vector<double> exact(sources);
  blend.quotas_.resize(sources);
  int64_t dealt = 0;
  for (int j = 0; j < sources; ++j) {
    exact[j] = (weights[j] / total) * static_cast<double>(kPeriod);
    blend.quotas_[j] = static_cast<int64_t>(std::floor(exact[j]));
    dealt += blend.quotas_[j];
  }
  // The samples left go to the largest remainders, the lower source first among equal ones.
  std::vector<int> order(sources);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return exact[a] - blend.quotas_[a] > exact[b] - blend.quotas_[b];
  });
  for (int k = 0; dealt < kPeriod; ++k, ++dealt) ++blend.quotas_[order[k % sources]];
  for (int j = 0; j < sources; ++j) {
    if (blend.quotas_[j] == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("source ", j, ": weight ", weights[j], " is under 1/", kPeriod,
                       " of the total weight ", total, ", so the blend would never read it"));
    }
  }
  // The source furthest behind its share takes the next sample.
  std::vector<int64_t> counts(sources, 0);
  blend.pattern_.resize(kPeriod);
  blend.rank_.resize(kPeriod);
  for (int64_t r = 0; r < kPeriod; ++r) {
    int best = 0;
    int64_t best_deficit = 0;
    for (int j = 0; j < sources; ++j) {
      const int64_t deficit = blend.quotas_[j] * (r + 1) - counts[j] * kPeriod;
      if (j == 0 || deficit > best_deficit) {
        best = j;
        best_deficit = deficit;
      }
    }
    blend.pattern_[r] = best;
    blend.rank_[r] = static_cast<int32_t>(counts[best]++);
  }
  return blend;
}

BlendPattern::Pick BlendPattern::Choose(int64_t g) const {
  const int64_t position = g % kPeriod;
  const int source = pattern_[position];
  return Pick{source, (g / kPeriod) * quotas_[source] + rank_[position]};
}

}  // namespace loom::cpu
