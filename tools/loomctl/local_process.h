#ifndef LOOM_TOOLS_LOOMCTL_LOCAL_PROCESS_H_
#define LOOM_TOOLS_LOOMCTL_LOCAL_PROCESS_H_

// The loomd processes of a local cluster, through /proc (Linux): LocalProcess (a pid and its start
// time, so that a later process with the same pid is not taken for it), starting a detached
// process bound to its CPUs, checking, signalling and waiting for it, and the tail of its log.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace loom::loomctl {

// The processes `loomctl cluster up` starts and `loomctl cluster down` stops (Linux: /proc).

// A process, told from a later one with the same pid by its start time.
struct LocalProcess {
  int64_t pid = 0;
  // /proc/PID/stat's starttime (clock ticks after boot).
  uint64_t start_ticks = 0;
};

// Starts `program` with `arguments` in a session of its own (a terminal's Ctrl-C does not reach
// it, and it outlives loomctl), stdin from /dev/null, stdout and stderr into `log_path`
// (truncated), bound to `cpus` when there are any (before exec: every thread it starts inherits
// the binding). An exec or binding failure is written to the log and ends the child with status
// 127.
absl::StatusOr<LocalProcess> StartDetachedProcess(const std::string& program,
                                                  const std::vector<std::string>& arguments,
                                                  const std::string& log_path,
                                                  const std::vector<int>& cpus = {});

// /proc/PID/stat's starttime; nullopt when there is no such process or it is a zombie.
std::optional<uint64_t> ProcessStartTicks(int64_t pid);

// Whether the process still runs (not a zombie, same start time). A child of this process that
// ended is reaped, and `ending`, when not null, says how it ended ("exited with status 2",
// "killed by signal 9").
bool IsProcessRunning(const LocalProcess& process, std::string* ending = nullptr);

// Polls until the process no longer runs (true) or `deadline` passes (false).
bool WaitForProcessExit(const LocalProcess& process, absl::Time deadline,
                        std::string* ending = nullptr);

// Sends `signal` when the process still runs (same start time); false when it does not.
bool SignalProcess(const LocalProcess& process, int signal);

// The last `lines` lines of a text file ("" when it cannot be read).
std::string TailOfFile(const std::string& path, int lines);

// The path of the running executable (/proc/self/exe), "" when unknown.
std::string CurrentExecutablePath();

}  // namespace loom::loomctl

#endif  // LOOM_TOOLS_LOOMCTL_LOCAL_PROCESS_H_
