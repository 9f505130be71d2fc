#ifndef LOOM_COMPILER_MEMORY_PLAN_H_
#define LOOM_COMPILER_MEMORY_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "proto/plan.pb.h"

namespace loom::compiler {

struct DeviceMemoryEstimate {
  plan::Device device;
  int64_t register_bytes = 0;  // every slot of every register the device's tasks produce
  int64_t budget_bytes = 0;
};

// Pass 8: the memory each device needs for its registers (registers live on their producer's
// device; every slot counts, a CPU device's slots as the runtime lays them out on huge pages:
// runtime/host_buffer_layout.h).
std::vector<DeviceMemoryEstimate> EstimateMemory(const plan::Plan& plan);

// Fails with RESOURCE_EXHAUSTED naming the device and its largest registers when a device's
// estimate exceeds its budget.
absl::Status CheckMemory(const plan::Plan& plan);

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_MEMORY_PLAN_H_
