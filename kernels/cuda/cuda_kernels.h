#ifndef LOOM_KERNELS_CUDA_CUDA_KERNELS_H_
#define LOOM_KERNELS_CUDA_CUDA_KERNELS_H_

// RegisterCudaKernels: registers every CUDA kernel under plan::CUDA, group by group (the
// Register... functions of this folder). The node's device backends, the CUDA tests and the GPU
// benchmarks build their registries with it; kernels/cuda/README.md lists the kernels.

#include "absl/status/status.h"
#include "kernels/kernel_registry.h"

namespace loom {

// Registers every CUDA kernel under plan::CUDA. Each takes float32 and, where the op computes on
// real numbers, bfloat16 (bf16 storage, f32 accumulation); the table in kernels/cuda/README.md
// lists them.
absl::Status RegisterCudaKernels(KernelRegistry* registry);

}  // namespace loom

#endif  // LOOM_KERNELS_CUDA_CUDA_KERNELS_H_
