#ifndef LOOM_KERNELS_CPU_MATMUL_KERNEL_H_
#define LOOM_KERNELS_CPU_MATMUL_KERNEL_H_

// The CPU kernel of "matmul" (CreateMatmulKernel): plain and batched matrix products of float32 or
// bfloat16 tensors through OpenBLAS, bfloat16 widened to float32 copies and rounded once on
// output. Its sizes and checks come from kernels/matmul_dimensions.h, shared with the CUDA kernel.

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/kernel.h"

namespace loom::cpu {

// "matmul": c = op(a) @ op(b), all float32 or all bfloat16, where op transposes the last two axes
// when the bool attribute "transpose_a" / "transpose_b" is set (default false).
//   - rank 2: a [m, k] (or [k, m]), b [k, n] (or [n, k]), c [m, n];
//   - batched: a and c of rank >= 3 with the same leading batch dimensions; b either has those
//     batch dimensions too or is rank 2 and is shared by every batch element.
// GEMMs go through OpenBLAS cblas_sgemm. bfloat16 inputs are widened to float32 copies (exact),
// multiplied in float32 and the result rounded once to bfloat16 (nearest even): bfloat16 storage
// with float32 accumulation, as on the GPU. The copies are the kernel's own memory (3 buffers of
// the tensors' element counts, allocated when it is built).
absl::StatusOr<std::unique_ptr<Kernel>> CreateMatmulKernel(const KernelInit& init);

}  // namespace loom::cpu

#endif  // LOOM_KERNELS_CPU_MATMUL_KERNEL_H_
