#include "daemon/worker_job_service.h"

#include "absl/strings/str_cat.h"

namespace loom::daemon {

grpc::Status AskTheCoordinator(const std::string& coordinator_address) {
  return grpc::Status(
      grpc::StatusCode::FAILED_PRECONDITION,
      absl::StrCat("this loomd is a worker; ask its coordinator at ", coordinator_address,
                   " (--coordinator ", coordinator_address, ")"));
}

grpc::Status WorkerJobServiceImpl::SubmitJob(grpc::ServerContext*, const v1::SubmitJobRequest*,
                                             v1::SubmitJobResponse*) {
  return AskTheCoordinator(coordinator_address_);
}

grpc::Status WorkerJobServiceImpl::GetJob(grpc::ServerContext*, const v1::GetJobRequest*,
                                          v1::GetJobResponse*) {
  return AskTheCoordinator(coordinator_address_);
}

grpc::Status WorkerJobServiceImpl::ListJobs(grpc::ServerContext*, const v1::ListJobsRequest*,
                                            v1::ListJobsResponse*) {
  return AskTheCoordinator(coordinator_address_);
}

grpc::Status WorkerJobServiceImpl::CancelJob(grpc::ServerContext*, const v1::CancelJobRequest*,
                                             v1::CancelJobResponse*) {
  return AskTheCoordinator(coordinator_address_);
}

grpc::Status WorkerJobServiceImpl::WatchJob(grpc::ServerContext*, const v1::WatchJobRequest*,
                                            grpc::ServerWriter<v1::JobEvent>*) {
  return AskTheCoordinator(coordinator_address_);
}

grpc::Status WorkerJobServiceImpl::GetPlan(grpc::ServerContext*, const v1::GetPlanRequest*,
                                           v1::GetPlanResponse*) {
  return AskTheCoordinator(coordinator_address_);
}

grpc::Status WorkerJobServiceImpl::GetTrace(grpc::ServerContext*, const v1::GetTraceRequest*,
                                            v1::GetTraceResponse*) {
  return AskTheCoordinator(coordinator_address_);
}

}  // namespace loom::daemon
