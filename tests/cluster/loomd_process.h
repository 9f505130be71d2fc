#ifndef LOOM_TESTS_CLUSTER_LOOMD_PROCESS_H_
#define LOOM_TESTS_CLUSTER_LOOMD_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace loom::testing {

// A loomd child process (build/bin/loomd) with its output in a log file; killed (SIGKILL) when
// destroyed if still running, or when the test process dies.
class LoomdProcess {
 public:
  struct Options {
    std::string binary;
    std::vector<std::string> arguments;
    std::string log_path;
    // --listen; port 0 picks a free one (read back from the log).
    std::string listen_address = "127.0.0.1:0";
    // Runs it inside this network namespace (through `ip netns exec NAME`); empty: this process's.
    std::string network_namespace;
    // "NAME=VALUE" entries added to its environment (e.g. UCX's own UCX_TLS=tcp).
    std::vector<std::string> environment;
    // How long it may take to serve.
    absl::Duration deadline = absl::Seconds(20);
    // Unless `arguments` name roots themselves: the --data-root directories (the tests'
    // temporary directory, TMPDIR, and that of the GPT's default training text, the GPL's, see
    // tools/loom-gpt/gpt_model.h) and the --checkpoint-root (TMPDIR).
    std::vector<std::string> data_roots = {std::filesystem::temp_directory_path().string(),
                                           "/usr/share/common-licenses"};
    std::string checkpoint_root = std::filesystem::temp_directory_path().string();
  };

  // Starts `loomd --listen LISTEN_ADDRESS ARGUMENTS...` and waits (up to the deadline) for the
  // line that names its address.
  static absl::StatusOr<std::unique_ptr<LoomdProcess>> Start(const Options& options);
  // The same on 127.0.0.1 with a free port, in this network namespace.
  static absl::StatusOr<std::unique_ptr<LoomdProcess>> Start(
      const std::string& binary, const std::vector<std::string>& arguments,
      const std::string& log_path, absl::Duration deadline = absl::Seconds(20));
  ~LoomdProcess();

  const std::string& address() const { return address_; }
  pid_t pid() const { return pid_; }
  // Whether it still runs (it has not exited).
  bool Running();
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
