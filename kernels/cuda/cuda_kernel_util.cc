#include "kernels/cuda/cuda_kernel_util.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace loom::cuda {

absl::StatusOr<CudaStreamContext*> StreamOf(const KernelInit& init) {
  auto* stream = dynamic_cast<CudaStreamContext*>(init.stream);
  if (stream == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "task '", init.task_name, "': a CUDA kernel ('", init.conf ? init.conf->op_type() : "",
        "') needs a CUDA stream, and its stream is not one"));
  }
  return stream;
}

int64_t BlocksFor(int64_t count, int threads) {
  // 132 SMs x 16 blocks covers an H100 several times; the loops stride over the rest.
  constexpr int64_t kMaxBlocks = 132 * 16;
  return std::clamp<int64_t>((count + threads - 1) / threads, 1, kMaxBlocks);
}

}  // namespace loom::cuda
