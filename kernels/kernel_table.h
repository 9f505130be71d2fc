#ifndef LOOM_KERNELS_KERNEL_TABLE_H_
#define LOOM_KERNELS_KERNEL_TABLE_H_

// A table of kernel factories for one device type and the one call that registers it: how every
// group of kernels (CPU, CUDA, gradients, optimizers, data) writes its registration, as an
// explicit table next to the kernels it names.

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/kernel_registry.h"
#include "proto/plan.pb.h"

namespace loom {

struct KernelTableEntry {
  const char* op_type;
  absl::StatusOr<std::unique_ptr<Kernel>> (*factory)(const KernelInit&);
};

// Registers every entry under (op type, device_type), in order. Fails with ALREADY_EXISTS at the
// first op type already registered for that device type (the ones before it stay registered).
absl::Status RegisterKernelTable(KernelRegistry* registry, plan::DeviceType device_type,
                                 absl::Span<const KernelTableEntry> entries);

}  // namespace loom

#endif  // LOOM_KERNELS_KERNEL_TABLE_H_
