#include "kernels/cpu/data/data_kernels.h"

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/cpu/data/safetensors_slice_kernel.h"
#include "kernels/cpu/data/token_batch_kernel.h"
#include "kernels/cpu/data/token_dataset_kernel.h"
#include "kernels/kernel_table.h"

namespace loom {

absl::Status RegisterCpuDataKernels(KernelRegistry* registry) {
  static constexpr KernelTableEntry kEntries[] = {
      {"safetensors_slice", cpu::CreateSafetensorsSliceKernel},
      {"token_batch", cpu::CreateTokenBatchKernel},
      {"token_dataset", cpu::CreateTokenDatasetKernel},
  };
  return RegisterKernelTable(registry, plan::CPU, kEntries);
}

}  // namespace loom
