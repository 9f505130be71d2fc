#ifndef LOOM_KERNELS_CUDA_CUDA_KERNEL_UTIL_H_
#define LOOM_KERNELS_CUDA_CUDA_KERNEL_UTIL_H_

// What the CUDA kernel files share on the host: StreamOf (a kernel's CudaStreamContext), BlocksFor
// (grid-stride launch sizes), What (how a kernel's errors name it), the helpers that check a
// configuration with the CPU factory (IsBfloat16, Float32View, CheckLikeCpu) and Allocated, which
// finishes building a kernel.

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "device/cuda/cuda_status.h"
#include "device/cuda/cuda_stream_context.h"
#include "kernels/kernel.h"

namespace loom::cuda {

// The CUDA stream a kernel is built for: KernelInit::stream, which must be a CudaStreamContext.
// FAILED_PRECONDITION naming the task otherwise (a CUDA kernel on a CPU stream is a plan bug).
absl::StatusOr<CudaStreamContext*> StreamOf(const KernelInit& init);

// Blocks of `threads` threads covering `count` elements with a grid-stride loop: at most a few
// waves of the GPU, at least one block.
int64_t BlocksFor(int64_t count, int threads = 256);

// "task '<task_name>': <op_type>", what a launch or CUDA call of a kernel is reported as.
std::string What(const std::string& task_name, const char* op_type);

// The float tensors' common type: float32 or bfloat16 (the CPU factory checks the rest); whether
// it is bfloat16.
absl::StatusOr<bool> IsBfloat16(const char* op_type, const KernelInit& init);

// The configuration as the CPU kernel would see it in float32: its factory then checks exactly
// what it checks, with its messages.
KernelInit Float32View(const KernelInit& init);

// The CPU factory's verdict on the configuration seen in float32; whether it is bfloat16.
absl::StatusOr<bool> CheckLikeCpu(
    const char* op_type, const KernelInit& init,
    absl::StatusOr<std::unique_ptr<Kernel>> (*cpu_factory)(const KernelInit&));

// The kernel once its Allocate succeeded, or Allocate's error.
template <typename KernelType>
absl::StatusOr<std::unique_ptr<Kernel>> Allocated(std::unique_ptr<KernelType> kernel) {
  if (absl::Status status = kernel->Allocate(); !status.ok()) return status;
  return kernel;
}

}  // namespace loom::cuda

#endif  // LOOM_KERNELS_CUDA_CUDA_KERNEL_UTIL_H_
