#include "kernels/cpu/gradients/attention_grad_kernel.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/attributes.h"
#include "kernels/cpu/kernel_checks.h"
#include "runtime/tensor.h"

namespace loom::cpu {
namespace {

constexpr char kOpType[] = "causal_attention_grad";

class CausalAttentionGradKernel : public Kernel {
 public:
  CausalAttentionGradKernel(const KernelInit& init, int64_t heads, int64_t length,
                            int64_t head_size, float scale)
      : signature_(init),
        heads_(heads),
        length_(length),
        head_size_(head_size),
        scale_(scale),
        probabilities_(length * length),
        score_gradients_(length * length) {}

  absl::Status Compute(const KernelContext& context) override {
    absl::Status status = signature_.Check(kOpType, context);
    if (!status.ok()) return status;
    const int64_t t_size = length_;
    const int64_t d_size = head_size_;
    if (heads_ == 0 || t_size == 0 || d_size == 0) return absl::OkStatus();
    const float* q = context.inputs[0].Data<const float>();
    const float* k = context.inputs[1].Data<const float>();
    const float* v = context.inputs[2].Data<const float>();
    const float* dy = context.inputs[3].Data<const float>();
    float* dq = context.outputs[0].Data<float>();
    float* dk = context.outputs[1].Data<float>();
    float* dv = context.outputs[2].Data<float>();
    const int t = static_cast<int>(t_size);
    const int d = static_cast<int>(d_size);
    const int64_t matrix = t_size * d_size;
    float* p = probabilities_.data();
    float* ds = score_gradients_.data();
    for (int64_t head = 0; head < heads_; ++head) {
      const int64_t offset = head * matrix;
      // P [T, T]: scale * q k^T, then row i a stable softmax over columns 0..i and zeros after
      // (exactly as the forward computes it).
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, t, t, d, scale_, q + offset, d,
                  k + offset, d, 0.0f, p, t);
      for (int64_t row = 0; row < t_size; ++row) {
        float* s = p + row * t_size;
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
      // dv [T, Dh] = P^T [T, T] @ dy [T, Dh].
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, t, d, t, 1.0f, p, t, dy + offset, d,
                  0.0f, dv + offset, d);
      // dP [T, T] = dy [T, Dh] @ v^T [Dh, T].
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, t, t, d, 1.0f, dy + offset, d,
                  v + offset, d, 0.0f, ds, t);
      // dS = P * (dP - rowsum(dP * P)) in place; masked columns (P = 0) get 0.
      for (int64_t row = 0; row < t_size; ++row) {
        const float* p_row = p + row * t_size;
        float* ds_row = ds + row * t_size;
        const int64_t visible = row + 1;
        double dot = 0.0;
        for (int64_t j = 0; j < visible; ++j) dot += static_cast<double>(ds_row[j]) * p_row[j];
        const float dot_float = static_cast<float>(dot);
        for (int64_t j = 0; j < visible; ++j) ds_row[j] = p_row[j] * (ds_row[j] - dot_float);
        std::fill(ds_row + visible, ds_row + t_size, 0.0f);
      }
      // dq [T, Dh] = scale * dS [T, T] @ k [T, Dh].
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, t, d, t, scale_, ds, t, k + offset, d,
                  0.0f, dq + offset, d);
      // dk [T, Dh] = scale * dS^T [T, T] @ q [T, Dh].
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, t, d, t, scale_, ds, t, q + offset, d,
                  0.0f, dk + offset, d);
    }
    return absl::OkStatus();
  }

 private:
  TensorSignature signature_;
  // B * H.
  int64_t heads_;
  int64_t length_;
  int64_t head_size_;
  float scale_;
  // Scratch of one (b, h): P [T, T], and dP then dS [T, T].
  std::vector<float> probabilities_;
  std::vector<float> score_gradients_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateCausalAttentionGradKernel(const KernelInit& init) {
  absl::Status status = CheckArity(kOpType, init, 4, 3);
  if (!status.ok()) return status;
  const char* names[] = {"input 'q'",   "input 'k'",   "input 'v'",  "input 'dy'",
                         "output 'dq'", "output 'dk'", "output 'dv'"};
  const plan::TensorDesc* descs[] = {&init.inputs[0], &init.inputs[1],  &init.inputs[2],
                                     &init.inputs[3], &init.outputs[0], &init.outputs[1],
                                     &init.outputs[2]};
  for (int index = 0; index < 7; ++index) {
    status = CheckDataType(kOpType, names[index], *descs[index], plan::FLOAT32);
    if (!status.ok()) return status;
  }
  const Shape q = Shape::FromProto(init.inputs[0]);
  if (q.rank() != 4) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOpType, ": q must have rank 4 [B, H, T, Dh], got ", q.ToString()));
  }
  for (int index = 1; index < 7; ++index) {
    status = CheckSameShape(kOpType, "input 'q'", q, names[index], Shape::FromProto(*descs[index]));
    if (!status.ok()) return status;
  }
  const int64_t length = q.dimension(2);
  const int64_t head_size = q.dimension(3);
  if (length > std::numeric_limits<int>::max() || head_size > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError(absl::StrCat(kOpType, ": q ", q.ToString(),
                                                   " exceeds what BLAS can index (",
                                                   std::numeric_limits<int>::max(), ")"));
  }
  double default_scale = head_size > 0 ? 1.0 / std::sqrt(static_cast<double>(head_size)) : 1.0;
  absl::StatusOr<double> scale = Attributes(*init.conf).GetFloat("scale", default_scale);
  if (!scale.ok()) return WithOpType(kOpType, scale.status());
  if (!std::isfinite(*scale)) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOpType, ": attribute 'scale' must be finite, got ", *scale));
  }
  return std::make_unique<CausalAttentionGradKernel>(init, q.dimension(0) * q.dimension(1), length,
                                                     head_size, static_cast<float>(*scale));
}

}  // namespace loom::cpu
