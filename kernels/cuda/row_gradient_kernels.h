#ifndef LOOM_KERNELS_CUDA_ROW_GRADIENT_KERNELS_H_
#define LOOM_KERNELS_CUDA_ROW_GRADIENT_KERNELS_H_

// RegisterCudaRowGradientKernels: the CUDA kernels of the row-wise gradients (softmax_grad,
// log_softmax_grad, layer_norm_grad, sparse_cross_entropy_grad, embedding_grad), with their CPU
// kernels' semantics and checks and sums in a fixed order. RegisterCudaKernels calls it;
// row_gradient_kernels.cu defines them.

#include "absl/status/status.h"
#include "kernels/kernel_registry.h"

namespace loom::cuda {

// CUDA kernels of the row-wise gradients, with the attributes, shapes, outputs and build-time
// errors of their CPU kernels (kernels/cpu/gradients/), on float32 or bfloat16 tensors (float32
// arithmetic and accumulation) and int32/int64 labels and ids:
//   softmax_grad, log_softmax_grad: one block per row.
//   layer_norm_grad: dx one block per row; dgamma and dbeta summed over the rows deterministically
//     (per-chunk column partials, then the chunks in order; no atomics).
//   sparse_cross_entropy_grad: one block per sample.
//   embedding_grad: the ids stably sorted by table row, then each element of dtable sums its rows
//     of dy in the order of the ids (the CPU's order, no atomics).
// A label or id out of range, found on the GPU, fails the kernel's next act, naming the task and
// the value as the CPU does.
absl::Status RegisterCudaRowGradientKernels(KernelRegistry* registry);

}  // namespace loom::cuda

#endif  // LOOM_KERNELS_CUDA_ROW_GRADIENT_KERNELS_H_
