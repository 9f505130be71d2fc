#ifndef LOOM_KERNELS_CUDA_ATTENTION_KERNELS_H_
#define LOOM_KERNELS_CUDA_ATTENTION_KERNELS_H_

// RegisterCudaAttentionKernels: the CUDA kernels of "causal_attention" and
// "causal_attention_grad", with the CPU kernels' semantics and checks, composed of cuBLAS batched
// GEMMs and a causal masked softmax. RegisterCudaKernels calls it; attention_kernels.cu defines
// them.

#include "absl/status/status.h"
#include "kernels/kernel_registry.h"

namespace loom::cuda {

// The CUDA kernels of "causal_attention" and "causal_attention_grad", with exactly the CPU
// kernels' semantics and checks (see kernels/cpu/attention_kernel.h and
// kernels/cpu/gradients/attention_grad_kernel.h): q, k, v (and dy, dq, dk, dv) all [B, H, T, Dh],
// attribute "scale" (finite, default 1 / sqrt(Dh)), a causal mask, a stable softmax. The forward
// saves nothing for the backward: the gradient recomputes the probabilities as the CPU one does.
// Every tensor is float32, or every tensor is bfloat16.
//
// Attention here is COMPOSED, not fused (no FlashAttention): cuBLAS strided-batched GEMMs
// (cublasGemmStridedBatchedEx, CUBLAS_COMPUTE_32F: float32 in full float32 with no TF32, bfloat16
// on tensor cores with float32 accumulation) for q k^T and the products with v (and, in the
// gradient, dy v^T, P^T dy, dS k and dS^T q), plus a causal masked softmax kernel (one warp per
// row, float math, the row maximum subtracted as on the CPU) and its backward. The cost is memory
// and bandwidth: the full [T, T] score matrix of every head is materialised in float32, that is
// B * H * T * T * 4 bytes of scratch for the forward and twice that for the gradient, allocated
// once when the kernel is built, and the masked upper triangle is computed and multiplied like the
// rest. With bfloat16 the probabilities (and score gradients) that feed the second GEMMs are
// rounded to bfloat16, written over the first half of each float row of that same scratch.
absl::Status RegisterCudaAttentionKernels(KernelRegistry* registry);

}  // namespace loom::cuda

#endif  // LOOM_KERNELS_CUDA_ATTENTION_KERNELS_H_
