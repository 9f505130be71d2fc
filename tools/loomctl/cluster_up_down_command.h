#ifndef LOOM_TOOLS_LOOMCTL_CLUSTER_UP_DOWN_COMMAND_H_
#define LOOM_TOOLS_LOOMCTL_CLUSTER_UP_DOWN_COMMAND_H_

// `loomctl cluster up` and `loomctl cluster down`: a local cluster of loomd processes started
// (StartLocalCluster, local_cluster.h) and stopped, with their flags and exit codes.

#include "cli/arguments.h"

namespace loom::loomctl {

// `loomctl cluster up --nodes N --devices-per-node K [flags]`: starts a local cluster of N loomd
// processes (StartLocalCluster) and prints the coordinator's address on stdout;
// `loomctl cluster down [--state-dir DIR]`: stops it (StopLocalCluster).
//
// Exit codes: 0 done (down: also when no cluster is recorded); 1 the cluster could not be started
// or stopped (the failing daemon's log tail on stderr); 2 usage error.
cli::Subcommand ClusterSubcommand();

// The flags of each.
cli::ArgumentSpec ClusterUpArgumentSpec();
cli::ArgumentSpec ClusterDownArgumentSpec();

}  // namespace loom::loomctl

#endif  // LOOM_TOOLS_LOOMCTL_CLUSTER_UP_DOWN_COMMAND_H_
