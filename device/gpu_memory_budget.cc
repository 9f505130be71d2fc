#include "device/gpu_memory_budget.h"

#include <algorithm>

namespace loom {

int64_t GpuMemoryReserve(int64_t total_bytes) {
  return std::max<int64_t>(int64_t{1} << 30, total_bytes / 20);
}

int64_t DefaultGpuMemoryBudget(const GpuMemory& memory) {
  return std::max<int64_t>(1, memory.free_bytes - GpuMemoryReserve(memory.total_bytes));
}

}  // namespace loom
