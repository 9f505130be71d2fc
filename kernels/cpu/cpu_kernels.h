#ifndef LOOM_KERNELS_CPU_CPU_KERNELS_H_
#define LOOM_KERNELS_CPU_CPU_KERNELS_H_

// RegisterCpuKernels: fills a KernelRegistry with every CPU kernel, the forward ops, sources and
// boxing helpers, and the groups of gradients/, optimizers/ and data/. The node's device backends
// and the tests build their registries with it.

#include "absl/status/status.h"
#include "kernels/kernel_registry.h"

namespace loom {

// Registers every CPU kernel in `registry` under (op type, plan::CPU): the forward ops ("matmul",
// "add", "subtract", "multiply", "divide", "bias_add", "relu", "gelu", "tanh", "softmax",
// "log_softmax", "scale", "identity", "identity_after", "offload", "reload", "layer_norm",
// "embedding", "reshape", "transpose", "slice", "concat", "reduce_sum", "reduce_mean",
// "sparse_cross_entropy", "causal_attention"), sources and boxing helpers ("fill", "random",
// "random_integers", "sleep", "pad", "zeros_like"), and the groups under gradients/ (backward ops),
// optimizers/ (sgd, adamw, gradient clipping) and data/ (token_batch). Fails with ALREADY_EXISTS at
// the first op type that is already registered for CPU (the ones before it stay registered).
absl::Status RegisterCpuKernels(KernelRegistry* registry);

}  // namespace loom

#endif  // LOOM_KERNELS_CPU_CPU_KERNELS_H_
