#ifndef LOOM_KERNELS_CUDA_MATMUL_KERNEL_H_
#define LOOM_KERNELS_CUDA_MATMUL_KERNEL_H_

// The CUDA kernel of "matmul" (CreateMatmulKernel): the CPU kernel's shapes and attributes
// (kernels/matmul_dimensions.h), computed with cuBLAS on the stream's handle, float32 without TF32
// and bfloat16 on the tensor cores. RegisterCudaKernels registers it.

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/kernel.h"

namespace loom::cuda {

// "matmul" on a GPU: the shapes and attributes of the CPU kernel (kernels/cpu/matmul_kernel.h),
// float32 or bfloat16 (a, b and c alike), through cuBLAS (cublasGemmStridedBatchedEx) with float32
// accumulation. float32 is computed in full float32 (no TF32), so results match the CPU's to
// rounding; bfloat16 uses the tensor cores.
absl::StatusOr<std::unique_ptr<Kernel>> CreateMatmulKernel(const KernelInit& init);

}  // namespace loom::cuda

#endif  // LOOM_KERNELS_CUDA_MATMUL_KERNEL_H_
