#ifndef LOOM_KERNELS_CPU_GRADIENTS_ATTENTION_GRAD_KERNEL_H_
#define LOOM_KERNELS_CPU_GRADIENTS_ATTENTION_GRAD_KERNEL_H_

// The CPU kernel of "causal_attention_grad" (CreateCausalAttentionGradKernel): dq, dk and dv of
// causal attention from q, k, v and dy, recomputing the forward's probabilities
// (attention_probabilities.h) and computing the products as OpenBLAS GEMMs.
// RegisterCpuGradientKernels registers it.

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/kernel.h"

namespace loom::cpu {

// "causal_attention_grad": the gradient of "causal_attention". Float32 inputs q, k, v and dy, each
// [B, H, T, Dh]; float32 outputs dq, dk and dv of that shape. For each (b, h) the probabilities
// P = softmax(q k^T * scale + causal mask) are recomputed as the forward computes them, then
//   dv = P^T dy,  dP = dy v^T,  dS = P * (dP - rowsum(dP * P)),
//   dq = scale * dS k,  dk = scale * dS^T q.
// Attribute "scale" (float, finite, default 1 / sqrt(Dh)), as the forward's. The four products are
// OpenBLAS GEMMs; the two [T, T] matrices (P and dP, then dS) are scratch kept in the kernel.
absl::StatusOr<std::unique_ptr<Kernel>> CreateCausalAttentionGradKernel(const KernelInit& init);

}  // namespace loom::cpu

#endif  // LOOM_KERNELS_CPU_GRADIENTS_ATTENTION_GRAD_KERNEL_H_
