#include "kernels/cpu/optimizers/optimizer_kernels.h"

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/cpu/optimizers/adamw_kernel.h"
#include "kernels/cpu/optimizers/clip_grad_kernels.h"
#include "kernels/cpu/optimizers/sgd_kernel.h"

namespace loom {

absl::Status RegisterCpuOptimizerKernels(KernelRegistry* registry) {
  struct Entry {
    const char* op_type;
    absl::StatusOr<std::unique_ptr<Kernel>> (*factory)(const KernelInit&);
  };
  static constexpr Entry kEntries[] = {
      {"sgd", cpu::CreateSgdKernel},
      {"adamw", cpu::CreateAdamWKernel},
      {"squared_norm", cpu::CreateSquaredNormKernel},
      {"clip_coefficient", cpu::CreateClipCoefficientKernel},
      {"scale_by", cpu::CreateScaleByKernel},
  };
  for (const Entry& entry : kEntries) {
    absl::Status status = registry->Register(entry.op_type, plan::CPU, entry.factory);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

}  // namespace loom
