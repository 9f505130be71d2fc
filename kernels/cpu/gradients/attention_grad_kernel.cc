#include "kernels/cpu/gradients/attention_grad_kernel.h"

#include <cblas.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "core/tensor.h"
#include "kernels/cpu/attention_heads.h"
#include "kernels/cpu/attention_probabilities.h"
#include "kernels/cpu/causal_attention_settings.h"
#include "kernels/cpu/kernel_checks.h"

namespace loom::cpu {
namespace {

constexpr char kOpType[] = "causal_attention_grad";

class CausalAttentionGradKernel : public Kernel {
 public:
  CausalAttentionGradKernel(const KernelInit& init, const CausalAttentionSettings& settings)
      : signature_(init),
        settings_(settings),
        probabilities_(settings.length * settings.length),
        score_gradients_(settings.length * settings.length) {}

  absl::Status Compute(const KernelContext& context) override {
    absl::Status status = signature_.Check(kOpType, context);
    if (!status.ok()) return status;
    const int64_t t_size = settings_.length;
    const int64_t d_size = settings_.head_size;
    if (settings_.heads == 0 || t_size == 0 || d_size == 0) return absl::OkStatus();
    const int t = static_cast<int>(t_size);
    const int d = static_cast<int>(d_size);
    const int64_t matrix = t_size * d_size;
    const bool bfloat16 = settings_.data_type == plan::BFLOAT16;
    float* p = probabilities_.data();
    float* ds = score_gradients_.data();
    for (int64_t head = 0; head < settings_.heads; ++head) {
      const int64_t offset = head * matrix;
      const float* q = HeadAsFloat32(context.inputs[0], offset, matrix, wide_inputs_[0]);
      const float* k = HeadAsFloat32(context.inputs[1], offset, matrix, wide_inputs_[1]);
      const float* v = HeadAsFloat32(context.inputs[2], offset, matrix, wide_inputs_[2]);
      const float* dy = HeadAsFloat32(context.inputs[3], offset, matrix, wide_inputs_[3]);
      // P [T, T], exactly as the forward computes it.
      ComputeCausalAttentionProbabilities(q, k, t, d, settings_.scale, p);
      // dP [T, T] = dy [T, Dh] @ v^T [Dh, T].
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, t, t, d, 1.0f, dy, d, v, d, 0.0f, ds, t);
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
      if (bfloat16) {
        RoundToBfloat16(p, t_size * t_size);
        RoundToBfloat16(ds, t_size * t_size);
      }
      // dv [T, Dh] = P^T [T, T] @ dy [T, Dh].
      float* dv = HeadOutput(context.outputs[2], offset, matrix, wide_outputs_[2]);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, t, d, t, 1.0f, p, t, dy, d, 0.0f, dv, d);
      // dq [T, Dh] = scale * dS [T, T] @ k [T, Dh].
      float* dq = HeadOutput(context.outputs[0], offset, matrix, wide_outputs_[0]);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, t, d, t, settings_.scale, ds, t, k, d,
                  0.0f, dq, d);
      // dk [T, Dh] = scale * dS^T [T, T] @ q [T, Dh].
      float* dk = HeadOutput(context.outputs[1], offset, matrix, wide_outputs_[1]);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, t, d, t, settings_.scale, ds, t, q, d,
                  0.0f, dk, d);
      for (int output = 0; output < 3; ++output) {
        StoreHead(wide_outputs_[output], context.outputs[output], offset, matrix);
      }
    }
    return absl::OkStatus();
  }

 private:
  TensorSignature signature_;
  CausalAttentionSettings settings_;
  // Scratch of one (b, h): P [T, T], and dP then dS [T, T]; with bfloat16 tensors, the inputs
  // widened and dq, dk, dv before narrowing.
  std::vector<float> probabilities_;
  std::vector<float> score_gradients_;
  std::vector<float> wide_inputs_[4];
  std::vector<float> wide_outputs_[3];
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateCausalAttentionGradKernel(const KernelInit& init) {
  absl::Status status = CheckArity(kOpType, init, 4, 3);
  if (!status.ok()) return status;
  const char* names[] = {"input 'q'",   "input 'k'",   "input 'v'",  "input 'dy'",
                         "output 'dq'", "output 'dk'", "output 'dv'"};
  absl::StatusOr<CausalAttentionSettings> settings =
      ReadCausalAttentionSettings(kOpType, init, names, "input 'q'");
  if (!settings.ok()) return settings.status();
  return std::make_unique<CausalAttentionGradKernel>(init, *settings);
}

}  // namespace loom::cpu
