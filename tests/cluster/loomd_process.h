#ifndef LOOM_TESTS_CLUSTER_LOOMD_PROCESS_H_
#define LOOM_TESTS_CLUSTER_LOOMD_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace loom::testing {

// A loomd child process (build/bin/loomd) with its output in a log file; killed (SIGKILL) when
// destroyed if still running.
class LoomdProcess {
 public:
  // Starts `loomd --listen 127.0.0.1:0 ARGUMENTS...` and waits (up to `deadline`) for the line
  // that names its address.
  static absl::StatusOr<std::unique_ptr<LoomdProcess>> Start(
      const std::string& binary, const std::vector<std::string>& arguments,
      const std::string& log_path, absl::Duration deadline = absl::Seconds(20));
  ~LoomdProcess();

  const std::string& address() const { return address_; }
  pid_t pid() const { return pid_; }
  // Sends `signal`; for SIGTERM/SIGKILL waits for the exit and returns the exit status.
  int Signal(int signal);
  std::string Log() const;

 private:
  pid_t pid_ = -1;
  std::string address_;
  std::string log_path_;
};

}  // namespace loom::testing

#endif  // LOOM_TESTS_CLUSTER_LOOMD_PROCESS_H_
