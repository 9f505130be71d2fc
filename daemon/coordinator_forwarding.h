#ifndef LOOM_DAEMON_COORDINATOR_FORWARDING_H_
#define LOOM_DAEMON_COORDINATOR_FORWARDING_H_

// What a worker loomd serves in place of the coordinator's JobService and ClusterService:
// WorkerJobServiceImpl and WorkerClusterServiceImpl forward each call, with its deadline and
// cancellation and the caller's identity and roles, to the coordinator over the channel
// CoordinatorChannel makes (the worker's TLS credentials, message limit and keepalive), so that a
// client may talk to any loomd of the cluster.

#include <memory>
#include <optional>
#include <string>

#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "grpcpp/support/status.h"
#include "proto/loom/v1/cluster_service.grpc.pb.h"
#include "proto/loom/v1/job_service.grpc.pb.h"
#include "rpc/tls.h"

namespace loom::daemon {

// A worker serves the calls only the coordinator can answer (loom.v1.JobService, ListNodes) by
// forwarding them to its coordinator, as etcd, Consul and Nomad followers forward to their leader:
// a client may talk to any loomd of the cluster. Each call goes on as the same call to the
// coordinator; its deadline, and a cancellation by the client (a watch left with Ctrl-C), reach it.
// The worker calls with its own (node) certificate and adds its caller's identity and roles
// (AddForwardedCaller, rpc/tls.h), which the coordinator trusts because the worker is a node: the
// coordinator authorizes the call as the original caller's.
// The coordinator's answer comes back as it is, status and message included, except that an
// UNAVAILABLE answer (the coordinator down, restarting or shutting down) also says that this
// worker forwarded it and where.

// The channel a worker forwards on: `coordinator_address` with the worker's TLS credentials
// (nullopt: plaintext) and message limit, and keepalive pings every `keepalive_interval` (a ping
// unanswered for `keepalive_timeout` closes the connection, which ends the calls on it: a watch
// forwarded for a quiet job notices a coordinator that vanished). Connects lazily (and again
// after a coordinator restart).
std::shared_ptr<grpc::Channel> CoordinatorChannel(const std::string& coordinator_address,
                                                  const std::optional<TlsCredentials>& tls,
                                                  int max_message_bytes,
                                                  absl::Duration keepalive_interval,
                                                  absl::Duration keepalive_timeout);

// loom.v1.JobService on a worker.
class WorkerJobServiceImpl final : public v1::JobService::Service {
 public:
  WorkerJobServiceImpl(std::shared_ptr<grpc::Channel> coordinator, std::string coordinator_address);

  grpc::Status SubmitJob(grpc::ServerContext* context, const v1::SubmitJobRequest* request,
                         v1::SubmitJobResponse* response) override;
  grpc::Status GetJob(grpc::ServerContext* context, const v1::GetJobRequest* request,
                      v1::GetJobResponse* response) override;
  grpc::Status ListJobs(grpc::ServerContext* context, const v1::ListJobsRequest* request,
                        v1::ListJobsResponse* response) override;
  grpc::Status CancelJob(grpc::ServerContext* context, const v1::CancelJobRequest* request,
                         v1::CancelJobResponse* response) override;
  grpc::Status WatchJob(grpc::ServerContext* context, const v1::WatchJobRequest* request,
                        grpc::ServerWriter<v1::JobEvent>* writer) override;
  grpc::Status GetPlan(grpc::ServerContext* context, const v1::GetPlanRequest* request,
                       v1::GetPlanResponse* response) override;
  grpc::Status GetTrace(grpc::ServerContext* context, const v1::GetTraceRequest* request,
                        v1::GetTraceResponse* response) override;

 private:
  std::unique_ptr<v1::JobService::Stub> coordinator_;
  const std::string coordinator_address_;
};

// loom.v1.ClusterService on a worker.
class WorkerClusterServiceImpl final : public v1::ClusterService::Service {
 public:
  WorkerClusterServiceImpl(std::shared_ptr<grpc::Channel> coordinator,
                           std::string coordinator_address);

  grpc::Status ListNodes(grpc::ServerContext* context, const v1::ListNodesRequest* request,
                         v1::ListNodesResponse* response) override;

 private:
  std::unique_ptr<v1::ClusterService::Stub> coordinator_;
  const std::string coordinator_address_;
};

}  // namespace loom::daemon

#endif  // LOOM_DAEMON_COORDINATOR_FORWARDING_H_
