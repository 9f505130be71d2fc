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

std::string What(const std::string& task_name, const char* op_type) {
  return absl::StrCat("task '", task_name, "': ", op_type);
}

absl::StatusOr<bool> IsBfloat16(const char* op_type, const KernelInit& init) {
  bool float32 = false;
  bool bfloat16 = false;
  for (const auto* descs : {&init.inputs, &init.outputs}) {
    for (const plan::TensorDesc& desc : *descs) {
      float32 = float32 || desc.data_type() == plan::FLOAT32;
      bfloat16 = bfloat16 || desc.data_type() == plan::BFLOAT16;
    }
  }
  if (float32 && bfloat16) {
    return absl::InvalidArgumentError(absl::StrCat(
        op_type, ": the float tensors must be all float32 or all bfloat16, not a mix"));
  }
  return bfloat16;
}

KernelInit Float32View(const KernelInit& init) {
  KernelInit view = init;
  for (auto* descs : {&view.inputs, &view.outputs}) {
    for (plan::TensorDesc& desc : *descs) {
      if (desc.data_type() == plan::BFLOAT16) desc.set_data_type(plan::FLOAT32);
    }
  }
  return view;
}

absl::StatusOr<bool> CheckLikeCpu(
    const char* op_type, const KernelInit& init,
    absl::StatusOr<std::unique_ptr<Kernel>> (*cpu_factory)(const KernelInit&)) {
  absl::StatusOr<bool> bfloat16 = IsBfloat16(op_type, init);
  if (!bfloat16.ok()) return bfloat16.status();
  if (absl::StatusOr<std::unique_ptr<Kernel>> checked = cpu_factory(Float32View(init));
      !checked.ok()) {
    return checked.status();
  }
  return bfloat16;
}

}  // namespace loom::cuda
