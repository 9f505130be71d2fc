#ifndef LOOM_KERNELS_CPU_LAYER_NORM_STATISTICS_H_
#define LOOM_KERNELS_CPU_LAYER_NORM_STATISTICS_H_

// ComputeRowStatistics: the mean and rstd of one layer_norm row, inline, in two passes over kLanes
// float accumulators added in double. The CPU layer_norm kernel and its gradient both call it, so
// that they see the same numbers.

#include <cmath>
#include <cstdint>

namespace loom::cpu {

// Sums of a row in kLanes independent float accumulators (which the compiler keeps in one vector
// register: a single float accumulator is a serial chain it may not reorder), added in double.
inline constexpr int64_t kLanes = 8;

// The mean and 1 / sqrt(variance + epsilon) of one row of layer_norm (the biased variance, as
// PyTorch), shared by the forward and the gradient so that both see the same numbers. Two passes:
// the mean, then the squared deviations from it.
struct RowStatistics {
  float mean = 0.0f;
  float rstd = 0.0f;
};

inline RowStatistics ComputeRowStatistics(const float* x, int64_t n, double epsilon) {
  if (n == 0) return {0.0f, static_cast<float>(1.0 / std::sqrt(epsilon))};
  float lanes[kLanes] = {};
  const int64_t whole = n - n % kLanes;
  for (int64_t i = 0; i < whole; i += kLanes) {
    for (int64_t lane = 0; lane < kLanes; ++lane) lanes[lane] += x[i + lane];
  }
  double sum = 0.0;
  for (int64_t lane = 0; lane < kLanes; ++lane) sum += lanes[lane];
  for (int64_t i = whole; i < n; ++i) sum += x[i];
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  for (int64_t lane = 0; lane < kLanes; ++lane) lanes[lane] = 0.0f;
  for (int64_t i = 0; i < whole; i += kLanes) {
    for (int64_t lane = 0; lane < kLanes; ++lane) {
      const float centred = x[i + lane] - mean;
      lanes[lane] += centred * centred;
    }
  }
  double squares = 0.0;
  for (int64_t lane = 0; lane < kLanes; ++lane) squares += lanes[lane];
  for (int64_t i = whole; i < n; ++i) {
    const double centred = x[i] - mean;
    squares += centred * centred;
  }
  const double variance = squares / static_cast<double>(n);
  return {mean, static_cast<float>(1.0 / std::sqrt(variance + epsilon))};
}

}  // namespace loom::cpu

#endif  // LOOM_KERNELS_CPU_LAYER_NORM_STATISTICS_H_
