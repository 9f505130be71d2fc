#include "daemon/cluster_service.h"

namespace loom::daemon {

grpc::Status ClusterServiceImpl::ListNodes(grpc::ServerContext* context,
                                           const v1::ListNodesRequest* request,
                                           v1::ListNodesResponse* response) {
  for (v1::NodeInfo& node : cluster_->Nodes()) *response->add_nodes() = std::move(node);
  return grpc::Status::OK;
}

}  // namespace loom::daemon
