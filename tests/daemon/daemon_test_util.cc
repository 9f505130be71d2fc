#include "tests/daemon/daemon_test_util.h"

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "client/cluster_client.h"
#include "client/raw_unary_call.h"
#include "google/protobuf/text_format.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

namespace loom::daemon::testing {
namespace {

// y = x @ w, data parallel over cpu:0 and cpu:1, trained with SGD on a loss named "loss" that
// the jobs below add (with their name and whatever else they need).
constexpr char kMatmulJob[] = R"pb(
  placement { devices: [ "cpu:0", "cpu:1" ] }
  optimizer { sgd { learning_rate: 0.01 } }
  loss: "loss"
  inputs {
    name: "x"
    shape: [ 8, 4 ]
    sbp: "S(0)"
    random_normal { std: 1 seed: 1 }
  }
  variables {
    name: "w"
    shape: [ 4, 2 ]
    initializer { normal { std: 0.5 seed: 2 } }
  }
  ops {
    name: "y"
    type: "matmul"
    inputs: [ "x", "w" ]
    outputs: "y"
  }
)pb";

constexpr char kSlowOps[] = R"pb(
  name: "slow"
  ops { name: "slept" type: "sleep" inputs: "y" outputs: "slept" }
  ops { name: "loss" type: "reduce_mean" inputs: "slept" outputs: "loss" }
)pb";

constexpr char kFetchingOps[] = R"pb(
  name: "fetching"
  num_micro_batches: 2
  fetch: "twice"
  inputs {
    name: "z"
    shape: [ 64, 64 ]
    sbp: "S(0)"
    random_normal { std: 1 seed: 3 }
  }
  ops { name: "loss" type: "reduce_mean" inputs: "y" outputs: "loss" }
  ops {
    name: "twice"
    type: "add"
    inputs: [ "z", "z" ]
    outputs: "twice"
  }
)pb";

// $TOTAL and $PER_COLUMN are CountingJob's names.
constexpr char kCountingOps[] = R"pb(
  name: "counting"
  num_micro_batches: 2
  fetch: [ "$TOTAL", "$PER_COLUMN" ]
  ops { name: "loss" type: "reduce_mean" inputs: "y" outputs: "loss" }
  ops { name: "ones" type: "ones_like" inputs: "x" outputs: "ones" }
  ops { name: "$TOTAL" type: "reduce_sum" inputs: "ones" outputs: "$TOTAL" }
  ops {
    name: "$PER_COLUMN"
    type: "reduce_sum"
    inputs: "ones"
    outputs: "$PER_COLUMN"
    attributes {
      key: "axes"
      value { int_list { values: 0 } }
    }
  }
)pb";

}  // namespace

job::Job ParseJob(const std::string& text) {
  job::Job job;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &job)) << text;
  return job;
}

job::Job TrainingJob(int steps) {
  std::ifstream file(LOOM_SOURCE_DIR "/examples/jobs/mlp_regression.pbtxt");
  std::stringstream text;
  text << file.rdbuf();
  job::Job job = ParseJob(text.str());
  job.set_num_steps(steps);
  return job;
}

job::Job SlowJob(int steps, int64_t microseconds) {
  job::Job job = ParseJob(absl::StrCat(kMatmulJob, kSlowOps));
  job.set_num_steps(steps);
  for (job::Op& op : *job.mutable_ops()) {
    if (op.type() == "sleep")
      (*op.mutable_attributes())["microseconds"].set_int_value(microseconds);
  }
  return job;
}

job::Job CountingJob(int steps, const std::string& total, const std::string& per_column) {
  job::Job job = ParseJob(absl::StrCat(
      kMatmulJob,
      absl::StrReplaceAll(kCountingOps, {{"$TOTAL", total}, {"$PER_COLUMN", per_column}})));
  job.set_num_steps(steps);
  return job;
}

job::Job FetchingJob(int steps) {
  job::Job job = ParseJob(absl::StrCat(kMatmulJob, kFetchingOps));
  job.set_num_steps(steps);
  return job;
}

job::Job ReluChain(int length, const std::string& device, int name_bytes) {
  job::Job job = ParseJob(R"pb(name: "relu-chain"
                               inputs {
                                 name: "x"
                                 shape: [ 4 ]
                                 random_normal { std: 1 }
                               })pb");
  job.mutable_placement()->add_devices(device);
  auto name = [&](const char* prefix, int index) {
    std::string name = absl::StrCat(prefix, index);
    if (static_cast<int>(name.size()) < name_bytes) name.insert(0, name_bytes - name.size(), '_');
    return name;
  };
  std::string previous = "x";
  for (int index = 0; index < length; ++index) {
    job::Op* op = job.add_ops();
    op->set_name(name("relu", index));
    op->set_type("relu");
    op->add_inputs(previous);
    previous = name("y", index);
    op->add_outputs(previous);
  }
  job.add_fetch(previous);
  return job;
}

std::string HealthCheckRequest(const std::string& service) {
  if (service.empty()) return "";
  return std::string("\x0a") + static_cast<char>(service.size()) + service;
}

int64_t CompleteEvents(const std::string& chrome_trace_json) {
  int64_t events = 0;
  for (size_t at = chrome_trace_json.find("\"ph\":\"X\""); at != std::string::npos;
       at = chrome_trace_json.find("\"ph\":\"X\"", at + 1)) {
    ++events;
  }
  return events;
}

DaemonOptions TestOptions() {
  DaemonOptions options;
  options.listen_address = "127.0.0.1:0";
  options.node_name = "test-node";
  options.devices = {plan::CPU, {0, 1}};
  options.shutdown_grace = absl::ZeroDuration();
  // Jobs of the tests read and write their files beneath the test's temporary directory (and
  // the GPT's default training text, the GPL's, tools/loom-gpt/gpt_model.h).
  options.data_roots = {::testing::TempDir(), "/usr/share/common-licenses"};
  options.checkpoint_roots = {::testing::TempDir()};
  return options;
}

std::unique_ptr<grpc::ClientContext> ContextWithDeadline(absl::Duration timeout) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + absl::ToChronoNanoseconds(timeout));
  return context;
}

void DaemonTest::TearDown() {
  jobs_.reset();
  cluster_.reset();
  channel_.reset();
  if (daemon_ != nullptr) daemon_->Shutdown(absl::ZeroDuration());
  daemon_.reset();
}

void DaemonTest::StartDaemon(const DaemonOptions& options) {
  TearDown();
  absl::StatusOr<std::unique_ptr<Daemon>> daemon = Daemon::Start(options);
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  daemon_ = std::move(*daemon);
  ASSERT_GT(daemon_->port(), 0);
  channel_ = grpc::CreateChannel(daemon_->address(), grpc::InsecureChannelCredentials());
  jobs_ = v1::JobService::NewStub(channel_);
  cluster_ = v1::ClusterService::NewStub(channel_);
}

grpc::Status DaemonTest::Submit(const job::Job& job, v1::SubmitJobResponse* response,
                                const std::string& checkpoint_path,
                                int64_t checkpoint_every_steps) {
  v1::SubmitJobRequest request;
  *request.mutable_job() = job;
  request.set_checkpoint_path(checkpoint_path);
  request.set_checkpoint_every_steps(checkpoint_every_steps);
  return SubmitRequest(request, response);
}

grpc::Status DaemonTest::SubmitRequest(const v1::SubmitJobRequest& request,
                                       v1::SubmitJobResponse* response) {
  return jobs_->SubmitJob(ContextWithDeadline().get(), request, response);
}

std::string DaemonTest::SubmitOrDie(const job::Job& job) {
  v1::SubmitJobResponse response;
  grpc::Status status = Submit(job, &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return response.job().job_id();
}

std::string DaemonTest::SubmitStreamingOrDie(const job::Job& job) {
  v1::SubmitJobRequest request;
  *request.mutable_job() = job;
  request.set_stream_fetches(true);
  return SubmitRequestOrDie(request);
}

std::string DaemonTest::SubmitTracedOrDie(const job::Job& job) {
  v1::SubmitJobRequest request;
  *request.mutable_job() = job;
  request.set_trace(true);
  return SubmitRequestOrDie(request);
}

std::string DaemonTest::SubmitRequestOrDie(const v1::SubmitJobRequest& request) {
  v1::SubmitJobResponse response;
  grpc::Status status = SubmitRequest(request, &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return response.job().job_id();
}

grpc::Status DaemonTest::GetJob(const std::string& job_id, v1::JobInfo* info) {
  v1::GetJobRequest request;
  request.set_job_id(job_id);
  v1::GetJobResponse response;
  grpc::Status status = jobs_->GetJob(ContextWithDeadline().get(), request, &response);
  *info = response.job();
  return status;
}

std::vector<v1::JobEvent> DaemonTest::WatchToEnd(const std::string& job_id, absl::Duration timeout,
                                                 grpc::Status* status) {
  v1::WatchJobRequest request;
  request.set_job_id(job_id);
  std::unique_ptr<grpc::ClientContext> context = ContextWithDeadline(timeout);
  std::unique_ptr<grpc::ClientReader<v1::JobEvent>> reader =
      jobs_->WatchJob(context.get(), request);
  std::vector<v1::JobEvent> events;
  v1::JobEvent event;
  while (reader->Read(&event)) events.push_back(event);
  grpc::Status finished = reader->Finish();
  if (status != nullptr) *status = finished;
  return events;
}

bool DaemonTest::WaitForState(const std::string& job_id, v1::JobState state,
                              absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    v1::JobInfo info;
    if (GetJob(job_id, &info).ok() && info.state() == state) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

absl::StatusOr<v1::GetTraceResponse> DaemonTest::TraceThroughClient(const std::string& job_id,
                                                                    int max_message_bytes) {
  ClusterClientOptions options;
  options.max_message_bytes = max_message_bytes;
  absl::StatusOr<std::unique_ptr<ClusterClient>> client =
      ClusterClient::Connect(daemon_->address(), options);
  if (!client.ok()) return client.status();
  return (*client)->GetTrace(job_id);
}

grpc::Status DaemonTest::RawUnaryCall(const std::string& method, const std::string& request_bytes,
                                      std::string* response_bytes) {
  std::unique_ptr<grpc::ClientContext> context = ContextWithDeadline();
  grpc::Status status =
      loom::RawUnaryCall(channel_, context.get(), method, request_bytes, response_bytes);
  return status;
}

std::vector<v1::JobState> StatesOf(const std::vector<v1::JobEvent>& events) {
  std::vector<v1::JobState> states;
  for (const v1::JobEvent& event : events) {
    if (event.has_state_change()) states.push_back(event.state_change().state());
  }
  return states;
}

std::vector<v1::StepEvent> StepsOf(const std::vector<v1::JobEvent>& events) {
  std::vector<v1::StepEvent> steps;
  for (const v1::JobEvent& event : events) {
    if (event.has_step()) steps.push_back(event.step());
  }
  return steps;
}

}  // namespace loom::daemon::testing
