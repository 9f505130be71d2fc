#ifndef LOOM_DAEMON_CLUSTER_SERVICE_H_
#define LOOM_DAEMON_CLUSTER_SERVICE_H_

#include <string>

#include "daemon/cluster.h"
#include "proto/loom/v1/cluster_service.grpc.pb.h"

namespace loom::daemon {

// loom.v1.ClusterService. On the coordinator: every node of its Cluster. On a worker (no
// cluster): FAILED_PRECONDITION naming the coordinator to ask.
class ClusterServiceImpl final : public v1::ClusterService::Service {
 public:
  // `cluster` (null on workers) must outlive the service.
  ClusterServiceImpl(const Cluster* cluster, std::string coordinator_address)
      : cluster_(cluster), coordinator_address_(std::move(coordinator_address)) {}

  grpc::Status ListNodes(grpc::ServerContext* context, const v1::ListNodesRequest* request,
                         v1::ListNodesResponse* response) override;

 private:
  const Cluster* const cluster_;
  const std::string coordinator_address_;
};

}  // namespace loom::daemon

#endif  // LOOM_DAEMON_CLUSTER_SERVICE_H_
