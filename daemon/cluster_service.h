#ifndef LOOM_DAEMON_CLUSTER_SERVICE_H_
#define LOOM_DAEMON_CLUSTER_SERVICE_H_

#include <mutex>
#include <string>

#include "daemon/job_manager.h"
#include "proto/loom/v1/cluster_service.grpc.pb.h"

namespace loom::daemon {

// loom.v1.ClusterService for a one-node cluster: the node is this daemon.
class ClusterServiceImpl final : public v1::ClusterService::Service {
 public:
  // `manager` must outlive the service.
  ClusterServiceImpl(std::string node_name, const JobManager* manager)
      : node_name_(std::move(node_name)), manager_(manager) {}

  // The address the daemon listens on, known once its port is bound. Thread-safe.
  void set_address(std::string address);

  grpc::Status ListNodes(grpc::ServerContext* context, const v1::ListNodesRequest* request,
                         v1::ListNodesResponse* response) override;

 private:
  const std::string node_name_;
  const JobManager* const manager_;
  mutable std::mutex mutex_;
  std::string address_;  // guarded by mutex_
};

}  // namespace loom::daemon

#endif  // LOOM_DAEMON_CLUSTER_SERVICE_H_
