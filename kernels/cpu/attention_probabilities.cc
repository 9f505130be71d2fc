#include "kernels/cpu/attention_probabilities.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace loom::cpu {

void ComputeCausalAttentionProbabilities(const float* q, const float* k, int length, int head_size,
                                         float scale, float* probabilities) {
  const int t = length;
  const int d = head_size;
  const int64_t t_size = length;
  // scores [T, T] = scale * q [T, Dh] @ k^T [Dh, T].
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, t, t, d, scale, q, d, k, d, 0.0f,
              probabilities, t);
  // Row i keeps columns 0..i: a stable softmax over them, zeros after.
  for (int64_t row = 0; row < t_size; ++row) {
    float* s = probabilities + row * t_size;
    const int64_t visible = row + 1;
    const float maximum = *std::max_element(s, s + visible);
    double sum = 0.0;
    for (int64_t j = 0; j < visible; ++j) {
      s[j] = std::exp(s[j] - maximum);
      sum += s[j];
    }
    const float inverse_sum = static_cast<float>(1.0 / sum);
    for (int64_t j = 0; j < visible; ++j) s[j] *= inverse_sum;
    std::fill(s + visible, s + t_size, 0.0f);
  }
}

}  // namespace loom::cpu
