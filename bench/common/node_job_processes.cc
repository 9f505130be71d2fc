#include "bench/common/node_job_processes.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "bench/common/bench_util.h"
#include "core/cpu_affinity.h"
#include "glog/logging.h"
#include "kernels/cpu/blas_threads.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/kernel_registry.h"

namespace loom::bench {
namespace {

// Messages between the parent and a child: one type byte, a 4-byte length, the payload.
enum FrameType : char {
  kAddress = 'A',    // child -> parent: its network address
  kAddresses = 'M',  // parent -> child: every node's address
  kConnected = 'C',  // child -> parent: connected to every node
  kStart = 'S',      // parent -> child: every node is connected; start
  kReport = 'R',     // child -> parent: the job ended; its report
  kError = 'E',      // child -> parent: what failed
  kStop = 'X',       // parent -> child: every node ended; stop the network and exit
};

struct Frame {
  char type = 0;
  std::string payload;
};

bool WriteAll(int fd, const void* data, size_t size) {
  const char* bytes = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t written = write(fd, bytes, size);
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) return false;
    bytes += written;
    size -= static_cast<size_t>(written);
  }
  return true;
}

bool ReadAll(int fd, void* data, size_t size) {
  char* bytes = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t got = read(fd, bytes, size);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    bytes += got;
    size -= static_cast<size_t>(got);
  }
  return true;
}

bool WriteFrame(int fd, char type, const std::string& payload = "") {
  const uint32_t length = static_cast<uint32_t>(payload.size());
  return WriteAll(fd, &type, 1) && WriteAll(fd, &length, sizeof(length)) &&
         WriteAll(fd, payload.data(), payload.size());
}

bool ReadFrame(int fd, Frame* frame) {
  uint32_t length = 0;
  if (!ReadAll(fd, &frame->type, 1) || !ReadAll(fd, &length, sizeof(length))) return false;
  frame->payload.resize(length);
  return ReadAll(fd, frame->payload.data(), length);
}

std::string EncodeAddresses(const std::map<int, std::string>& addresses) {
  std::string bytes;
  for (const auto& [node, address] : addresses) {
    const int32_t node_field = node;
    const uint32_t length = static_cast<uint32_t>(address.size());
    bytes.append(reinterpret_cast<const char*>(&node_field), sizeof(node_field));
    bytes.append(reinterpret_cast<const char*>(&length), sizeof(length));
    bytes.append(address);
  }
  return bytes;
}

std::map<int, std::string> DecodeAddresses(const std::string& bytes) {
  std::map<int, std::string> addresses;
  size_t at = 0;
  while (at + 8 <= bytes.size()) {
    int32_t node = 0;
    uint32_t length = 0;
    std::memcpy(&node, bytes.data() + at, sizeof(node));
    std::memcpy(&length, bytes.data() + at + 4, sizeof(length));
    at += 8;
    addresses[node] = bytes.substr(at, length);
    at += length;
  }
  return addresses;
}

// Moves this process into the network namespace `name` of `ip netns`, as `ip netns exec` does:
// the namespace, and a mount namespace of its own with that network's /sys (UCX finds its
// devices in /sys/class/net).
absl::Status EnterNetworkNamespace(const std::string& name) {
  const std::string path = absl::StrCat("/var/run/netns/", name);
  const int descriptor = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (descriptor < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot open network namespace ", path, ": ", std::strerror(errno)));
  }
  const int entered = setns(descriptor, CLONE_NEWNET);
  const int error = errno;
  close(descriptor);
  if (entered != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot enter network namespace ", name, ": ", std::strerror(error)));
  }
  if (unshare(CLONE_NEWNS) != 0 || mount("", "/", nullptr, MS_SLAVE | MS_REC, nullptr) != 0 ||
      umount2("/sys", MNT_DETACH) != 0 || mount(name.c_str(), "/sys", "sysfs", 0, nullptr) != 0) {
    return absl::FailedPreconditionError(absl::StrCat("cannot mount the /sys of network namespace ",
                                                      name, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

// The child's whole life; never returns.
[[noreturn]] void RunChild(const plan::Plan& plan, const NodeJobProcessOptions& options,
                           const std::string& network_namespace, int cpu,
                           const NodeJobReport& report, int from_parent, int to_parent) {
  alarm(static_cast<unsigned>(absl::ToInt64Seconds(options.deadline)) + 1);
  auto fail = [&](const std::string& what, const absl::Status& status) {
    WriteFrame(to_parent, kError, absl::StrCat(what, ": ", status.ToString()));
    _exit(1);
  };
  if (!network_namespace.empty()) {
    if (absl::Status status = EnterNetworkNamespace(network_namespace); !status.ok()) {
      fail("network namespace", status);
    }
  }
  if (absl::Status status = BindToCpu(cpu); !status.ok()) fail("placement", status);
  SetBlasThreads(options.blas_threads);
  KernelRegistry kernels;
  if (absl::Status status = RegisterCpuKernels(&kernels); !status.ok()) fail("kernels", status);
  if (absl::Status status = RegisterNoopKernel(&kernels); !status.ok()) fail("kernels", status);
  absl::StatusOr<std::unique_ptr<daemon::NodeJob>> job =
      daemon::NodeJob::Create(plan, &kernels, options.job, options.ucx);
  if (!job.ok()) fail("building the node's job", job.status());
  if (!WriteFrame(to_parent, kAddress, (*job)->address())) _exit(1);
  Frame frame;
  if (!ReadFrame(from_parent, &frame) || frame.type != kAddresses) _exit(1);
  if (absl::Status status = (*job)->Connect(DecodeAddresses(frame.payload)); !status.ok()) {
    fail("connecting", status);
  }
  if (!WriteFrame(to_parent, kConnected)) _exit(1);
  if (!ReadFrame(from_parent, &frame) || frame.type != kStart) _exit(1);
  if (absl::Status status = (*job)->Start(); !status.ok()) fail("starting", status);
  if (absl::Status status = (*job)->Wait(); !status.ok()) fail("running", status);
  absl::StatusOr<std::string> reported = report(**job);
  if (!reported.ok()) fail("reporting", reported.status());
  // From here on the nodes stop one after the other, and each sees the others go (its runtime,
  // already ended, logs that as a lost peer): only errors are of interest.
  FLAGS_minloglevel = google::GLOG_ERROR;
  if (!WriteFrame(to_parent, kReport, *reported)) _exit(1);
  // The end barrier: peers may still need this node's network.
  ReadFrame(from_parent, &frame);
  job->reset();
  _exit(0);
}

struct Child {
  int node = 0;
  pid_t pid = -1;
  int to_child = -1;
  int from_child = -1;
};

// Kills and reaps every child still running.
void EndChildren(std::vector<Child>& children, bool kill_them) {
  for (Child& child : children) {
    if (child.pid <= 0) continue;
    if (kill_them) kill(child.pid, SIGKILL);
    int status = 0;
    waitpid(child.pid, &status, 0);
    child.pid = -1;
    close(child.to_child);
    close(child.from_child);
  }
}

// The next frame of `child`, which must be of `expected` type.
absl::StatusOr<std::string> Expect(const Child& child, char expected, const std::string& what) {
  Frame frame;
  if (!ReadFrame(child.from_child, &frame)) {
    return absl::InternalError(absl::StrCat("node ", child.node, "'s process ended while ", what,
                                            " (killed by its deadline?)"));
  }
  if (frame.type == kError) {
    return absl::InternalError(absl::StrCat("node ", child.node, ": ", frame.payload));
  }
  if (frame.type != expected) {
    return absl::InternalError(
        absl::StrCat("node ", child.node, " sent '", std::string(1, frame.type), "' while ", what));
  }
  return std::move(frame.payload);
}

}  // namespace

absl::StatusOr<std::vector<std::string>> RunNodePlansInProcesses(
    const std::vector<plan::Plan>& plans, const NodeJobProcessOptions& options,
    const NodeJobReport& report) {
  signal(SIGPIPE, SIG_IGN);
  std::fflush(stdout);
  std::fflush(stderr);
  // The children inherit the OpenBLAS thread count they are to use, so that they never set it:
  // OpenBLAS rebuilds its pool in a forked child on the first openblas_set_num_threads, whatever
  // the count, and the new worker spins on sched_yield for about 100 ms beside the node's threads
  // (docs/PERFORMANCE.md, alltoall). A benchmark's full run set it already (MachineCheck); its
  // --only runs did not.
  SetBlasThreads(options.blas_threads);
  std::vector<Child> children;
  for (size_t position = 0; position < plans.size(); ++position) {
    const plan::Plan& node_plan = plans[position];
    const std::string network_namespace = position < options.network_namespaces.size()
                                              ? options.network_namespaces[position]
                                              : std::string();
    const int cpu = position < options.cpus.size() ? options.cpus[position] : -1;
    int down[2], up[2];
    if (pipe(down) != 0 || pipe(up) != 0) {
      EndChildren(children, true);
      return absl::InternalError("pipe failed");
    }
    const pid_t pid = fork();
    if (pid < 0) {
      EndChildren(children, true);
      return absl::InternalError("fork failed");
    }
    if (pid == 0) {
      for (const Child& earlier : children) {
        close(earlier.to_child);
        close(earlier.from_child);
      }
      close(down[1]);
      close(up[0]);
      RunChild(node_plan, options, network_namespace, cpu, report, down[0], up[1]);
    }
    close(down[0]);
    close(up[1]);
    children.push_back(Child{node_plan.node(), pid, down[1], up[0]});
  }
  auto failed = [&](absl::Status status) {
    EndChildren(children, true);
    return status;
  };
  std::map<int, std::string> addresses;
  for (const Child& child : children) {
    absl::StatusOr<std::string> address = Expect(child, kAddress, "starting");
    if (!address.ok()) return failed(address.status());
    addresses[child.node] = *address;
  }
  const std::string encoded = EncodeAddresses(addresses);
  for (const Child& child : children) WriteFrame(child.to_child, kAddresses, encoded);
  for (const Child& child : children) {
    absl::StatusOr<std::string> connected = Expect(child, kConnected, "connecting");
    if (!connected.ok()) return failed(connected.status());
  }
  for (const Child& child : children) WriteFrame(child.to_child, kStart);
  std::vector<std::string> reports;
  for (const Child& child : children) {
    absl::StatusOr<std::string> reported = Expect(child, kReport, "running");
    if (!reported.ok()) return failed(reported.status());
    reports.push_back(*std::move(reported));
  }
  for (const Child& child : children) WriteFrame(child.to_child, kStop);
  EndChildren(children, false);
  return reports;
}

absl::StatusOr<std::string> ReportActs(daemon::NodeJob& job, const std::string& task_name) {
  const Actor* actor = job.runtime().FindActor(task_name);
  if (actor == nullptr) {
    return absl::NotFoundError(absl::StrCat("no task '", task_name, "' on node ", job.node()));
  }
  std::ostringstream text;
  for (const ActEvent& event : job.runtime().events()) {
    if (event.task_index != actor->id().task_index()) continue;
    text << event.piece << ' ' << event.start_nanoseconds << ' ' << event.end_nanoseconds << '\n';
  }
  return text.str();
}

std::vector<Act> ParseActs(const std::string& text) {
  std::vector<Act> acts;
  std::istringstream lines(text);
  Act act;
  while (lines >> act.piece >> act.start_nanoseconds >> act.end_nanoseconds) acts.push_back(act);
  return acts;
}

plan::Device NodeDevice(int node) {
  plan::Device device;
  device.set_node(node);
  device.set_type(plan::CPU);
  device.set_index(0);
  return device;
}

}  // namespace loom::bench
