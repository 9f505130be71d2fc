#include "kernels/kernel_table.h"

namespace loom {

absl::Status RegisterKernelTable(KernelRegistry* registry, plan::DeviceType device_type,
                                 absl::Span<const KernelTableEntry> entries) {
  for (const KernelTableEntry& entry : entries) {
    if (absl::Status status = registry->Register(entry.op_type, device_type, entry.factory);
        !status.ok()) {
      return status;
    }
  }
  return absl::OkStatus();
}

}  // namespace loom
