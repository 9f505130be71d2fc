#include "tools/loomctl/local_process.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tools/loomctl/cpu_binding.h"

namespace loom::loomctl {
namespace {

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exited with status ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return absl::StrCat("was killed by signal ", WTERMSIG(status), " (",
                        strsignal(WTERMSIG(status)), ")");
  }
  return "ended";
}

// /proc/PID/stat's starttime; nullopt for no such process, and for a zombie unless `zombie_too`.
std::optional<uint64_t> ReadStartTicks(int64_t pid, bool zombie_too) {
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  if (!stat) return std::nullopt;
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  // "PID (COMMAND) STATE PPID ...": the command may hold spaces and parentheses.
  const size_t paren = text.rfind(')');
  if (paren == std::string::npos) return std::nullopt;
  std::vector<std::string> fields = absl::StrSplit(text.substr(paren + 1), ' ', absl::SkipEmpty());
  // fields[0] is field 3 (the state), so starttime (field 22) is fields[19].
  if (fields.size() <= 19) return std::nullopt;
  if (!zombie_too && (fields[0] == "Z" || fields[0] == "X")) return std::nullopt;
  uint64_t ticks = 0;
  if (!absl::SimpleAtoi(fields[19], &ticks)) return std::nullopt;
  return ticks;
}

}  // namespace

absl::StatusOr<LocalProcess> StartDetachedProcess(const std::string& program,
                                                  const std::vector<std::string>& arguments,
                                                  const std::string& log_path,
                                                  const std::vector<int>& cpus) {
  // Everything the child needs is prepared before fork: after it, only async-signal-safe calls.
  std::vector<std::string> argv_storage;
  argv_storage.push_back(program);
  argv_storage.insert(argv_storage.end(), arguments.begin(), arguments.end());
  std::vector<char*> argv;
  for (std::string& argument : argv_storage) argv.push_back(argument.data());
  argv.push_back(nullptr);

  const int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log < 0) {
    return absl::InternalError(
        absl::StrCat("cannot open the log file ", log_path, ": ", std::strerror(errno)));
  }
  const int null_input = open("/dev/null", O_RDONLY | O_CLOEXEC);
  const std::string exec_failure = absl::StrCat("loomctl: cannot execute ", program, ": ");
  cpu_set_t cpu_set;
  CPU_ZERO(&cpu_set);
  for (int cpu : cpus) CPU_SET(cpu, &cpu_set);
  const std::string bind_failure =
      absl::StrCat("loomctl: cannot bind ", program, " to CPUs ", FormatCpuList(cpus), ": ");

  const pid_t pid = fork();
  if (pid < 0) {
    const int fork_error = errno;
    close(log);
    if (null_input >= 0) close(null_input);
    return absl::InternalError(absl::StrCat("fork: ", std::strerror(fork_error)));
  }
  if (pid == 0) {
    setsid();
    if (null_input >= 0) dup2(null_input, STDIN_FILENO);
    dup2(log, STDOUT_FILENO);
    dup2(log, STDERR_FILENO);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    const bool bound = cpus.empty() || sched_setaffinity(0, sizeof(cpu_set), &cpu_set) == 0;
    if (bound) execv(program.c_str(), argv.data());
    const char* reason = std::strerror(errno);
    const std::string& failure = bound ? exec_failure : bind_failure;
    ssize_t ignored = write(STDERR_FILENO, failure.data(), failure.size());
    ignored = write(STDERR_FILENO, reason, std::strlen(reason));
    ignored = write(STDERR_FILENO, "\n", 1);
    (void)ignored;
    _exit(127);
  }
  close(log);
  if (null_input >= 0) close(null_input);
  LocalProcess process;
  process.pid = pid;
  // The start time does not change at exec; a child that already ended is still a zombie here
  // (only we reap it), so its stat is readable.
  process.start_ticks = ReadStartTicks(pid, /*zombie_too=*/true).value_or(0);
  return process;
}

std::optional<uint64_t> ProcessStartTicks(int64_t pid) {
  return ReadStartTicks(pid, /*zombie_too=*/false);
}

bool IsProcessRunning(const LocalProcess& process, std::string* ending) {
  if (process.pid <= 0) return false;
  int status = 0;
  if (waitpid(static_cast<pid_t>(process.pid), &status, WNOHANG) ==
      static_cast<pid_t>(process.pid)) {
    if (ending != nullptr) *ending = DescribeWaitStatus(status);
    return false;
  }
  std::optional<uint64_t> ticks = ProcessStartTicks(process.pid);
  return ticks.has_value() && (process.start_ticks == 0 || *ticks == process.start_ticks);
}

bool WaitForProcessExit(const LocalProcess& process, absl::Time deadline, std::string* ending) {
  while (IsProcessRunning(process, ending)) {
    if (absl::Now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

bool SignalProcess(const LocalProcess& process, int signal) {
  if (!IsProcessRunning(process)) return false;
  return kill(static_cast<pid_t>(process.pid), signal) == 0;
}

std::string TailOfFile(const std::string& path, int lines) {
  std::ifstream file(path);
  if (!file) return "";
  std::deque<std::string> last;
  std::string line;
  while (std::getline(file, line)) {
    last.push_back(line);
    if (static_cast<int>(last.size()) > lines) last.pop_front();
  }
  std::string text;
  for (const std::string& kept : last) absl::StrAppend(&text, kept, "\n");
  return text;
}

std::string CurrentExecutablePath() {
  std::error_code error;
  std::filesystem::path path = std::filesystem::read_symlink("/proc/self/exe", error);
  return error ? "" : path.string();
}

}  // namespace loom::loomctl
