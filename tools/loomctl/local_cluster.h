#ifndef LOOM_TOOLS_LOOMCTL_LOCAL_CLUSTER_H_
#define LOOM_TOOLS_LOOMCTL_LOCAL_CLUSTER_H_

// A cluster of loomd processes on this machine, for development and tests: StartLocalCluster
// starts the coordinator and its workers, waits until every node is ready and writes the state
// file; StopLocalCluster stops the daemons the state file records. `loomctl cluster up` and
// `loomctl cluster down` call them.

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "rpc/tls.h"
#include "tools/loomctl/cluster_state.h"
#include "tools/loomctl/interrupt_signals.h"

namespace loom::loomctl {

// A cluster of loomd processes on this machine, for development and tests: what
// `loomctl cluster up` and `loomctl cluster down` do.

struct LocalClusterOptions {
  int nodes = 1;
  int devices_per_node = 1;
  // Holds cluster.json, a log file (nodeI.log) and a data directory (nodeI/) per daemon.
  std::string state_directory;
  // The loomd binary.
  std::string loomd;
  // Passed to every loomd as --memory-budget-per-device; empty: 3/4 of this host's memory (or its
  // memory cgroup's limit) shared by all the cluster's devices.
  std::string memory_budget_per_device;
  // Every daemon's --data-root and --checkpoint-root directories (absolute): its jobs read token
  // files, safetensors inputs and initial states beneath the first (and the second), and write
  // checkpoints beneath the second. Empty: the daemons open no files for jobs.
  std::vector<std::string> data_roots;
  std::vector<std::string> checkpoint_roots;
  // The host every daemon listens on (each on a free port).
  std::string host = "127.0.0.1";
  // Empty: the daemons are not bound. Otherwise one CPU list per node (cpu_binding.h's NodeCpus):
  // daemon I is bound to node_cpus[I] from its start.
  std::vector<std::vector<int>> node_cpus;
  // How long the daemons may take to listen and to report every node ready.
  absl::Duration timeout = absl::Seconds(60);
  // Mutual TLS: every daemon gets these files (the certificate must name `host`), and the
  // readiness check presents `tls_credentials`, their contents (ReadTlsFiles), as a client
  // (make-certs' certificates serve both). Empty paths and nullopt: plaintext.
  TlsFiles tls;
  std::optional<TlsCredentials> tls_credentials;
  // Not null: a SIGINT or SIGTERM it receives ends the start (CANCELLED naming the signal), and
  // the daemons started so far are stopped.
  const InterruptSignals* interrupt = nullptr;
};

// Starts options.nodes daemons: node 0 the coordinator (--node-rank 0), the others joining it
// (--coordinator ADDRESS --node-rank I), each --listen HOST:0, --metrics-listen HOST:0,
// --node-name nodeI, --devices cpu:K (and the TLS flags, --data-root and --checkpoint-root),
// bound to its CPUs where
// options.node_cpus has them; then waits until the coordinator is
// SERVING and lists every node READY, writes the state file and returns it. Progress goes to
// `progress`.
// FAILED_PRECONDITION when a cluster recorded in the state directory still runs. On any failure the
// daemons already started are stopped, and the message holds the tail of the failing daemon's log.
absl::StatusOr<ClusterState> StartLocalCluster(const LocalClusterOptions& options,
                                               std::ostream& progress);

// SIGTERM to every daemon recorded in `state_directory`, waits until `timeout`, SIGKILL to the
// ones left (then waits up to 5 s more), removes the state file. Says what happened to each
// daemon on `progress`. NOT_FOUND when no cluster is recorded; INTERNAL naming the daemons that
// survived SIGKILL (the state file is then kept).
absl::Status StopLocalCluster(const std::string& state_directory, absl::Duration timeout,
                              std::ostream& progress);

}  // namespace loom::loomctl

#endif  // LOOM_TOOLS_LOOMCTL_LOCAL_CLUSTER_H_
