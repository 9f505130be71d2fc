#ifndef LOOM_KERNELS_CUDA_RANDOM_KERNELS_H_
#define LOOM_KERNELS_CUDA_RANDOM_KERNELS_H_

// RegisterCudaRandomKernels: the CUDA kernels of "random" and "random_integers", which run the
// CPU's counter-based generator (kernels/cpu/counter_random.h) in device code, with the CPU
// kernels' attributes and checks. RegisterCudaKernels calls it; random_kernels.cu defines them.

#include "absl/status/status.h"
#include "kernels/kernel_registry.h"

namespace loom::cuda {

// Registers the CUDA kernels of seeded random tensors under (op type, plan::CUDA): "random"
// (float32 output; the CPU kernel allows float32 only, so does this one) and "random_integers"
// (int32 or int64 output). Attributes, defaults and build-time checks are the CPU kernels'
// (kernels/cpu/random_kernel.h): the factories run the CPU factory's checks first, so that every
// error is the CPU's, word for word.
//
// The generator is the CPU's counter-based one (kernels/cpu/counter_random.h) in device code: the
// stream key is computed on the host by the same function, and element i's counter is the same
// function of offset, logical_shape and slice_begin. Every integer step (SplitMix64, the 128-bit
// product of random_integers) and every double step of the uniform distribution is exact or
// correctly rounded on both sides, so "random_integers" and uniform "random" are BIT-IDENTICAL to
// the CPU kernels. The normal distribution uses the same Box-Muller transform with the same double
// operations, but CUDA's double log (max 1 ulp) and cos (max 2 ulp) may differ from glibc's in the
// last bit of the double; after rounding to float32 the values nearly always agree exactly and
// otherwise differ by one float32 ulp.
//
// Limit: after dropping unit axes and merging contiguous ones, the output window may have at most
// 16 axes (INVALID_ARGUMENT otherwise).
absl::Status RegisterCudaRandomKernels(KernelRegistry* registry);

}  // namespace loom::cuda

#endif  // LOOM_KERNELS_CUDA_RANDOM_KERNELS_H_
