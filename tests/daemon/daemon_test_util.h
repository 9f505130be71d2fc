#ifndef LOOM_TESTS_DAEMON_DAEMON_TEST_UTIL_H_
#define LOOM_TESTS_DAEMON_DAEMON_TEST_UTIL_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/daemon.h"
#include "daemon/daemon_options.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/byte_buffer.h"
#include "gtest/gtest.h"
#include "proto/job.pb.h"
#include "proto/loom/v1/cluster_service.grpc.pb.h"
#include "proto/loom/v1/job_service.grpc.pb.h"

namespace loom::daemon::testing {

// A training job: an MLP regression trained with SGD, data parallel over cpu:0 and cpu:1.
job::Job TrainingJob(int steps);
// A training job whose every step sleeps `microseconds` (a "sleep" op) on cpu:0 and cpu:1.
job::Job SlowJob(int steps, int64_t microseconds);
// A data-parallel training job on cpu:0 and cpu:1, two micro-batches per step, that also fetches
// two counts of a tensor of ones shaped like its [8, 4] input: `total` ([]: the partial sums of
// the two ranks, 16 per micro-batch once assembled) and `per_column` ([4]: 4 per micro-batch).
job::Job CountingJob(int steps, const std::string& total, const std::string& per_column);
// A data-parallel training job on cpu:0 and cpu:1 that also fetches a [64, 64] float32 tensor
// per step (two micro-batches): 8 KiB per device per step.
job::Job FetchingJob(int steps);
job::Job ParseJob(const std::string& text);
// A forward job, 'relu-chain', of `length` relu ops in a chain from a [4] input on `device`,
// fetching the last; with `name_bytes`, each op and tensor name is padded to that many characters.
// Its plan grows with both.
job::Job ReluChain(int length, const std::string& device, int name_bytes = 0);

// grpc.health.v1.HealthCheckResponse { status: SERVING } on the wire.
inline constexpr char kHealthServing[] = "\x08\x01";
// The Chrome trace's complete events ("ph":"X"): one per act.
int64_t CompleteEvents(const std::string& chrome_trace_json);

// A grpc.health.v1.HealthCheckRequest for `service` ("": the whole server) on the wire.
std::string HealthCheckRequest(const std::string& service);

// Options of a daemon for tests: 127.0.0.1 port 0, two CPU devices, no shutdown grace.
DaemonOptions TestOptions();

// A context whose call fails after `timeout` (every RPC of these tests has a deadline).
std::unique_ptr<grpc::ClientContext> ContextWithDeadline(
    absl::Duration timeout = absl::Seconds(10));

// A daemon in this process on a free port and stubs talking to it over gRPC.
class DaemonTest : public ::testing::Test {
 protected:
  void SetUp() override { StartDaemon(TestOptions()); }
  void TearDown() override;

  // Stops the daemon SetUp started (if any) and starts one with `options`.
  void StartDaemon(const DaemonOptions& options);

  // SubmitJob (with SubmitJobRequest's checkpoint_path and checkpoint_every_steps); the status is
  // returned, the response written to `response`.
  grpc::Status Submit(const job::Job& job, v1::SubmitJobResponse* response,
                      const std::string& checkpoint_path = "", int64_t checkpoint_every_steps = 0);
  // SubmitJob with `request`.
  grpc::Status SubmitRequest(const v1::SubmitJobRequest& request, v1::SubmitJobResponse* response);
  // SubmitJob that must succeed: the job's id.
  std::string SubmitOrDie(const job::Job& job);
  // The same with SubmitJobRequest.stream_fetches, with SubmitJobRequest.trace, and with `request`.
  std::string SubmitStreamingOrDie(const job::Job& job);
  std::string SubmitTracedOrDie(const job::Job& job);
  std::string SubmitRequestOrDie(const v1::SubmitJobRequest& request);
  grpc::Status GetJob(const std::string& job_id, v1::JobInfo* info);
  // WatchJob until the stream ends (or `timeout`): every event received. `status` gets the
  // stream's status when not null.
  std::vector<v1::JobEvent> WatchToEnd(const std::string& job_id,
                                       absl::Duration timeout = absl::Seconds(30),
                                       grpc::Status* status = nullptr);
  // Polls GetJob until the job is in `state` (true) or `timeout` passed (false).
  bool WaitForState(const std::string& job_id, v1::JobState state,
                    absl::Duration timeout = absl::Seconds(20));
  // The job's trace through the client library (ClusterClient::GetTrace, in parts), from a
  // client whose messages are limited to `max_message_bytes`.
  absl::StatusOr<v1::GetTraceResponse> TraceThroughClient(const std::string& job_id,
                                                          int max_message_bytes);
  // A unary call of `method` ("/package.Service/Method") with raw bytes as the request body.
  grpc::Status RawUnaryCall(const std::string& method, const std::string& request_bytes,
                            std::string* response_bytes);

  std::unique_ptr<Daemon> daemon_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::JobService::Stub> jobs_;
  std::unique_ptr<v1::ClusterService::Stub> cluster_;
};

// The states of the state-change events, in order.
std::vector<v1::JobState> StatesOf(const std::vector<v1::JobEvent>& events);
// The step events, in order.
std::vector<v1::StepEvent> StepsOf(const std::vector<v1::JobEvent>& events);

}  // namespace loom::daemon::testing

#endif  // LOOM_TESTS_DAEMON_DAEMON_TEST_UTIL_H_
