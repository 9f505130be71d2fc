#ifndef LOOM_KERNELS_CPU_SLEEP_KERNEL_H_
#define LOOM_KERNELS_CPU_SLEEP_KERNEL_H_

// The CPU kernel of "sleep" (CreateSleepKernel): a synthetic op for benchmarks and tests, each act
// of which takes a given number of microseconds and may pass input 0 through to output 0.
// RegisterCpuKernels registers it. A job that ends interrupts its wait.

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "kernels/kernel.h"

namespace loom::cpu {

// "sleep": a synthetic op for benchmarks and tests. Each Compute takes "microseconds" (int >= 0,
// required) in all: it sleeps until the absolute deadline start + microseconds on
// CLOCK_MONOTONIC. Any number of inputs and outputs of any data type and shape; when there is an
// input and an output and input 0 has the byte size of output 0, input 0 is copied to output 0
// (within the time). Other outputs are left as they are. The wait is abortable: it sleeps in
// slices of at most kSleepSliceMicroseconds and returns CANCELLED as soon as KernelInit::ending is
// set (within about a slice; at most 100 ms).
inline constexpr int64_t kSleepSliceMicroseconds = 20'000;
absl::StatusOr<std::unique_ptr<Kernel>> CreateSleepKernel(const KernelInit& init);

}  // namespace loom::cpu

#endif  // LOOM_KERNELS_CPU_SLEEP_KERNEL_H_
