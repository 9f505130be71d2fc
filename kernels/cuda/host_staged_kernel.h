#ifndef LOOM_KERNELS_CUDA_HOST_STAGED_KERNEL_H_
#define LOOM_KERNELS_CUDA_HOST_STAGED_KERNEL_H_

// RegisterCudaHostStagedKernels: the CUDA registrations of the ops that only a CPU can compute,
// "safetensors_slice" and "token_batch", which run their CPU kernels into pinned host buffers and
// copy them to the GPU on the task's stream. RegisterCudaKernels calls it.

#include "absl/status/status.h"
#include "kernels/kernel_registry.h"

namespace loom::cuda {

// Registers under plan::CUDA the ops only a CPU can compute (they read files): safetensors_slice
// (a variable's initial value from a checkpoint) and token_batch (training data). Each runs its
// CPU kernel into pinned host buffers allocated when it is built and copies them to the GPU on
// the task's stream; the next act first waits for that copy, so the buffers are never
// overwritten while in flight. The compiler reads token batches on the GPU's host CPU device and
// copies them itself (compiler/README.md); this path serves checkpoint slices and hand-written
// plans.
absl::Status RegisterCudaHostStagedKernels(KernelRegistry* registry);

}  // namespace loom::cuda

#endif  // LOOM_KERNELS_CUDA_HOST_STAGED_KERNEL_H_
