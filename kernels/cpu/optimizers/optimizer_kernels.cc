#include "kernels/cpu/optimizers/optimizer_kernels.h"

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/cpu/optimizers/adamw_kernel.h"
#include "kernels/cpu/optimizers/clip_grad_kernels.h"
#include "kernels/cpu/optimizers/sgd_kernel.h"
#include "kernels/kernel_table.h"

namespace loom {

absl::Status RegisterCpuOptimizerKernels(KernelRegistry* registry) {
  static constexpr KernelTableEntry kEntries[] = {
      {"sgd", cpu::CreateSgdKernel},
      {"adamw", cpu::CreateAdamWKernel},
      {"squared_norm", cpu::CreateSquaredNormKernel},
      {"clip_coefficient", cpu::CreateClipCoefficientKernel},
      {"scale_by", cpu::CreateScaleByKernel},
  };
  return RegisterKernelTable(registry, plan::CPU, kEntries);
}

}  // namespace loom
