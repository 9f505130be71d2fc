#include "kernels/cpu/attention_probabilities.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cpu/vector_math.h"

namespace loom::cpu {

namespace {

// Row i of the row-major [length, length] `scores` keeps columns 0..i: a stable softmax over them
// (the vectorised exp, the sum in 8 float lanes added in double), zeros after.
LOOM_VECTORIZED_LOOP void CausalSoftmaxRows(float* scores, int64_t length) {
  constexpr int64_t kLanes = 8;
  for (int64_t row = 0; row < length; ++row) {
    float* s = scores + row * length;
    const int64_t visible = row + 1;
    float maximum = s[0];
    for (int64_t j = 1; j < visible; ++j) maximum = s[j] > maximum ? s[j] : maximum;
    for (int64_t j = 0; j < visible; ++j) s[j] = VectorExp(s[j] - maximum);
    float lanes[kLanes] = {};
    const int64_t whole = visible - visible % kLanes;
    for (int64_t j = 0; j < whole; j += kLanes) {
      for (int64_t lane = 0; lane < kLanes; ++lane) lanes[lane] += s[j + lane];
    }
    double sum = 0.0;
    for (int64_t lane = 0; lane < kLanes; ++lane) sum += lanes[lane];
    for (int64_t j = whole; j < visible; ++j) sum += s[j];
    const float inverse_sum = static_cast<float>(1.0 / sum);
    for (int64_t j = 0; j < visible; ++j) s[j] *= inverse_sum;
    for (int64_t j = visible; j < length; ++j) s[j] = 0.0f;
  }
}

}  // namespace

void ComputeCausalAttentionProbabilities(const float* q, const float* k, int length, int head_size,
                                         float scale, float* probabilities) {
  const int t = length;
  const int d = head_size;
  const int64_t t_size = length;
  // scores [T, T] = scale * q [T, Dh] @ k^T [Dh, T].
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, t, t, d, scale, q, d, k, d, 0.0f,
              probabilities, t);
  CausalSoftmaxRows(probabilities, t_size);
}

}  // namespace loom::cpu
