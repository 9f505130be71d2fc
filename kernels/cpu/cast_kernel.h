#ifndef LOOM_KERNELS_CPU_CAST_KERNEL_H_
#define LOOM_KERNELS_CPU_CAST_KERNEL_H_

// float32 <-> bfloat16 conversion (Float32ToBfloat16 rounds to nearest even, Bfloat16ToFloat32 is
// exact) and the CPU kernel of "cast" with its checks (CheckCast), which the CUDA cast kernel
// makes too. The CPU kernels that store bfloat16 (matmul, attention) and the node's tensor
// statistics use the conversions.

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "kernels/kernel.h"

namespace loom::cpu {

// bfloat16 as its 16 bits: float32 rounded to the nearest even (NaN stays a quiet NaN, values
// past the largest bfloat16 become infinities, as in PyTorch), and back (exact).
uint16_t Float32ToBfloat16(float value);
float Bfloat16ToFloat32(uint16_t bits);

// "cast": its one input converted to the output's data type, same shape; float32 and bfloat16
// in either direction, or a copy when the types are equal. The types are the registers'.
absl::StatusOr<std::unique_ptr<Kernel>> CreateCastKernel(const KernelInit& init);
// The build-time checks of a cast (the CUDA kernel makes the same): INVALID_ARGUMENT naming the
// op for other arities, data types or shapes.
absl::Status CheckCast(const KernelInit& init);

}  // namespace loom::cpu

#endif  // LOOM_KERNELS_CPU_CAST_KERNEL_H_
