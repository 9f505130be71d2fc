#ifndef LOOM_DAEMON_JOB_SERVICE_H_
#define LOOM_DAEMON_JOB_SERVICE_H_

// The coordinator's loom.v1.JobService: JobServiceImpl checks each caller's role (a client acts on
// its own jobs, an admin on all: rpc/tls.h), turns each call into a JobManager call, bounds the
// WatchJob streams open at once (--max-watches) and cuts GetTrace's parts to the message limit. At
// shutdown the Daemon waits for its open watches to end (WaitForWatchesToEnd).

#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "absl/time/time.h"
#include "daemon/job_manager.h"
#include "proto/loom/v1/job_service.grpc.pb.h"

namespace loom::daemon {

// loom.v1.JobService over a JobManager (see proto/loom/v1/job_service.proto for what each call
// does and its status codes).
class JobServiceImpl final : public v1::JobService::Service {
 public:
  // `manager` must outlive the service. At most `max_watches` WatchJob streams are open at once
  // (each holds a server thread while it waits); more are RESOURCE_EXHAUSTED. The server sends
  // messages of at most `max_message_bytes` (GetTrace's parts are cut to fit).
  explicit JobServiceImpl(JobManager* manager, int max_watches = 1000,
                          int64_t max_message_bytes = 64 << 20)
      : manager_(manager), max_watches_(max_watches), max_message_bytes_(max_message_bytes) {}

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

  // At shutdown, once every job has ended: waits up to `timeout` for the WatchJob streams still
  // open to send their jobs' last events and end. False when some are left.
  bool WaitForWatchesToEnd(absl::Duration timeout);

 private:
  JobManager* const manager_;
  const int max_watches_;
  const int64_t max_message_bytes_;

  std::mutex mutex_;
  std::condition_variable watch_ended_;
  int watches_ = 0;  // guarded by mutex_: WatchJob calls running
};

}  // namespace loom::daemon

#endif  // LOOM_DAEMON_JOB_SERVICE_H_
