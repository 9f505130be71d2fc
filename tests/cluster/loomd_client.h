#ifndef LOOM_TESTS_CLUSTER_LOOMD_CLIENT_H_
#define LOOM_TESTS_CLUSTER_LOOMD_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "proto/loom/v1/cluster_service.grpc.pb.h"
#include "proto/loom/v1/job_service.grpc.pb.h"
#include "tools/loom-gpt/gpt_model.h"

namespace loom::testing {

// How a job ended, as its watcher saw it.
struct JobOutcome {
  v1::JobState state = v1::JOB_STATE_UNSPECIFIED;
  // Every state the job went through, in order.
  std::vector<v1::JobState> states;
  std::vector<double> losses;
  // The steps of the checkpoints saved (JobEvent.checkpoint), in order.
  std::vector<int64_t> checkpoints;
  // The fetched tensors (JobEvent.fetched), in the order received.
  std::vector<v1::FetchedTensor> fetched;
  std::string error;
};

// The loom.v1 API of one loomd, for the cluster tests. Every call has a deadline.
class LoomdClient {
 public:
  explicit LoomdClient(const std::string& address);

  static std::unique_ptr<grpc::ClientContext> Context(absl::Duration timeout = absl::Seconds(30));

  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }
  // ListNodes; empty when the call fails.
  std::vector<v1::NodeInfo> Nodes();
  // Whether `count` nodes are READY within `deadline`.
  bool WaitForReadyNodes(int count, absl::Duration deadline);
  // `checkpoint_path`, `checkpoint_every_steps`, `stream_fetches`: SubmitJobRequest's.
  absl::StatusOr<std::string> Submit(const job::Job& job, const std::string& checkpoint_path = "",
                                     int64_t checkpoint_every_steps = 0,
                                     bool stream_fetches = false);
  v1::JobInfo Get(const std::string& id);
  std::vector<v1::JobInfo> List();
  grpc::Status Cancel(const std::string& id);
  // Watches the job until it ends (at most `timeout`), handing every event to `on_event` too.
  JobOutcome Watch(const std::string& id, absl::Duration timeout = absl::Minutes(5),
                   const std::function<void(const v1::JobEvent&)>& on_event = nullptr);
  // Submit and Watch.
  JobOutcome Run(const job::Job& job, const std::string& checkpoint_path = "",
                 bool stream_fetches = false);
  // grpc.health.v1.Health/Check for the whole server: SERVING.
  bool Serving();

 private:
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::JobService::Stub> jobs_;
  std::unique_ptr<v1::ClusterService::Stub> cluster_;
};

// A GPT small enough for 2 shared cores (the cluster tests' model).
gpt::GptConfig SmallGpt(int64_t steps);

}  // namespace loom::testing

#endif  // LOOM_TESTS_CLUSTER_LOOMD_CLIENT_H_
