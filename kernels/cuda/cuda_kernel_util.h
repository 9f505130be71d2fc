#ifndef LOOM_KERNELS_CUDA_CUDA_KERNEL_UTIL_H_
#define LOOM_KERNELS_CUDA_CUDA_KERNEL_UTIL_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "kernels/kernel.h"
#include "runtime/cuda/cuda_status.h"
#include "runtime/cuda/cuda_stream_context.h"

namespace loom::cuda {

// The CUDA stream a kernel is built for: KernelInit::stream, which must be a CudaStreamContext.
// FAILED_PRECONDITION naming the task otherwise (a CUDA kernel on a CPU stream is a plan bug).
absl::StatusOr<CudaStreamContext*> StreamOf(const KernelInit& init);

// Blocks of `threads` threads covering `count` elements with a grid-stride loop: at most a few
// waves of the GPU, at least one block.
int64_t BlocksFor(int64_t count, int threads = 256);

}  // namespace loom::cuda

#endif  // LOOM_KERNELS_CUDA_CUDA_KERNEL_UTIL_H_
