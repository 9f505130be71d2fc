#ifndef LOOM_KERNELS_CPU_GRADIENTS_GRADIENT_KERNELS_H_
#define LOOM_KERNELS_CPU_GRADIENTS_GRADIENT_KERNELS_H_

// RegisterCpuGradientKernels: registers the CPU kernels of the backward ops (activations,
// softmaxes, layer_norm, embedding, sparse cross-entropy, causal attention, reduce_sum_to and
// broadcast_to) in a KernelRegistry. RegisterCpuKernels calls it.

#include "absl/status/status.h"
#include "kernels/kernel_registry.h"

namespace loom {

// Registers the CPU kernels of the backward ops in `registry` under (op type, plan::CPU):
// "relu_grad", "gelu_grad", "tanh_grad", "softmax_grad", "log_softmax_grad", "layer_norm_grad",
// "embedding_grad", "sparse_cross_entropy_grad", "causal_attention_grad", "reduce_sum_to" and
// "broadcast_to". Fails with ALREADY_EXISTS at the first op type that is already registered for
// CPU (the ones before it stay registered).
absl::Status RegisterCpuGradientKernels(KernelRegistry* registry);

}  // namespace loom

#endif  // LOOM_KERNELS_CPU_GRADIENTS_GRADIENT_KERNELS_H_
