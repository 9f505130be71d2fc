#ifndef LOOM_BENCH_COMMON_COMMAND_H_
#define LOOM_BENCH_COMMON_COMMAND_H_

#include <sys/types.h>

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace loom::bench {

// Whether `program` is an executable file: a path, or a name found on PATH.
bool ProgramExists(const std::string& program);

// Runs `command` with /bin/sh and returns what it wrote to stdout and stderr. An error saying how
// it ended ("exited with status N", e.g. 124 when timeout(1) stopped it), with its output, when it
// exits non-zero.
absl::StatusOr<std::string> RunCommand(const std::string& command);

// A command running in the background (/bin/sh -c), its output in a file.
class BackgroundCommand {
 public:
  static absl::StatusOr<BackgroundCommand> Start(const std::string& command,
                                                 const std::string& output_path);
  BackgroundCommand(BackgroundCommand&& other) noexcept;
  BackgroundCommand& operator=(BackgroundCommand&&) = delete;
  // Kills it (SIGKILL to its process group) if it still runs.
  ~BackgroundCommand();

  // Waits up to `timeout` for it to exit; kills it afterwards. Its exit status (waitpid's).
  int Wait(absl::Duration timeout);
  // What it wrote so far.
  std::string Output() const;

 private:
  BackgroundCommand(pid_t pid, std::string output_path)
      : pid_(pid), output_path_(std::move(output_path)) {}

  pid_t pid_ = -1;
  std::string output_path_;
};

}  // namespace loom::bench

#endif  // LOOM_BENCH_COMMON_COMMAND_H_
