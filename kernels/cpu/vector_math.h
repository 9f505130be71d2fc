#ifndef LOOM_KERNELS_CPU_VECTOR_MATH_H_
#define LOOM_KERNELS_CPU_VECTOR_MATH_H_

// Branch-free float32 exp and erf that the compiler inlines and vectorises inside element loops
// (libm's expf and erff are opaque calls, one element at a time), and a marker for such loops.

#include <bit>
#include <cmath>
#include <cstdint>

namespace loom::cpu {

// Marks a function holding a hot element loop: on x86-64 GCC compiles it twice, for x86-64-v3
// (AVX2, FMA: 8 floats a vector) and for the baseline (SSE2: 4), and picks one when the program
// loads from what the CPU supports. The FMA clone may fuse a * b + c, so results can differ in
// the last bit between machines; kernels that must be bit exact (the optimizers) do not use it.
//
// Not under the sanitizers: target_clones resolves through an ifunc, which the dynamic loader runs
// before ThreadSanitizer's runtime is up (the binary crashes at start).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
#define LOOM_VECTORIZED_LOOP __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define LOOM_VECTORIZED_LOOP
#endif

// Clamps x to [low, high] (low < 0 < high) with integer min and max on the float's bits mapped to
// integers of the same order: GCC does not vectorise loops with a float compare-and-select that
// arithmetic follows (it may trap), but does integer min and max. NaN comes out as `high`.
inline float ClampOrdered(float x, float low, float high) {
  const auto to_ordered = [](float value) {
    const int32_t bits = std::bit_cast<int32_t>(value);
    return bits ^ ((bits >> 31) & 0x7fffffff);
  };
  int32_t ordered = to_ordered(x);
  const int32_t ordered_low = to_ordered(low);
  const int32_t ordered_high = to_ordered(high);
  ordered = ordered < ordered_low ? ordered_low : ordered;
  ordered = ordered > ordered_high ? ordered_high : ordered;
  return std::bit_cast<float>(ordered ^ ((ordered >> 31) & 0x7fffffff));
}

// e^x within about 2 ulp for x in [-87.3, 88.3]; below that it returns about 1.2e-38 (not 0),
// above it and for NaN about 2.4e38 (not infinity or NaN). Cephes' expf: x = n ln 2 + r with
// |r| <= ln 2 / 2, e^r by a polynomial, 2^n by building the float's exponent.
inline float VectorExp(float x) {
  constexpr float kLog2E = 1.44269504088896341f;
  constexpr float kLn2High = 0.693359375f;
  constexpr float kLn2Low = -2.12194440e-4f;
  // Adding and subtracting 1.5 * 2^23 rounds a float of magnitude < 2^22 to the nearest integer.
  constexpr float kRounder = 12582912.0f;
  x = ClampOrdered(x, -87.3365447504019f, 88.3762626647949f);
  const float n = (x * kLog2E + kRounder) - kRounder;
  const float r = (x - n * kLn2High) - n * kLn2Low;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float e = (p * (r * r) + r) + 1.0f;
  const int32_t exponent = static_cast<int32_t>(n) + 127;
  return e * std::bit_cast<float>(static_cast<uint32_t>(exponent) << 23);
}

// erf(x) within about 2e-7 absolute: Abramowitz and Stegun 7.1.26,
// erf(|x|) = 1 - (a1 t + a2 t^2 + ... + a5 t^5) e^(-x^2) with t = 1 / (1 + p |x|), odd in x. The
// same approximation as PyTorch's vectorised CPU erf (which its GELU uses).
inline float VectorErf(float x) {
  constexpr float kP = 0.3275911f;
  // fabs and copysign, not x < 0 ? -x : x, which GCC does not vectorise.
  const float magnitude = std::fabs(x);
  const float t = 1.0f / (1.0f + kP * magnitude);
  float polynomial = 1.061405429f;
  polynomial = polynomial * t - 1.453152027f;
  polynomial = polynomial * t + 1.421413741f;
  polynomial = polynomial * t - 0.284496736f;
  polynomial = polynomial * t + 0.254829592f;
  polynomial = polynomial * t;
  const float result = 1.0f - polynomial * VectorExp(-magnitude * magnitude);
  return std::copysign(result, x);
}

}  // namespace loom::cpu

#endif  // LOOM_KERNELS_CPU_VECTOR_MATH_H_
