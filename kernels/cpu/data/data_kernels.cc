#include "kernels/cpu/data/data_kernels.h"

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/cpu/data/safetensors_slice_kernel.h"
#include "kernels/cpu/data/token_batch_kernel.h"

namespace loom {

absl::Status RegisterCpuDataKernels(KernelRegistry* registry) {
  struct Entry {
    const char* op_type;
    absl::StatusOr<std::unique_ptr<Kernel>> (*factory)(const KernelInit&);
  };
  static constexpr Entry kEntries[] = {
      {"safetensors_slice", cpu::CreateSafetensorsSliceKernel},
      {"token_batch", cpu::CreateTokenBatchKernel},
  };
  for (const Entry& entry : kEntries) {
    absl::Status status = registry->Register(entry.op_type, plan::CPU, entry.factory);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

}  // namespace loom
