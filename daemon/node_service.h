#ifndef LOOM_DAEMON_NODE_SERVICE_H_
#define LOOM_DAEMON_NODE_SERVICE_H_

// The coordinator's loom.v1.NodeService: NodeServiceImpl serves each worker's Session stream (only
// for a node certificate, rpc/tls.h), registering the worker in the Cluster under its certificate's
// identity, passing its job updates to the JobManager and writing the commands the Cluster sends
// it.

#include "daemon/cluster.h"
#include "daemon/job_manager.h"
#include "proto/loom/v1/node_service.grpc.pb.h"

namespace loom::daemon {

// The coordinator's end of the workers' sessions (proto/loom/v1/node_service.proto): registers the
// worker in the Cluster, hands its job updates to the JobManager, and writes the commands the
// Cluster sends it. When the stream ends the node is lost.
class NodeServiceImpl final : public v1::NodeService::Service {
 public:
  NodeServiceImpl(Cluster* cluster, JobManager* jobs) : cluster_(cluster), jobs_(jobs) {}

  grpc::Status Session(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::CoordinatorMessage, v1::WorkerMessage>* stream) override;

 private:
  Cluster* const cluster_;
  JobManager* const jobs_;
};

}  // namespace loom::daemon

#endif  // LOOM_DAEMON_NODE_SERVICE_H_
