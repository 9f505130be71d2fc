#include "tests/cluster/loomd_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace loom::testing {

absl::StatusOr<std::unique_ptr<LoomdProcess>> LoomdProcess::Start(
    const std::string& binary, const std::vector<std::string>& arguments,
    const std::string& log_path, absl::Duration deadline) {
  Options options;
  options.binary = binary;
  options.arguments = arguments;
  options.log_path = log_path;
  options.deadline = deadline;
  return Start(options);
}

absl::StatusOr<std::unique_ptr<LoomdProcess>> LoomdProcess::Start(const Options& options) {
  auto process = std::make_unique<LoomdProcess>();
  process->log_path_ = options.log_path;
  std::vector<std::string> argv_strings = {options.binary, "--listen", options.listen_address};
  argv_strings.insert(argv_strings.end(), options.arguments.begin(), options.arguments.end());
  const auto names_roots = [&](const std::string& flag) {
    for (const std::string& argument : options.arguments) {
      if (argument == flag || argument.rfind(flag + "=", 0) == 0) return true;
    }
    return false;
  };
  if (!names_roots("--data-root") && !names_roots("--checkpoint-root")) {
    for (const std::string& root : options.data_roots) {
      argv_strings.insert(argv_strings.end(), {"--data-root", root});
    }
    argv_strings.insert(argv_strings.end(), {"--checkpoint-root", options.checkpoint_root});
  }
  std::vector<std::string> environment_strings;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string inherited = *entry;
    bool overridden = false;
    for (const std::string& added : options.environment) {
      overridden |=
          inherited.substr(0, inherited.find('=') + 1) == added.substr(0, added.find('=') + 1);
    }
    if (!overridden) environment_strings.push_back(inherited);
  }
  environment_strings.insert(environment_strings.end(), options.environment.begin(),
                             options.environment.end());
  std::string program = options.binary;
  if (!options.network_namespace.empty()) {
    // `ip netns exec` enters the namespace and mounts a /sys that shows its interfaces (UCX lists
    // them there), then executes loomd in the same process.
    argv_strings.insert(argv_strings.begin(), {"ip", "netns", "exec", options.network_namespace});
    program = "/usr/sbin/ip";
    if (access(program.c_str(), X_OK) != 0) program = "/sbin/ip";
  }
  // Everything the child needs is built before fork: after it, only async-signal-safe calls.
  std::vector<char*> argv;
  for (std::string& argument : argv_strings) argv.push_back(argument.data());
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (std::string& entry : environment_strings) envp.push_back(entry.data());
  envp.push_back(nullptr);
  const std::string& log_path = options.log_path;
  // Empty before the child starts, so that no earlier run's address is read.
  { std::ofstream truncate(log_path, std::ios::trunc); }
  pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(log, 1);
    dup2(log, 2);
    // Dies with the test, even when the test is killed.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    execve(program.c_str(), argv.data(), envp.data());
    _exit(127);
  }
  const absl::Duration deadline = options.deadline;
  process->pid_ = pid;
  const absl::Time end = absl::Now() + deadline;
  const std::string marker = "' listening on ";
  while (absl::Now() < end) {
    std::string log = process->Log();
    size_t at = log.find(marker);
    if (at != std::string::npos) {
      size_t start = at + marker.size();
      size_t stop = log.find_first_of(" \n", start);
      if (stop != std::string::npos) {
        process->address_ = log.substr(start, stop - start);
        return process;
      }
    }
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      process->pid_ = -1;
      return absl::InternalError(absl::StrCat("loomd exited before serving:\n", log));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::DeadlineExceededError(absl::StrCat(
      "loomd did not start within ", absl::FormatDuration(deadline), ":\n", process->Log()));
}

LoomdProcess::~LoomdProcess() {
  if (pid_ > 0) Signal(SIGKILL);
}

bool LoomdProcess::Running() {
  if (pid_ <= 0) return false;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) == pid_) {
    pid_ = -1;
    return false;
  }
  return true;
}

int LoomdProcess::Signal(int signal) {
  if (pid_ <= 0) return -1;
  kill(pid_, signal);
  if (signal != SIGTERM && signal != SIGKILL) return 0;
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  return status;
}

std::string LoomdProcess::Log() const {
  std::ifstream file(log_path_);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

}  // namespace loom::testing
