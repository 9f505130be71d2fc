#ifndef LOOM_DAEMON_REACHABILITY_H_
#define LOOM_DAEMON_REACHABILITY_H_

// UnreachableNodesError: the error of a launch whose nodes could not all reach each other over UCX
// in the connect phase's probes. It names first the node(s) no other node reached, then every
// failed pair. The JobManager's connect phase (NameUnreachableNodes, job_manager_run.cc) makes it
// from the nodes' reports.

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace loom::daemon {

// The error of a launch whose nodes could not all reach each other over UCX (the probes of the
// connect phase, NodeJob::WaitForPeers). `unreachable` holds what each node reported: node ->
// (peer -> why). The message first names the node(s) that no other node of the job reached (the
// likely culprits: a link down, a firewall, a wrong UCX interface), then every failed pair, then
// what to check. `describe` names a node, e.g. "node 2 ('n2' at 10.0.0.3:7070)". UNAVAILABLE.
absl::Status UnreachableNodesError(const std::string& job_id, const std::vector<int>& participants,
                                   const std::map<int, std::map<int, std::string>>& unreachable,
                                   const std::function<std::string(int node)>& describe);

}  // namespace loom::daemon

#endif  // LOOM_DAEMON_REACHABILITY_H_
