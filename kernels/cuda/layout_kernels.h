#ifndef LOOM_KERNELS_CUDA_LAYOUT_KERNELS_H_
#define LOOM_KERNELS_CUDA_LAYOUT_KERNELS_H_

// RegisterCudaLayoutKernels: the CUDA kernels of "transpose", "slice", "pad" and "concat", with
// the CPU layout kernels' semantics and checks, copying by the same CopyPlan (kernels/copy_plan.h).
// RegisterCudaKernels calls it; layout_kernels.cu defines them.

#include "absl/status/status.h"
#include "kernels/kernel_registry.h"

namespace loom::cuda {

// The CUDA kernels that move elements without looking at their values: "transpose", "slice",
// "pad" and "concat", with exactly the CPU kernels' semantics and checks (see
// kernels/cpu/layout_kernels.h). Like them they accept every data type with a size of 1, 2, 4 or
// 8 bytes (float32, bfloat16, int32, int64, uint8, uint16); the copies only depend on the size.
absl::Status RegisterCudaLayoutKernels(KernelRegistry* registry);

}  // namespace loom::cuda

#endif  // LOOM_KERNELS_CUDA_LAYOUT_KERNELS_H_
