#include "tests/cluster/virtual_hosts.h"

#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace loom::testing {
namespace {

constexpr char kNamespacePrefix[] = "loomt";
constexpr char kNamespaceDirectory[] = "/var/run/netns";

// RunCommand without the output.
absl::Status Run(const std::vector<std::string>& argv) { return RunCommand(argv).status(); }

// Namespaces of earlier runs whose process is gone ("loomt<pid>-..." with no such pid).
void RemoveStaleNamespaces() {
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(kNamespaceDirectory, error)) {
    const std::string name = entry.path().filename().string();
    if (!absl::StartsWith(name, kNamespacePrefix)) continue;
    const std::string rest = name.substr(std::strlen(kNamespacePrefix));
    int pid = 0;
    if (!absl::SimpleAtoi(rest.substr(0, rest.find('-')), &pid) || pid <= 0) continue;
    if (kill(pid, 0) == 0 || errno != ESRCH) continue;
    (void)Run({"ip", "netns", "del", name});
  }
}

}  // namespace

absl::StatusOr<std::string> RunCommand(const std::vector<std::string>& argv) {
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) return absl::InternalError("pipe failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 2);
  posix_spawn_file_actions_addclose(&actions, pipe_fds[0]);
  std::vector<std::string> copies = argv;
  std::vector<char*> arguments;
  for (std::string& argument : copies) arguments.push_back(argument.data());
  arguments.push_back(nullptr);
  pid_t pid = 0;
  const int spawned =
      posix_spawnp(&pid, arguments[0], &actions, nullptr, arguments.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(pipe_fds[1]);
  std::string output;
  if (spawned == 0) {
    char buffer[4096];
    ssize_t read_bytes;
    while ((read_bytes = read(pipe_fds[0], buffer, sizeof(buffer))) > 0) {
      output.append(buffer, read_bytes);
    }
  }
  close(pipe_fds[0]);
  if (spawned != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot run '", argv[0], "': ", std::strerror(spawned)));
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return output;
  return absl::InternalError(
      absl::StrCat("'", absl::StrJoin(argv, " "), "' failed (status ", status, "): ", output));
}

absl::StatusOr<std::unique_ptr<VirtualHosts>> VirtualHosts::Create(int hosts) {
  if (geteuid() != 0) {
    return absl::FailedPreconditionError("network namespaces need root (this test runs as uid " +
                                         std::to_string(geteuid()) + ")");
  }
  RemoveStaleNamespaces();
  std::unique_ptr<VirtualHosts> network(new VirtualHosts());
  network->hosts_ = hosts;
  network->prefix_ = absl::StrCat(kNamespacePrefix, getpid());
  // A management subnet that no address or route of this namespace is in (it gets a veth into
  // it), starting from one that depends on the process id (parallel runs pick different ones).
  for (int attempt = 0; attempt < 200 && network->management_prefix_.empty(); ++attempt) {
    const std::string prefix = absl::StrCat("10.211.", (getpid() + attempt) % 200 + 20);
    absl::StatusOr<std::string> addresses =
        RunCommand({"ip", "-o", "addr", "show", "to", absl::StrCat(prefix, ".0/24")});
    absl::StatusOr<std::string> routes =
        RunCommand({"ip", "route", "show", absl::StrCat(prefix, ".0/24")});
    if (!addresses.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("the ip tool does not work here: ", addresses.status().message()));
    }
    if (addresses->empty() && routes.ok() && routes->empty()) {
      network->management_prefix_ = prefix;
    }
  }
  if (network->management_prefix_.empty()) {
    return absl::FailedPreconditionError("no free subnet in 10.211.0.0/16 for the test network");
  }
  // The switch namespace: creating it tells whether namespaces can be made here at all.
  const std::string switch_namespace = absl::StrCat(network->prefix_, "-switch");
  if (absl::StatusOr<std::string> added = RunCommand({"ip", "netns", "add", switch_namespace});
      !added.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create network namespaces here (CAP_NET_ADMIN and CAP_SYS_ADMIN are "
                     "needed, and the ip tool): ",
                     added.status().message()));
  }
  network->created_.push_back(switch_namespace);
  if (absl::Status status = network->Build(); !status.ok()) {
    // Namespaces may be made (CAP_SYS_ADMIN) but not links (CAP_NET_ADMIN).
    if (absl::StrContains(status.message(), "Operation not permitted")) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot create network links here (CAP_NET_ADMIN is needed): ", status.message()));
    }
    return status;
  }
  return network;
}

absl::Status VirtualHosts::Build() {
  const std::string switch_namespace = absl::StrCat(prefix_, "-switch");
  auto in_switch = [&](std::vector<std::string> command) {
    command.insert(command.begin(), {"ip", "-n", switch_namespace});
    return Run(command);
  };
  for (const char* bridge : {"management", "data"}) {
    if (absl::Status status = in_switch({"link", "add", bridge, "type", "bridge"}); !status.ok()) {
      return status;
    }
    if (absl::Status status = in_switch({"link", "set", bridge, "up"}); !status.ok()) return status;
  }
  for (int host = 0; host < hosts_; ++host) {
    const std::string name = Namespace(host);
    if (absl::Status status = Run({"ip", "netns", "add", name}); !status.ok()) return status;
    created_.push_back(name);
    struct Link {
      std::string device, port, bridge, address;
    };
    for (const Link& link : {Link{"eth0", absl::StrCat("m", host), "management",
                                  absl::StrCat(ManagementAddress(host), "/24")},
                             Link{kDataDevice, absl::StrCat("d", host), "data",
                                  absl::StrCat(DataAddress(host), "/24")}}) {
      for (const std::vector<std::string>& command : std::vector<std::vector<std::string>>{
               {"ip", "link", "add", link.device, "netns", name, "type", "veth", "peer", "name",
                link.port, "netns", switch_namespace},
               {"ip", "-n", switch_namespace, "link", "set", link.port, "master", link.bridge},
               {"ip", "-n", switch_namespace, "link", "set", link.port, "up"},
               {"ip", "-n", name, "addr", "add", link.address, "dev", link.device},
               {"ip", "-n", name, "link", "set", link.device, "up"}}) {
        if (absl::Status status = Run(command); !status.ok()) return status;
      }
    }
    if (absl::Status status = Run({"ip", "-n", name, "link", "set", "lo", "up"}); !status.ok()) {
      return status;
    }
  }
  // This process reaches the management network through a veth of its own namespace (removed
  // with the switch namespace, which holds its peer).
  const std::string client_device = prefix_;
  for (const std::vector<std::string>& command : std::vector<std::vector<std::string>>{
           {"ip", "link", "add", client_device, "type", "veth", "peer", "name", "client", "netns",
            switch_namespace},
           {"ip", "-n", switch_namespace, "link", "set", "client", "master", "management"},
           {"ip", "-n", switch_namespace, "link", "set", "client", "up"},
           {"ip", "addr", "add", absl::StrCat(management_prefix_, ".254/24"), "dev", client_device},
           {"ip", "link", "set", client_device, "up"}}) {
    if (absl::Status status = Run(command); !status.ok()) return status;
  }
  return absl::OkStatus();
}

VirtualHosts::~VirtualHosts() {
  // Deleting the switch namespace destroys its veth ends, and with them their peers.
  for (auto it = created_.rbegin(); it != created_.rend(); ++it) {
    (void)Run({"ip", "netns", "del", *it});
  }
  (void)Run({"ip", "link", "del", prefix_});  // gone already, unless the switch was not made
}

std::string VirtualHosts::Namespace(int host) const { return absl::StrCat(prefix_, "-host", host); }

std::string VirtualHosts::ManagementAddress(int host) const {
  return absl::StrCat(management_prefix_, ".", host + 1);
}

std::string VirtualHosts::DataAddress(int host) { return absl::StrCat("10.98.0.", host + 1); }

absl::Status VirtualHosts::SetDataLinkConnected(int host, bool connected) {
  std::vector<std::string> command = {"ip",   "-n",  absl::StrCat(prefix_, "-switch"),
                                      "link", "set", absl::StrCat("d", host)};
  if (connected) {
    command.insert(command.end(), {"master", "data"});
  } else {
    command.push_back("nomaster");
  }
  return Run(command);
}

}  // namespace loom::testing
