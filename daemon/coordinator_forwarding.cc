#include "daemon/coordinator_forwarding.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/support/channel_arguments.h"
#include "rpc/grpc_durations.h"

namespace loom::daemon {
namespace {

// The coordinator's answer to a forwarded call, for the worker's client.
grpc::Status Answer(const grpc::Status& status, const std::string& coordinator_address) {
  if (status.error_code() != grpc::StatusCode::UNAVAILABLE) return status;
  return grpc::Status(status.error_code(),
                      absl::StrCat(status.error_message(),
                                   " (this loomd is a worker: it forwarded the call to its ",
                                   "coordinator at ", coordinator_address, ")"));
}

// Calls `call` with a client context that carries the server call's deadline and cancellation,
// and its caller (identity and roles, which the coordinator trusts from a node certificate: this
// worker's own).
template <typename Call>
grpc::Status Forward(grpc::ServerContext* context, const std::string& coordinator_address,
                     Call call) {
  std::unique_ptr<grpc::ClientContext> forwarded = grpc::ClientContext::FromServerContext(*context);
  AddForwardedCaller(CallerOf(*context), forwarded.get());
  return Answer(call(forwarded.get()), coordinator_address);
}

// Forwards a unary call: `method` of the coordinator's `stub`, with `request`, into `response`.
template <typename Stub, typename Request, typename Response>
grpc::Status ForwardUnary(grpc::ServerContext* context, const std::string& coordinator_address,
                          Stub& stub,
                          grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&,
                                                       Response*),
                          const Request& request, Response* response) {
  return Forward(context, coordinator_address, [&](grpc::ClientContext* forwarded) {
    return (stub.*method)(forwarded, request, response);
  });
}

}  // namespace

std::shared_ptr<grpc::Channel> CoordinatorChannel(const std::string& coordinator_address,
                                                  const std::optional<TlsCredentials>& tls,
                                                  int max_message_bytes,
                                                  absl::Duration keepalive_interval,
                                                  absl::Duration keepalive_timeout) {
  grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(max_message_bytes);
  arguments.SetMaxSendMessageSize(max_message_bytes);
  // As the worker's session (the coordinator's server accepts pings at any rate).
  arguments.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, GrpcMilliseconds(keepalive_interval));
  arguments.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, GrpcMilliseconds(keepalive_timeout));
  arguments.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  return grpc::CreateCustomChannel(coordinator_address, MakeChannelCredentials(tls), arguments);
}

WorkerJobServiceImpl::WorkerJobServiceImpl(std::shared_ptr<grpc::Channel> coordinator,
                                           std::string coordinator_address)
    : coordinator_(v1::JobService::NewStub(std::move(coordinator))),
      coordinator_address_(std::move(coordinator_address)) {}

grpc::Status WorkerJobServiceImpl::SubmitJob(grpc::ServerContext* context,
                                             const v1::SubmitJobRequest* request,
                                             v1::SubmitJobResponse* response) {
  return ForwardUnary(context, coordinator_address_, *coordinator_,
                      &v1::JobService::Stub::SubmitJob, *request, response);
}

grpc::Status WorkerJobServiceImpl::GetJob(grpc::ServerContext* context,
                                          const v1::GetJobRequest* request,
                                          v1::GetJobResponse* response) {
  return ForwardUnary(context, coordinator_address_, *coordinator_, &v1::JobService::Stub::GetJob,
                      *request, response);
}

grpc::Status WorkerJobServiceImpl::ListJobs(grpc::ServerContext* context,
                                            const v1::ListJobsRequest* request,
                                            v1::ListJobsResponse* response) {
  return ForwardUnary(context, coordinator_address_, *coordinator_, &v1::JobService::Stub::ListJobs,
                      *request, response);
}

grpc::Status WorkerJobServiceImpl::CancelJob(grpc::ServerContext* context,
                                             const v1::CancelJobRequest* request,
                                             v1::CancelJobResponse* response) {
  return ForwardUnary(context, coordinator_address_, *coordinator_,
                      &v1::JobService::Stub::CancelJob, *request, response);
}

grpc::Status WorkerJobServiceImpl::WatchJob(grpc::ServerContext* context,
                                            const v1::WatchJobRequest* request,
                                            grpc::ServerWriter<v1::JobEvent>* writer) {
  return Forward(context, coordinator_address_, [&](grpc::ClientContext* forwarded) {
    std::unique_ptr<grpc::ClientReader<v1::JobEvent>> events =
        coordinator_->WatchJob(forwarded, *request);
    v1::JobEvent event;
    while (events->Read(&event)) {
      // The client is gone: end the coordinator's stream too (Finish would wait for its end).
      if (!writer->Write(event)) forwarded->TryCancel();
    }
    return events->Finish();
  });
}

grpc::Status WorkerJobServiceImpl::GetPlan(grpc::ServerContext* context,
                                           const v1::GetPlanRequest* request,
                                           v1::GetPlanResponse* response) {
  return ForwardUnary(context, coordinator_address_, *coordinator_, &v1::JobService::Stub::GetPlan,
                      *request, response);
}

grpc::Status WorkerJobServiceImpl::GetTrace(grpc::ServerContext* context,
                                            const v1::GetTraceRequest* request,
                                            v1::GetTraceResponse* response) {
  return ForwardUnary(context, coordinator_address_, *coordinator_, &v1::JobService::Stub::GetTrace,
                      *request, response);
}

WorkerClusterServiceImpl::WorkerClusterServiceImpl(std::shared_ptr<grpc::Channel> coordinator,
                                                   std::string coordinator_address)
    : coordinator_(v1::ClusterService::NewStub(std::move(coordinator))),
      coordinator_address_(std::move(coordinator_address)) {}

grpc::Status WorkerClusterServiceImpl::ListNodes(grpc::ServerContext* context,
                                                 const v1::ListNodesRequest* request,
                                                 v1::ListNodesResponse* response) {
  return ForwardUnary(context, coordinator_address_, *coordinator_,
                      &v1::ClusterService::Stub::ListNodes, *request, response);
}

}  // namespace loom::daemon
