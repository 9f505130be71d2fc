#include "core/cpu_affinity.h"

#include <sched.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace loom {

absl::StatusOr<std::vector<int>> AllowedCpus(pid_t pid) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(pid, sizeof(set), &set) != 0) {
    const int error = errno;
    const std::string message =
        absl::StrCat("cannot read the CPUs ",
                     pid == 0 ? std::string("this process") : absl::StrCat("process ", pid),
                     " may run on (sched_getaffinity): ", std::strerror(error));
    return error == ESRCH ? absl::NotFoundError(message) : absl::InternalError(message);
  }
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

absl::Status BindToCpu(int cpu) {
  if (cpu < 0) return absl::OkStatus();
  if (cpu >= CPU_SETSIZE) {
    return absl::InvalidArgumentError(
        absl::StrCat("binding to CPU ", cpu, ": CPUs are numbered below ", CPU_SETSIZE));
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof(set), &set) != 0) {
    return absl::InternalError(absl::StrCat("binding to CPU ", cpu, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace loom
