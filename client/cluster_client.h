#ifndef LOOM_CLIENT_CLUSTER_CLIENT_H_
#define LOOM_CLIENT_CLUSTER_CLIENT_H_

// ClusterClient, the C++ client of a running Loom cluster: the loom.v1 JobService and
// ClusterService calls on the coordinator's loomd (submit, get, list, cancel and watch jobs; plans,
// traces, nodes, health), each with a deadline. Its options (ClusterClientOptions,
// SubmitJobOptions, WatchOptions with WatchCancellation), and names of job and node states.
// loomctl's cluster commands and the benchmarks' local clusters connect with it.

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "proto/job.pb.h"
#include "proto/loom/v1/cluster_service.grpc.pb.h"
#include "proto/loom/v1/job_service.grpc.pb.h"
#include "rpc/tls.h"

namespace loom {

// How a ClusterClient talks to the coordinator.
struct ClusterClientOptions {
  // How long Connect waits for the daemon to answer.
  absl::Duration connect_timeout = absl::Seconds(5);
  // The deadline of every unary call (SubmitJob compiles the job, CancelJob waits for the job to
  // end: both may take a while).
  absl::Duration call_timeout = absl::Seconds(60);
  // The largest message sent or received; loomd's --max-message-size (64 MiB by default).
  int max_message_bytes = 64 << 20;
  // Mutual TLS (rpc/tls.h), for a daemon started with --tls-ca/--tls-cert/--tls-key; the
  // daemon's certificate must name the host of the address. nullopt: plaintext.
  std::optional<TlsCredentials> tls;
  // gRPC keepalive: a ping every `keepalive_interval` while a call is open, and a ping left
  // unanswered for `keepalive_timeout` ends the connection, so a WatchJob whose coordinator's
  // host vanished, or that stopped answering, ends with UNAVAILABLE within their sum (TCP alone
  // would retransmit for many minutes). loomd accepts pings at any rate.
  absl::Duration keepalive_interval = absl::Seconds(30);
  absl::Duration keepalive_timeout = absl::Seconds(20);
  // ListJobs asks for pages of this many jobs (a long history is never one large message).
  int list_page_size = 100;
};

// SubmitJobRequest's fields besides the job.
struct SubmitJobOptions {
  // Every node records every act, for GetTrace once the job ended.
  bool trace = false;
  // With trace: only the acts of these steps (1-based, both included); unset: of every step.
  std::optional<v1::StepRange> trace_steps;
  // When the job succeeds, its variables are saved to this safetensors file: an absolute path
  // whose directory the coordinator and every node of the job reach (SubmitJobRequest).
  std::string checkpoint_path;
  // With checkpoint_path: also save every this many steps while the job runs (0: only at the end).
  int64_t checkpoint_every_steps = 0;
  // With checkpoint_path: the job may replace a file it did not write there
  // (SubmitJobRequest.overwrite_checkpoint).
  bool overwrite_checkpoint = false;
  // The job's fetched tensors come to its watchers as JobEvent.fetched (SubmitJobRequest).
  bool stream_fetches = false;
};

// Stops a WatchJob from another thread. One per watch; thread-safe.
class WatchCancellation {
 public:
  // WatchJob returns CANCELLED soon after, also when called before the watch began.
  void Cancel();
  bool cancelled() const;

 private:
  friend class ClusterClient;
  // Called by WatchJob around the call: the context to cancel (null when none is running).
  // Returns false when Cancel was already called.
  bool Attach(grpc::ClientContext* context);

  mutable std::mutex mutex_;
  grpc::ClientContext* context_ = nullptr;
  bool cancelled_ = false;
};

// What WatchJob does besides calling back.
struct WatchOptions {
  // The whole watch's deadline. Infinite by default: a training job may run for days; a daemon
  // that dies ends the stream (UNAVAILABLE), and keepalive pings find a lost peer.
  absl::Duration timeout = absl::InfiniteDuration();
  // Not null: lets another thread stop the watch.
  WatchCancellation* cancellation = nullptr;
};

// A client of a Loom cluster: loom.v1 JobService and ClusterService on the coordinator's loomd.
// Every call has a deadline and returns the server's status code and message (gRPC's codes are
// absl's); failures of the connection itself (UNAVAILABLE, DEADLINE_EXCEEDED) name the address
// and the call. Thread-safe: calls may run concurrently.
//
//   absl::StatusOr<std::unique_ptr<ClusterClient>> client =
//       ClusterClient::Connect("127.0.0.1:7070");
//   absl::StatusOr<v1::JobInfo> job = (*client)->SubmitJob(my_job);
//   absl::Status watched = (*client)->WatchJob(job->job_id(), [](const v1::JobEvent& event) {
//     if (event.has_step()) std::cout << event.step().loss() << "\n";
//   });
class ClusterClient {
 public:
  // Opens a channel to `address` (HOST:PORT) and waits up to options.connect_timeout for it to
  // connect. UNAVAILABLE naming the address when no daemon answers there.
  static absl::StatusOr<std::unique_ptr<ClusterClient>> Connect(
      const std::string& address, const ClusterClientOptions& options = {});

  // Validates, compiles and queues the job; its JobInfo (PENDING, with its id). INVALID_ARGUMENT
  // naming the op for a job the compiler rejects; RESOURCE_EXHAUSTED when it needs more devices
  // or memory than the cluster has.
  absl::StatusOr<v1::JobInfo> SubmitJob(const job::Job& job, const SubmitJobOptions& options = {});
  // NOT_FOUND for an unknown id.
  absl::StatusOr<v1::JobInfo> GetJob(const std::string& job_id);
  // Oldest first; only jobs in `states` unless it is empty. Asks for pages of
  // options.list_page_size jobs until the last.
  absl::StatusOr<std::vector<v1::JobInfo>> ListJobs(const std::vector<v1::JobState>& states = {});
  // Returns once the job has ended (CANCELLED). FAILED_PRECONDITION for a job that already
  // succeeded or failed; NOT_FOUND for an unknown id.
  absl::StatusOr<v1::JobInfo> CancelJob(const std::string& job_id, const std::string& reason = "");
  // Calls `on_event` for every event of the job (first the ones the daemon still holds, then live
  // ones) on the calling thread; returns OK when the stream ends after the job's terminal event.
  // CANCELLED when options.cancellation was cancelled; DEADLINE_EXCEEDED after options.timeout;
  // NOT_FOUND for an unknown id.
  absl::Status WatchJob(const std::string& job_id,
                        const std::function<void(const v1::JobEvent&)>& on_event,
                        const WatchOptions& options = {});
  // The compiled plan, whole and per node; or with `node` only that node's (in node_plans), as
  // a job of hundreds of devices has a whole plan larger than a message.
  absl::StatusOr<v1::GetPlanResponse> GetPlan(const std::string& job_id,
                                              std::optional<int> node = std::nullopt);
  // The Chrome trace of an ended job submitted with `trace`, asked for in parts (a trace may be
  // larger than a message) and returned whole.
  absl::StatusOr<v1::GetTraceResponse> GetTrace(const std::string& job_id);
  // Every node, the coordinator first.
  absl::StatusOr<std::vector<v1::NodeInfo>> ListNodes();
  // The standard grpc.health.v1 health of `service` ("" for the whole daemon): OK when SERVING,
  // UNAVAILABLE saying the state otherwise.
  absl::Status CheckHealth(const std::string& service = "");
  // Polls until the coordinator's health is SERVING and ListNodes shows at least
  // `expected_nodes` nodes, all READY. DEADLINE_EXCEEDED at `deadline`, saying what was seen last
  // (the health, or which nodes were missing or not ready).
  absl::Status WaitUntilReady(int expected_nodes, absl::Time deadline);

  const std::string& address() const { return address_; }

 private:
  ClusterClient(std::string address, ClusterClientOptions options,
                std::shared_ptr<grpc::Channel> channel);

  // A context with the call deadline.
  std::unique_ptr<grpc::ClientContext> CallContext(absl::Duration timeout) const;
  // The status of a finished call as absl::Status: the server's code and message; for failures of
  // the connection, with the address and the call named.
  absl::Status FromGrpc(const grpc::Status& status, const std::string& call) const;

  std::string address_;
  ClusterClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::JobService::Stub> jobs_;
  std::unique_ptr<v1::ClusterService::Stub> cluster_;
};

// "RUNNING" for JOB_STATE_RUNNING; "UNSPECIFIED" for 0.
std::string JobStateName(v1::JobState state);
// Accepts "running", "RUNNING" or "JOB_STATE_RUNNING". INVALID_ARGUMENT listing the states
// otherwise.
absl::StatusOr<v1::JobState> ParseJobState(const std::string& text);
// "READY" for NODE_STATE_READY.
std::string NodeStateName(v1::NodeState state);
// Whether the job has ended (SUCCEEDED, FAILED or CANCELLED).
bool IsTerminal(v1::JobState state);

}  // namespace loom

#endif  // LOOM_CLIENT_CLUSTER_CLIENT_H_
