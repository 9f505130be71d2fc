#ifndef LOOM_KERNELS_CPU_COUNTER_RANDOM_H_
#define LOOM_KERNELS_CPU_COUNTER_RANDOM_H_

// The counter-based random generator of the "random" and "random_integers" kernels: SplitMix64
// mixing (MixBits, RandomStreamKey, RandomBits) and the maps from random bits to uniform, bounded
// and standard normal values. The CPU and CUDA random kernels and loom-gpt's model
// (tools/loom-gpt/gpt_model.cc) use it.

#include <cmath>
#include <cstdint>

namespace loom::cpu {

// Counter-based random numbers: every value is a pure function of (stream key, counter), so any
// slice of a random tensor can be generated on its own, in any order, on any machine.

// The SplitMix64 finaliser: a bijection of 64-bit words with good avalanche.
inline uint64_t MixBits(uint64_t value) {
  value = (value ^ (value >> 30)) * 0xbf58476d1ce4e5b9ULL;
  value = (value ^ (value >> 27)) * 0x94d049bb133111ebULL;
  return value ^ (value >> 31);
}

// The SplitMix64 increment (2^64 / golden ratio, odd).
inline constexpr uint64_t kGoldenGamma = 0x9e3779b97f4a7c15ULL;

// The key of one random stream: a tensor's seed and, unless every piece shares one stream, the
// piece index.
inline uint64_t RandomStreamKey(uint64_t seed, uint64_t piece) {
  return MixBits(MixBits(seed + kGoldenGamma) ^ (piece * 0xd1b54a32d192ed03ULL + kGoldenGamma));
}

// 64 random bits for draw `lane` (0 or 1) of element `counter` of a stream: output number
// 2 * counter + lane of a SplitMix64 generator started at `key`.
inline uint64_t RandomBits(uint64_t key, uint64_t counter, uint64_t lane) {
  return MixBits(key + (2 * counter + lane + 1) * kGoldenGamma);
}

// Uniform in [0, 1) with 53 random bits.
inline double UniformFromBits(uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1.0p-53; }

// An integer in [0, high) for high >= 1: floor(bits * high / 2^64), biased by at most
// high / 2^64 (what "random_integers" draws).
inline uint64_t BoundedFromBits(uint64_t bits, uint64_t high) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(bits) * high) >> 64);
}

// Uniform in (0, 1], never 0 (for a logarithm).
inline double PositiveUniformFromBits(uint64_t bits) {
  return static_cast<double>((bits >> 11) + 1) * 0x1.0p-53;
}

// A standard normal value for element `counter`: Box-Muller on the element's two draws (the sine
// half is dropped so that each element depends on its counter only).
inline double StandardNormal(uint64_t key, uint64_t counter) {
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  const double radius =
      std::sqrt(-2.0 * std::log(PositiveUniformFromBits(RandomBits(key, counter, 0))));
  return radius * std::cos(kTwoPi * UniformFromBits(RandomBits(key, counter, 1)));
}

}  // namespace loom::cpu

#endif  // LOOM_KERNELS_CPU_COUNTER_RANDOM_H_
