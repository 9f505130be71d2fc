#include "kernels/cpu/attention_kernel.h"

#include <cblas.h>

#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/tensor.h"

#include "absl/status/status.h"
#include "core/tensor.h"
#include "kernels/cpu/attention_heads.h"
#include "kernels/cpu/attention_probabilities.h"
#include "kernels/cpu/causal_attention_settings.h"
#include "kernels/cpu/kernel_checks.h"

namespace loom::cpu {
namespace {

constexpr char kOpType[] = "causal_attention";

class CausalAttentionKernel : public Kernel {
 public:
  CausalAttentionKernel(const KernelInit& init, const CausalAttentionSettings& settings)
      : signature_(init), settings_(settings), scores_(settings.length * settings.length) {}

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
    float* scores = scores_.data();
    for (int64_t head = 0; head < settings_.heads; ++head) {
      const int64_t offset = head * matrix;
      const float* q = HeadAsFloat32(context.inputs[0], offset, matrix, wide_[0]);
      const float* k = HeadAsFloat32(context.inputs[1], offset, matrix, wide_[1]);
      const float* v = HeadAsFloat32(context.inputs[2], offset, matrix, wide_[2]);
      ComputeCausalAttentionProbabilities(q, k, t, d, settings_.scale, scores);
      if (bfloat16) RoundToBfloat16(scores, t_size * t_size);
      // output [T, Dh] = probabilities [T, T] @ v [T, Dh].
      float* output = HeadOutput(context.outputs[0], offset, matrix, wide_output_);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, t, d, t, 1.0f, scores, t, v, d, 0.0f,
                  output, d);
      StoreHead(wide_output_, context.outputs[0], offset, matrix);
    }
    return absl::OkStatus();
  }

 private:
  TensorSignature signature_;
  CausalAttentionSettings settings_;
  // Scratch: the [T, T] scores, then probabilities, of one (b, h); with bfloat16 tensors, its
  // q, k and v widened and its output before narrowing.
  std::vector<float> scores_;
  std::vector<float> wide_[3];
  std::vector<float> wide_output_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateCausalAttentionKernel(const KernelInit& init) {
  absl::Status status = CheckArity(kOpType, init, 3, 1);
  if (!status.ok()) return status;
  const char* names[] = {"input 'q'", "input 'k'", "input 'v'", "output"};
  absl::StatusOr<CausalAttentionSettings> settings =
      ReadCausalAttentionSettings(kOpType, init, names, "q");
  if (!settings.ok()) return settings.status();
  // The [T, T] scores of one head, held by the kernel.
  if (absl::StatusOr<int64_t> scores =
          CheckedTensorBytes({settings->length, settings->length}, plan::FLOAT32);
      !scores.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOpType, ": the scores of one head: ", scores.status().message()));
  }
  return std::make_unique<CausalAttentionKernel>(init, *settings);
}

}  // namespace loom::cpu
