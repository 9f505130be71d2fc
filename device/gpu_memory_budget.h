#ifndef LOOM_DEVICE_GPU_MEMORY_BUDGET_H_
#define LOOM_DEVICE_GPU_MEMORY_BUDGET_H_

// How much memory a job may plan on a GPU by default: GpuMemory (what cudaMemGetInfo reports:
// free and total bytes) and DefaultGpuMemoryBudget (the free bytes less a reserve). loomd's
// `--memory-budget-per-device auto` takes its GPU budgets from these, so that the compiler's
// exact estimate refuses a job larger than the GPU when it is submitted, as on CPUs.

#include <cstdint>

namespace loom {

struct GpuMemory {
  int64_t free_bytes = 0;
  int64_t total_bytes = 0;
};

// The reserve kept out of a GPU's budget for what the compiler's estimate does not count: the
// CUDA context's later growth, cuBLAS workspaces, NCCL's buffers, the caching allocator's
// rounding. The larger of 1 GiB and 1/20 of the GPU's memory.
int64_t GpuMemoryReserve(int64_t total_bytes);

// The free bytes less GpuMemoryReserve, and at least 1 byte (a GPU already full then refuses
// every job, naming itself, instead of admitting one that fails at run time).
int64_t DefaultGpuMemoryBudget(const GpuMemory& memory);

}  // namespace loom

#endif  // LOOM_DEVICE_GPU_MEMORY_BUDGET_H_
