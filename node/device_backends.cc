#include "node/device_backends.h"

#include "absl/strings/str_cat.h"
#include "core/device_name.h"
#include "kernels/cpu/cpu_kernels.h"
#ifdef LOOM_HAVE_CUDA
#include "device/cuda/cuda_devices.h"
#include "kernels/cuda/cuda_kernels.h"
#include "node/cuda_backend.h"
#endif

namespace loom {

bool HasCudaBackend() {
#ifdef LOOM_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

absl::StatusOr<int> CudaDeviceCount() {
#ifdef LOOM_HAVE_CUDA
  return cuda::DeviceCount();
#else
  return absl::FailedPreconditionError(
      "this build has no CUDA backend (it is built when CUDA 13 and NCCL are found under "
      "/usr/local/cuda)");
#endif
}

absl::StatusOr<GpuMemory> CudaDeviceMemory(int device) {
#ifdef LOOM_HAVE_CUDA
  return cuda::DeviceMemory(device);
#else
  return CudaDeviceCount().status();
#endif
}

absl::Status RegisterAllKernels(KernelRegistry* registry) {
  if (absl::Status status = RegisterCpuKernels(registry); !status.ok()) return status;
#ifdef LOOM_HAVE_CUDA
  return RegisterCudaKernels(registry);
#else
  return absl::OkStatus();
#endif
}

absl::Status SetUpDevices(const plan::Plan& plan, JobOptions* options) {
  const plan::Device* gpu = nullptr;
  for (const plan::DeviceDesc& desc : plan.devices()) {
    if (desc.device().type() == plan::CUDA) gpu = &desc.device();
  }
  if (gpu == nullptr) return absl::OkStatus();
#ifdef LOOM_HAVE_CUDA
  if (absl::Status status = cuda::UseCuda(options); !status.ok()) {
    return absl::Status(status.code(), absl::StrCat("plan '", plan.job_name(), "' uses ",
                                                    DeviceName(*gpu), ", but ", status.message()));
  }
  return absl::OkStatus();
#else
  return absl::FailedPreconditionError(
      absl::StrCat("plan '", plan.job_name(), "' uses ", DeviceName(*gpu),
                   ", but this build has no CUDA backend (it is built when CUDA 13 and NCCL are "
                   "found under /usr/local/cuda)"));
#endif
}

}  // namespace loom
