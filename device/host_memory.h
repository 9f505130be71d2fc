#ifndef LOOM_DEVICE_HOST_MEMORY_H_
#define LOOM_DEVICE_HOST_MEMORY_H_

// How much memory the CPU devices of a host may use: ReadHostMemory (the host's MemTotal, or a
// lower memory cgroup limit, and where the figure came from) and DefaultCpuMemoryBudget (three
// quarters of it, split evenly over the devices). loomd's options and loomctl's local cluster take
// their default CPU memory budgets from these.

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace loom {

// The memory this process may use, and where that figure comes from.
struct HostMemory {
  int64_t bytes = 0;
  // "MemTotal of /proc/meminfo", or the cgroup file whose limit is lower.
  std::string source;
};

// The host's memory (MemTotal of /proc/meminfo), or less where a memory cgroup limits this
// process: cgroup v2 `memory.max` or v1 `memory.limit_in_bytes` of its own cgroup or of any
// ancestor (a systemd unit's MemoryMax=, a container's memory limit). `root` prefixes every path
// read (tests pass a directory that mimics /proc and /sys/fs/cgroup). An error only when
// /proc/meminfo cannot be read or has no MemTotal; unreadable cgroup files are skipped.
absl::StatusOr<HostMemory> ReadHostMemory(absl::string_view root = "");

// The default memory budget of each of `devices` CPU devices that share `host_bytes` of memory:
// three quarters of it, split evenly (the rest is for the daemon, kernels' scratch space and the
// system). At least 1 byte per device.
int64_t DefaultCpuMemoryBudget(int64_t host_bytes, int devices);

// The default host memory a node gives offloaded activations (loomd --host-memory-budget auto)
// out of `host_bytes`: half of it on a node of GPUs (whose devices' memory is their own), an
// eighth on a node of CPU devices (which share three quarters already). At least 1 byte.
int64_t DefaultHostMemoryBudget(int64_t host_bytes, bool gpus);

}  // namespace loom

#endif  // LOOM_DEVICE_HOST_MEMORY_H_
