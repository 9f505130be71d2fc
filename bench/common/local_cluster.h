#ifndef LOOM_BENCH_COMMON_LOCAL_CLUSTER_H_
#define LOOM_BENCH_COMMON_LOCAL_CLUSTER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/cluster_client.h"
#include "tests/cluster/loomd_process.h"

namespace loom::bench {

// loomd processes on this machine: node 0 the coordinator, nodes 1..n-1 workers joined to it (with
// --node-rank i), each with `devices_per_node` CPU devices; their logs in
// /tmp/loom_bench_<name>_node<i>.log. Killed when destroyed.
struct LocalCluster {
  std::vector<std::unique_ptr<testing::LoomdProcess>> daemons;
  std::unique_ptr<ClusterClient> client;  // to the coordinator
};

// Starts the daemons and waits until the coordinator lists every node READY.
absl::StatusOr<LocalCluster> StartLocalCluster(const std::string& loomd_binary,
                                               const std::string& name, int nodes,
                                               int devices_per_node);

}  // namespace loom::bench

#endif  // LOOM_BENCH_COMMON_LOCAL_CLUSTER_H_
