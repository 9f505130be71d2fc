#ifndef LOOM_CORE_CPU_AFFINITY_H_
#define LOOM_CORE_CPU_AFFINITY_H_

// CPU affinity on Linux: AllowedCpus, the CPUs a process may run on (sched_getaffinity), and
// BindToCpu, which confines the calling thread and the threads it starts later to one CPU.
// `loomctl cluster`, the same-host transport's copies and the benchmarks use them.

#include <sys/types.h>

#include <vector>

#include "absl/status/statusor.h"

namespace loom {

// The CPUs process `pid` (0: this process) may run on, ascending: its affinity
// (sched_getaffinity), which a cgroup's cpuset, taskset and `loomctl cluster up --bind-cpus`
// narrow. Any user may read any process's. NOT_FOUND for a process that does not exist, INTERNAL
// for another failure, both naming the process.
absl::StatusOr<std::vector<int>> AllowedCpus(pid_t pid);

// Confines the calling thread, and the threads it starts afterwards, to CPU `cpu` (as `taskset -c`
// does for a process started after it; bind before starting threads); a negative `cpu` leaves it as
// it is. INTERNAL naming the CPU when the kernel refuses (a CPU outside the cgroup's cpuset),
// INVALID_ARGUMENT for one past CPU_SETSIZE.
absl::Status BindToCpu(int cpu);

}  // namespace loom

#endif  // LOOM_CORE_CPU_AFFINITY_H_
