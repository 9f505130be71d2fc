#include "bench/common/command.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

namespace loom::bench {

bool ProgramExists(const std::string& program) {
  auto executable = [](const std::string& path) {
    struct stat info;
    return stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode) &&
           access(path.c_str(), X_OK) == 0;
  };
  if (program.find('/') != std::string::npos) return executable(program);
  const char* path = std::getenv("PATH");
  if (path == nullptr) return false;
  for (absl::string_view directory : absl::StrSplit(path, ':')) {
    if (!directory.empty() && executable(absl::StrCat(directory, "/", program))) return true;
  }
  return false;
}

absl::StatusOr<std::string> RunCommand(const std::string& command) {
  std::fflush(stdout);
  FILE* pipe = popen(absl::StrCat(command, " 2>&1").c_str(), "r");
  if (pipe == nullptr) return absl::InternalError(absl::StrCat("could not run '", command, "'"));
  std::string output;
  char buffer[4096];
  size_t got = 0;
  while ((got = fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.append(buffer, got);
  const int status = pclose(pipe);
  if (status != 0) {
    const std::string how = WIFEXITED(status)
                                ? absl::StrCat("exited with status ", WEXITSTATUS(status))
                                : absl::StrCat("ended by signal ", WTERMSIG(status));
    return absl::InternalError(absl::StrCat("'", command, "' ", how, ":\n", output));
  }
  return output;
}

absl::StatusOr<BackgroundCommand> BackgroundCommand::Start(const std::string& command,
                                                           const std::string& output_path) {
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    setpgid(0, 0);
    const int output = open(output_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (output >= 0) {
      dup2(output, 1);
      dup2(output, 2);
    }
    execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  setpgid(pid, pid);
  return BackgroundCommand(pid, output_path);
}

BackgroundCommand::BackgroundCommand(BackgroundCommand&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)), output_path_(std::move(other.output_path_)) {}

BackgroundCommand::~BackgroundCommand() {
  if (pid_ > 0) Wait(absl::ZeroDuration());
}

int BackgroundCommand::Wait(absl::Duration timeout) {
  if (pid_ <= 0) return -1;
  const absl::Time end = absl::Now() + timeout;
  int status = 0;
  while (true) {
    if (waitpid(pid_, &status, WNOHANG) == pid_) break;
    if (absl::Now() >= end) {
      kill(-pid_, SIGKILL);
      waitpid(pid_, &status, 0);
      break;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  pid_ = -1;
  return status;
}

std::string BackgroundCommand::Output() const {
  std::ifstream file(output_path_);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

}  // namespace loom::bench
