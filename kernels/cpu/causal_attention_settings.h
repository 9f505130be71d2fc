#ifndef LOOM_KERNELS_CPU_CAUSAL_ATTENTION_SETTINGS_H_
#define LOOM_KERNELS_CPU_CAUSAL_ATTENTION_SETTINGS_H_

// CausalAttentionSettings and ReadCausalAttentionSettings: the sizes (B * H, T, Dh), scale and
// data type that a causal attention kernel is built for, checked from its KernelInit. Shared by
// the CPU attention kernel, its gradient and the CUDA attention kernels.

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "kernels/kernel.h"

namespace loom::cpu {

// What the causal attention kernel and its gradient are built for: q, k, v (and their gradients)
// all have the shape [B, H, T, Dh].
struct CausalAttentionSettings {
  // B * H.
  int64_t heads = 0;
  // T.
  int64_t length = 0;
  // Dh.
  int64_t head_size = 0;
  // The attribute 'scale' (default 1 / sqrt(Dh)).
  float scale = 1.0f;
  // Of every tensor: float32, or bfloat16 (mixed precision; the kernels compute in float32).
  plan::DataType data_type = plan::FLOAT32;
};

// Checks that every input and output of `init` (the arity checked already) has the data type
// (float32 or bfloat16) and the shape of input 0, q, which is [B, H, T, Dh] with T and Dh what
// BLAS can index; reads 'scale'. `tensor_names` names the inputs, then the outputs, in
// messages; `q_name` names q where its shape is compared with another tensor's.
absl::StatusOr<CausalAttentionSettings> ReadCausalAttentionSettings(
    absl::string_view op_type, const KernelInit& init, absl::Span<const char* const> tensor_names,
    absl::string_view q_name);

}  // namespace loom::cpu

#endif  // LOOM_KERNELS_CPU_CAUSAL_ATTENTION_SETTINGS_H_
