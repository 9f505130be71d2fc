#include "bench/common/local_cluster.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace loom::bench {

absl::StatusOr<LocalCluster> StartLocalCluster(const std::string& loomd_binary,
                                               const std::string& name, int nodes,
                                               int devices_per_node) {
  LocalCluster cluster;
  const std::string devices = absl::StrCat("cpu:", devices_per_node);
  for (int node = 0; node < nodes; ++node) {
    std::vector<std::string> arguments = {"--devices", devices, "--node-name",
                                          absl::StrCat(name, "-n", node)};
    if (node > 0) {
      arguments.insert(arguments.end(), {"--coordinator", cluster.daemons[0]->address(),
                                         "--node-rank", absl::StrCat(node)});
    }
    absl::StatusOr<std::unique_ptr<testing::LoomdProcess>> daemon = testing::LoomdProcess::Start(
        loomd_binary, arguments, absl::StrCat("/tmp/loom_bench_", name, "_node", node, ".log"));
    if (!daemon.ok()) return daemon.status();
    cluster.daemons.push_back(*std::move(daemon));
  }
  absl::StatusOr<std::unique_ptr<ClusterClient>> client =
      ClusterClient::Connect(cluster.daemons[0]->address());
  if (!client.ok()) return client.status();
  cluster.client = *std::move(client);
  if (absl::Status ready = cluster.client->WaitUntilReady(nodes, absl::Now() + absl::Seconds(30));
      !ready.ok()) {
    return ready;
  }
  return cluster;
}

}  // namespace loom::bench
