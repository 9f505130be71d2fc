#include "tests/cluster/loomd_client.h"

#include "absl/time/clock.h"
#include "client/raw_unary_call.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

namespace loom::testing {

LoomdClient::LoomdClient(const std::string& address)
    : channel_(grpc::CreateChannel(address, grpc::InsecureChannelCredentials())),
      jobs_(v1::JobService::NewStub(channel_)),
      cluster_(v1::ClusterService::NewStub(channel_)) {}

std::unique_ptr<grpc::ClientContext> LoomdClient::Context(absl::Duration timeout) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  return context;
}

std::vector<v1::NodeInfo> LoomdClient::Nodes() {
  v1::ListNodesResponse response;
  if (!cluster_->ListNodes(Context().get(), v1::ListNodesRequest(), &response).ok()) return {};
  return {response.nodes().begin(), response.nodes().end()};
}

bool LoomdClient::WaitForReadyNodes(int count, absl::Duration deadline) {
  const absl::Time end = absl::Now() + deadline;
  while (absl::Now() < end) {
    int ready = 0;
    for (const v1::NodeInfo& node : Nodes()) ready += node.state() == v1::NODE_STATE_READY;
    if (ready == count) return true;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return false;
}

absl::StatusOr<std::string> LoomdClient::Submit(const job::Job& job,
                                                const std::string& checkpoint_path,
                                                int64_t checkpoint_every_steps,
                                                bool stream_fetches) {
  v1::SubmitJobRequest request;
  *request.mutable_job() = job;
  request.set_checkpoint_path(checkpoint_path);
  request.set_checkpoint_every_steps(checkpoint_every_steps);
  request.set_stream_fetches(stream_fetches);
  v1::SubmitJobResponse response;
  grpc::Status status = jobs_->SubmitJob(Context().get(), request, &response);
  if (!status.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
  }
  return response.job().job_id();
}

v1::JobInfo LoomdClient::Get(const std::string& id) {
  v1::GetJobRequest request;
  request.set_job_id(id);
  v1::GetJobResponse response;
  jobs_->GetJob(Context().get(), request, &response);
  return response.job();
}

std::vector<v1::JobInfo> LoomdClient::List() {
  v1::ListJobsResponse response;
  if (!jobs_->ListJobs(Context().get(), v1::ListJobsRequest(), &response).ok()) return {};
  return {response.jobs().begin(), response.jobs().end()};
}

grpc::Status LoomdClient::Cancel(const std::string& id) {
  v1::CancelJobRequest request;
  request.set_job_id(id);
  request.set_reason("the test is done with it");
  v1::CancelJobResponse response;
  return jobs_->CancelJob(Context().get(), request, &response);
}

JobOutcome LoomdClient::Watch(const std::string& id, absl::Duration timeout,
                              const std::function<void(const v1::JobEvent&)>& on_event) {
  v1::WatchJobRequest request;
  request.set_job_id(id);
  auto context = Context(timeout);
  auto reader = jobs_->WatchJob(context.get(), request);
  JobOutcome outcome;
  v1::JobEvent event;
  while (reader->Read(&event)) {
    if (on_event) on_event(event);
    if (event.has_step()) outcome.losses.push_back(event.step().loss());
    if (event.has_checkpoint()) outcome.checkpoints.push_back(event.checkpoint().step());
    if (event.has_fetched()) outcome.fetched.push_back(event.fetched());
    if (event.has_state_change()) {
      outcome.state = event.state_change().state();
      outcome.states.push_back(outcome.state);
      outcome.error = event.state_change().error().message();
    }
  }
  grpc::Status status = reader->Finish();
  if (!status.ok() && outcome.error.empty()) outcome.error = status.error_message();
  return outcome;
}

JobOutcome LoomdClient::Run(const job::Job& job, const std::string& checkpoint_path,
                            bool stream_fetches) {
  absl::StatusOr<std::string> id = Submit(job, checkpoint_path, 0, stream_fetches);
  if (!id.ok()) {
    JobOutcome outcome;
    outcome.error = id.status().ToString();
    return outcome;
  }
  return Watch(*id);
}

bool LoomdClient::Serving() {
  std::string response;
  grpc::Status status = RawUnaryCall(channel_, Context(absl::Seconds(10)).get(),
                                     "/grpc.health.v1.Health/Check", "", &response);
  // grpc.health.v1.HealthCheckResponse { status: SERVING } on the wire.
  return status.ok() && response == std::string("\x08\x01");
}

gpt::GptConfig SmallGpt(int64_t steps) {
  gpt::GptConfig config;
  config.context = 16;
  config.width = 32;
  config.layers = 3;
  config.heads = 2;
  config.mlp_width = 64;
  config.batch = 12;
  config.steps = steps;
  return config;
}

}  // namespace loom::testing
