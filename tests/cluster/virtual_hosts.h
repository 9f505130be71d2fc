#ifndef LOOM_TESTS_CLUSTER_VIRTUAL_HOSTS_H_
#define LOOM_TESTS_CLUSTER_VIRTUAL_HOSTS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace loom::testing {

// Hosts on this machine, each a network namespace with its own addresses on two networks (one
// bridge each, in a "switch" namespace; DESIGN.md §8's multi-node tests):
//
//   management  eth0  MANAGEMENT_PREFIX.<host + 1>/24   gRPC between the daemons, and to this
//                                                       process (a veth into this namespace,
//                                                       MANAGEMENT_PREFIX.254)
//   data        eth1  10.98.0.<host + 1>/24             UCX (UCX_NET_DEVICES=eth1)
//
// Names are unique per process ("loomt<pid>-..."); the destructor removes every namespace (and so
// every link), and Create first removes those a killed earlier run left behind. Needs root
// (CAP_NET_ADMIN and CAP_SYS_ADMIN) and the `ip` tool: Create fails with FAILED_PRECONDITION
// saying why otherwise, for the test to skip.
class VirtualHosts {
 public:
  static absl::StatusOr<std::unique_ptr<VirtualHosts>> Create(int hosts);
  ~VirtualHosts();

  // The namespace to run host `host`'s processes in (LoomdProcess::Options::network_namespace).
  std::string Namespace(int host) const;
  // Its management address, e.g. "10.211.37.2".
  std::string ManagementAddress(int host) const;
  // Its address on the data network, e.g. "10.98.0.2" (on kDataDevice).
  static std::string DataAddress(int host);
  // The device of the data network in every host's namespace (for UCX_NET_DEVICES).
  static constexpr char kDataDevice[] = "eth1";
  // Connects host `host`'s data link to the data network, or cuts it off (its port leaves the
  // bridge: the link stays up, its frames go nowhere, as when a switch port or cable fails).
  absl::Status SetDataLinkConnected(int host, bool connected);

 private:
  VirtualHosts() = default;
  absl::Status Build();

  int hosts_ = 0;
  std::string prefix_;                // "loomt<pid>"
  std::string management_prefix_;     // "10.211.<n>"
  std::vector<std::string> created_;  // namespaces, to delete
};

// Runs a command (no shell): its output (stdout and stderr) when it exits 0, otherwise an error
// with the output.
absl::StatusOr<std::string> RunCommand(const std::vector<std::string>& argv);

}  // namespace loom::testing

#endif  // LOOM_TESTS_CLUSTER_VIRTUAL_HOSTS_H_
