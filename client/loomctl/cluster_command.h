#ifndef LOOM_CLIENT_LOOMCTL_CLUSTER_COMMAND_H_
#define LOOM_CLIENT_LOOMCTL_CLUSTER_COMMAND_H_

#include "client/loomctl/arguments.h"

namespace loom::loomctl {

// `loomctl cluster up --nodes N --devices-per-node K [flags]`: starts a local cluster of N loomd
// processes (StartLocalCluster) and prints the coordinator's address on stdout;
// `loomctl cluster down [--state-dir DIR]`: stops it (StopLocalCluster).
//
// Exit codes: 0 done (down: also when no cluster is recorded); 1 the cluster could not be started
// or stopped (the failing daemon's log tail on stderr); 2 usage error.
Subcommand ClusterSubcommand();

// The flags of each.
ArgumentSpec ClusterUpArgumentSpec();
ArgumentSpec ClusterDownArgumentSpec();

}  // namespace loom::loomctl

#endif  // LOOM_CLIENT_LOOMCTL_CLUSTER_COMMAND_H_
