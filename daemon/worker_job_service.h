#ifndef LOOM_DAEMON_WORKER_JOB_SERVICE_H_
#define LOOM_DAEMON_WORKER_JOB_SERVICE_H_

#include <string>

#include "grpcpp/support/status.h"
#include "proto/loom/v1/job_service.grpc.pb.h"

namespace loom::daemon {

// What a worker answers to the calls only the coordinator serves: FAILED_PRECONDITION naming the
// coordinator to ask instead.
grpc::Status AskTheCoordinator(const std::string& coordinator_address);

// loom.v1.JobService on a worker: every call answers AskTheCoordinator (not UNIMPLEMENTED, which
// would leave a client pointed at a worker guessing why).
class WorkerJobServiceImpl final : public v1::JobService::Service {
 public:
  explicit WorkerJobServiceImpl(std::string coordinator_address)
      : coordinator_address_(std::move(coordinator_address)) {}

  grpc::Status SubmitJob(grpc::ServerContext*, const v1::SubmitJobRequest*,
                         v1::SubmitJobResponse*) override;
  grpc::Status GetJob(grpc::ServerContext*, const v1::GetJobRequest*, v1::GetJobResponse*) override;
  grpc::Status ListJobs(grpc::ServerContext*, const v1::ListJobsRequest*,
                        v1::ListJobsResponse*) override;
  grpc::Status CancelJob(grpc::ServerContext*, const v1::CancelJobRequest*,
                         v1::CancelJobResponse*) override;
  grpc::Status WatchJob(grpc::ServerContext*, const v1::WatchJobRequest*,
                        grpc::ServerWriter<v1::JobEvent>*) override;
  grpc::Status GetPlan(grpc::ServerContext*, const v1::GetPlanRequest*,
                       v1::GetPlanResponse*) override;
  grpc::Status GetTrace(grpc::ServerContext*, const v1::GetTraceRequest*,
                        v1::GetTraceResponse*) override;

 private:
  const std::string coordinator_address_;
};

}  // namespace loom::daemon

#endif  // LOOM_DAEMON_WORKER_JOB_SERVICE_H_
