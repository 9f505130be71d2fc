#ifndef LOOM_DAEMON_CLUSTER_SERVICE_H_
#define LOOM_DAEMON_CLUSTER_SERVICE_H_

// The coordinator's loom.v1.ClusterService: ClusterServiceImpl answers ListNodes with every node
// of its Cluster, which must outlive it, to a client, admin or node certificate (rpc/tls.h). A worker serves the same service by forwarding the call
// to its coordinator (coordinator_forwarding.h).

#include "daemon/cluster.h"
#include "proto/loom/v1/cluster_service.grpc.pb.h"

namespace loom::daemon {

// loom.v1.ClusterService on the coordinator: every node of its Cluster. (A worker forwards the
// call to its coordinator: WorkerClusterServiceImpl.)
class ClusterServiceImpl final : public v1::ClusterService::Service {
 public:
  // `cluster` must outlive the service.
  explicit ClusterServiceImpl(const Cluster* cluster) : cluster_(cluster) {}

  grpc::Status ListNodes(grpc::ServerContext* context, const v1::ListNodesRequest* request,
                         v1::ListNodesResponse* response) override;

 private:
  const Cluster* const cluster_;
};

}  // namespace loom::daemon

#endif  // LOOM_DAEMON_CLUSTER_SERVICE_H_
