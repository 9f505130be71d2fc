#ifndef LOOM_TOOLS_LOOMCTL_CLUSTER_STATE_H_
#define LOOM_TOOLS_LOOMCTL_CLUSTER_STATE_H_

// The state file of a local cluster, STATE_DIR/cluster.json: ClusterState and ClusterNodeRecord
// (each daemon's rank, pid and start time, addresses, log and CPUs), the default state directory,
// and reading and writing the file. `loomctl cluster up` writes it; `cluster down` and the default
// --coordinator of the other commands read it.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "rpc/tls.h"

namespace loom::loomctl {

// What `loomctl cluster up` records of the local cluster it started, in
// STATE_DIR/cluster.json, for `loomctl cluster down` and as the default --coordinator:
//
//   {"coordinator":"127.0.0.1:40123","loomd":"/.../loomd","nodes":[{"rank":0,"name":"node0",
//    "pid":4242,"start_ticks":123456,"address":"127.0.0.1:40123","log":"STATE_DIR/node0.log",
//    "metrics":"127.0.0.1:40124", "cpus":"0-1"}, ...]}
//
// and, for a cluster started with --tls-*, "tls":{"ca":PATH,"cert":PATH,"key":PATH}: the files
// every daemon got, which the other loomctl commands use when they take the recorded coordinator
// and are given no TLS flags of their own.
struct ClusterNodeRecord {
  int rank = 0;
  std::string name;
  int64_t pid = 0;
  // The process's start time (/proc/PID/stat, clock ticks since boot): tells the daemon from a
  // later process that got the same pid.
  uint64_t start_ticks = 0;
  std::string address;
  std::string log;
  // Where the daemon serves Prometheus metrics (HOST:PORT of http(s)://HOST:PORT/metrics).
  std::string metrics;
  // The CPUs it is bound to (a CPU list, "0-1"; --bind-cpus), empty when it is not: the member
  // "cpus", written only for a bound daemon.
  std::string cpus;
};

struct ClusterState {
  std::string coordinator;
  std::string loomd;
  std::vector<ClusterNodeRecord> nodes;
  // The --tls-ca/--tls-cert/--tls-key files of every daemon; empty paths: plaintext.
  TlsFiles tls;
};

// $XDG_RUNTIME_DIR/loom-cluster when XDG_RUNTIME_DIR is set, else /tmp/loom-cluster-<uid>.
std::string DefaultClusterStateDirectory();
// STATE_DIR/cluster.json.
std::string ClusterStatePath(const std::string& state_directory);

// NOT_FOUND when no state file exists; INVALID_ARGUMENT naming the file when it does not parse.
absl::StatusOr<ClusterState> ReadClusterState(const std::string& state_directory);
// Writes the file atomically (a temporary file renamed over it).
absl::Status WriteClusterState(const std::string& state_directory, const ClusterState& state);
std::string ClusterStateToJson(const ClusterState& state);
absl::StatusOr<ClusterState> ClusterStateFromJson(const std::string& json);

}  // namespace loom::loomctl

#endif  // LOOM_TOOLS_LOOMCTL_CLUSTER_STATE_H_
