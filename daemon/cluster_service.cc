#include "daemon/cluster_service.h"

#include "rpc/grpc_status.h"
#include "rpc/tls.h"

namespace loom::daemon {

grpc::Status ClusterServiceImpl::ListNodes(grpc::ServerContext* context,
                                           const v1::ListNodesRequest* request,
                                           v1::ListNodesResponse* response) {
  if (absl::Status role = RequireRole(CallerOf(*context),
                                      {Role::kClient, Role::kAdmin, Role::kNode}, "list the nodes");
      !role.ok()) {
    return ToGrpcStatus(role);
  }
  for (v1::NodeInfo& node : cluster_->Nodes()) *response->add_nodes() = std::move(node);
  return grpc::Status::OK;
}

}  // namespace loom::daemon
