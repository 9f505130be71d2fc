#ifndef LOOM_KERNELS_MATMUL_DIMENSIONS_H_
#define LOOM_KERNELS_MATMUL_DIMENSIONS_H_

// MatmulDimensions, the GEMM sizes of one "matmul" (batch, m, n, k, transposes, a shared b), and
// CheckMatmul, which checks a matmul's attributes and shapes and computes them; FitsBlasInt checks
// that a size fits BLAS's int. Shared by the CPU (OpenBLAS) and CUDA (cuBLAS) matmul kernels.

#include <cstdint>

#include "absl/status/statusor.h"
#include "kernels/kernel.h"
#include "proto/plan.pb.h"

namespace loom {

// The sizes of the GEMMs of one "matmul" (see kernels/cpu/matmul_kernel.h for its shapes).
// Matrices are row-major and contiguous.
struct MatmulDimensions {
  int64_t batch = 1;
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  bool transpose_a = false;
  bool transpose_b = false;
  // b is rank 2 while a is batched: the same b for every batch element.
  bool broadcast_b = false;
};

// Checks a matmul's attributes and shapes (a, b and c all of `data_type`) and returns its GEMM
// sizes; INVALID_ARGUMENT naming what does not fit. Shared by the CPU and CUDA kernels.
absl::StatusOr<MatmulDimensions> CheckMatmul(const KernelInit& init, plan::DataType data_type);

// Whether a value fits the int that BLAS libraries index with.
bool FitsBlasInt(int64_t value);

}  // namespace loom

#endif  // LOOM_KERNELS_MATMUL_DIMENSIONS_H_
