#ifndef LOOM_KERNELS_CPU_ATTENTION_KERNEL_H_
#define LOOM_KERNELS_CPU_ATTENTION_KERNEL_H_

// The CPU kernel of "causal_attention" (CreateCausalAttentionKernel): scaled dot-product attention
// with a causal mask over q, k, v [B, H, T, Dh], two OpenBLAS GEMMs around a stable softmax.
// RegisterCpuKernels registers it; its gradient is gradients/attention_grad_kernel.h.

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/kernel.h"

namespace loom::cpu {

// "causal_attention": float32 scaled dot-product attention with a causal mask. Inputs q, k and v,
// each [B, H, T, Dh]; output [B, H, T, Dh] with, for each (b, h),
//   output = softmax(q k^T * scale + mask) v,
// where the mask lets position t attend to positions 0..t only and the softmax (over the last
// axis) is stable. Attribute "scale" (float, finite, default 1 / sqrt(Dh)). Both products are
// OpenBLAS GEMMs; the [T, T] score matrix is scratch kept in the kernel.
absl::StatusOr<std::unique_ptr<Kernel>> CreateCausalAttentionKernel(const KernelInit& init);

}  // namespace loom::cpu

#endif  // LOOM_KERNELS_CPU_ATTENTION_KERNEL_H_
