#include "daemon/cluster_service.h"

#include "absl/strings/str_cat.h"

namespace loom::daemon {

grpc::Status ClusterServiceImpl::ListNodes(grpc::ServerContext* context,
                                           const v1::ListNodesRequest* request,
                                           v1::ListNodesResponse* response) {
  if (cluster_ == nullptr) {
    return grpc::Status(
        grpc::StatusCode::FAILED_PRECONDITION,
        absl::StrCat("this loomd is a worker; ask its coordinator at ", coordinator_address_));
  }
  for (v1::NodeInfo& node : cluster_->Nodes()) *response->add_nodes() = std::move(node);
  return grpc::Status::OK;
}

}  // namespace loom::daemon
