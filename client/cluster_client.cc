#include "client/cluster_client.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/raw_unary_call.h"
#include "glog/logging.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/channel_arguments.h"
#include "rpc/grpc_durations.h"
#include "rpc/grpc_status.h"
#include "rpc/message_payload.h"

namespace loom {
namespace {

constexpr char kJobStatePrefix[] = "JOB_STATE_";
constexpr char kNodeStatePrefix[] = "NODE_STATE_";

std::chrono::system_clock::time_point ToDeadline(absl::Duration timeout) {
  if (timeout == absl::InfiniteDuration()) return std::chrono::system_clock::time_point::max();
  return std::chrono::system_clock::now() + absl::ToChronoNanoseconds(timeout);
}

// grpc.health.v1.HealthCheckRequest { service: SERVICE } on the wire (field 1, a string).
std::string HealthCheckRequestBytes(const std::string& service) {
  std::string bytes;
  if (service.empty()) return bytes;
  google::protobuf::io::StringOutputStream stream(&bytes);
  google::protobuf::io::CodedOutputStream output(&stream);
  output.WriteTag(google::protobuf::internal::WireFormatLite::MakeTag(
      1, google::protobuf::internal::WireFormatLite::WIRETYPE_LENGTH_DELIMITED));
  output.WriteVarint32(static_cast<uint32_t>(service.size()));
  output.WriteString(service);
  return bytes;
}

// The status field (1, an enum) of a grpc.health.v1.HealthCheckResponse: 1 SERVING,
// 2 NOT_SERVING, 0 UNKNOWN. -1 when the bytes do not parse.
int HealthCheckResponseStatus(const std::string& bytes) {
  google::protobuf::io::CodedInputStream input(reinterpret_cast<const uint8_t*>(bytes.data()),
                                               static_cast<int>(bytes.size()));
  int status = 0;  // proto3: an absent field is 0
  while (uint32_t tag = input.ReadTag()) {
    if (tag == google::protobuf::internal::WireFormatLite::MakeTag(
                   1, google::protobuf::internal::WireFormatLite::WIRETYPE_VARINT)) {
      uint32_t value = 0;
      if (!input.ReadVarint32(&value)) return -1;
      status = static_cast<int>(value);
    } else if (!google::protobuf::internal::WireFormatLite::SkipField(&input, tag)) {
      return -1;
    }
  }
  return status;
}

std::string HealthStatusName(int status) {
  switch (status) {
    case 0:
      return "UNKNOWN";
    case 1:
      return "SERVING";
    case 2:
      return "NOT_SERVING";
    case 3:
      return "SERVICE_UNKNOWN";
    default:
      return absl::StrCat("unparseable (", status, ")");
  }
}

}  // namespace

void WatchCancellation::Cancel() {
  std::lock_guard<std::mutex> lock(mutex_);
  cancelled_ = true;
  if (context_ != nullptr) context_->TryCancel();
}

bool WatchCancellation::cancelled() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cancelled_;
}

bool WatchCancellation::Attach(grpc::ClientContext* context) {
  std::lock_guard<std::mutex> lock(mutex_);
  context_ = context;
  return !cancelled_;
}

ClusterClient::ClusterClient(std::string address, ClusterClientOptions options,
                             std::shared_ptr<grpc::Channel> channel)
    : address_(std::move(address)),
      options_(std::move(options)),
      channel_(std::move(channel)),
      jobs_(v1::JobService::NewStub(channel_)),
      cluster_(v1::ClusterService::NewStub(channel_)) {}

absl::StatusOr<std::unique_ptr<ClusterClient>> ClusterClient::Connect(
    const std::string& address, const ClusterClientOptions& options) {
  if (address.empty() || address.find(':') == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("the coordinator's address must be HOST:PORT, not '", address, "'"));
  }
  grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(options.max_message_bytes);
  arguments.SetMaxSendMessageSize(options.max_message_bytes);
  arguments.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, GrpcMilliseconds(options.keepalive_interval));
  arguments.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, GrpcMilliseconds(options.keepalive_timeout));
  arguments.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(address, MakeChannelCredentials(options.tls), arguments);
  if (!channel->WaitForConnected(ToDeadline(options.connect_timeout))) {
    return absl::UnavailableError(absl::StrCat(
        "no loomd answers at ", address, " (waited ", absl::FormatDuration(options.connect_timeout),
        "): start one there (loomd --listen ", address,
        ", or 'loomctl cluster up') or name another with --coordinator",
        options.tls.has_value()
            ? "; with TLS, the daemon must serve TLS with a certificate signed by --tls-ca that "
              "names this host, and accept this client's certificate"
            : "; a daemon serving TLS needs --tls-ca, --tls-cert and --tls-key"));
  }
  VLOG(1) << "connected to loomd at " << address;
  return std::unique_ptr<ClusterClient>(new ClusterClient(address, options, std::move(channel)));
}

std::unique_ptr<grpc::ClientContext> ClusterClient::CallContext(absl::Duration timeout) const {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(ToDeadline(timeout));
  return context;
}

absl::Status ClusterClient::FromGrpc(const grpc::Status& status, const std::string& call) const {
  absl::Status converted = FromGrpcStatus(status);
  switch (converted.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
      return absl::Status(converted.code(),
                          absl::StrCat(call, " at loomd ", address_, ": ", converted.message()));
    default:
      return converted;
  }
}

absl::StatusOr<v1::JobInfo> ClusterClient::SubmitJob(const job::Job& job,
                                                     const SubmitJobOptions& options) {
  v1::SubmitJobRequest request;
  *request.mutable_job() = job;
  request.set_trace(options.trace);
  if (options.trace_steps.has_value()) *request.mutable_trace_steps() = *options.trace_steps;
  request.set_checkpoint_path(options.checkpoint_path);
  request.set_checkpoint_every_steps(options.checkpoint_every_steps);
  request.set_overwrite_checkpoint(options.overwrite_checkpoint);
  request.set_stream_fetches(options.stream_fetches);
  v1::SubmitJobResponse response;
  grpc::Status status =
      jobs_->SubmitJob(CallContext(options_.call_timeout).get(), request, &response);
  if (!status.ok()) return FromGrpc(status, "SubmitJob");
  return response.job();
}

absl::StatusOr<v1::JobInfo> ClusterClient::GetJob(const std::string& job_id) {
  v1::GetJobRequest request;
  request.set_job_id(job_id);
  v1::GetJobResponse response;
  grpc::Status status = jobs_->GetJob(CallContext(options_.call_timeout).get(), request, &response);
  if (!status.ok()) return FromGrpc(status, absl::StrCat("GetJob(", job_id, ")"));
  return response.job();
}

absl::StatusOr<std::vector<v1::JobInfo>> ClusterClient::ListJobs(
    const std::vector<v1::JobState>& states) {
  v1::ListJobsRequest request;
  for (v1::JobState state : states) request.add_states(state);
  request.set_page_size(options_.list_page_size);
  std::vector<v1::JobInfo> jobs;
  do {
    v1::ListJobsResponse response;
    grpc::Status status =
        jobs_->ListJobs(CallContext(options_.call_timeout).get(), request, &response);
    if (!status.ok()) return FromGrpc(status, "ListJobs");
    jobs.insert(jobs.end(), response.jobs().begin(), response.jobs().end());
    request.set_page_token(response.next_page_token());
  } while (!request.page_token().empty());
  return jobs;
}

absl::StatusOr<v1::JobInfo> ClusterClient::CancelJob(const std::string& job_id,
                                                     const std::string& reason) {
  v1::CancelJobRequest request;
  request.set_job_id(job_id);
  request.set_reason(reason);
  v1::CancelJobResponse response;
  grpc::Status status =
      jobs_->CancelJob(CallContext(options_.call_timeout).get(), request, &response);
  if (!status.ok()) return FromGrpc(status, absl::StrCat("CancelJob(", job_id, ")"));
  return response.job();
}

absl::Status ClusterClient::WatchJob(const std::string& job_id,
                                     const std::function<void(const v1::JobEvent&)>& on_event,
                                     const WatchOptions& options) {
  v1::WatchJobRequest request;
  request.set_job_id(job_id);
  std::unique_ptr<grpc::ClientContext> context = CallContext(options.timeout);
  const std::string call = absl::StrCat("WatchJob(", job_id, ")");
  if (options.cancellation != nullptr && !options.cancellation->Attach(context.get())) {
    return absl::CancelledError(absl::StrCat(call, ": cancelled by the caller"));
  }
  std::unique_ptr<grpc::ClientReader<v1::JobEvent>> reader =
      jobs_->WatchJob(context.get(), request);
  v1::JobEvent event;
  while (reader->Read(&event)) on_event(event);
  grpc::Status status = reader->Finish();
  const bool cancelled = options.cancellation != nullptr && !options.cancellation->Attach(nullptr);
  if (cancelled && status.error_code() == grpc::StatusCode::CANCELLED) {
    return absl::CancelledError(absl::StrCat(call, ": cancelled by the caller"));
  }
  if (!status.ok()) return FromGrpc(status, call);
  return absl::OkStatus();
}

absl::StatusOr<v1::GetPlanResponse> ClusterClient::GetPlan(const std::string& job_id,
                                                           std::optional<int> node) {
  v1::GetPlanRequest request;
  request.set_job_id(job_id);
  if (node.has_value()) request.set_node(*node);
  v1::GetPlanResponse response;
  grpc::Status status =
      jobs_->GetPlan(CallContext(options_.call_timeout).get(), request, &response);
  if (!status.ok()) return FromGrpc(status, absl::StrCat("GetPlan(", job_id, ")"));
  return response;
}

absl::StatusOr<v1::GetTraceResponse> ClusterClient::GetTrace(const std::string& job_id) {
  // In parts, as a trace may be larger than a message, each fitting this client's limit.
  constexpr int64_t kPartBytes = 16 << 20;
  v1::GetTraceRequest request;
  request.set_job_id(job_id);
  request.set_max_bytes(std::min(MessagePayloadBytes(options_.max_message_bytes), kPartBytes));
  v1::GetTraceResponse whole;
  while (true) {
    v1::GetTraceResponse part;
    grpc::Status status = jobs_->GetTrace(CallContext(options_.call_timeout).get(), request, &part);
    if (!status.ok()) return FromGrpc(status, absl::StrCat("GetTrace(", job_id, ")"));
    whole.mutable_chrome_trace_json()->append(part.chrome_trace_json());
    whole.set_acts(part.acts());
    whole.set_total_bytes(part.total_bytes());
    const int64_t end = static_cast<int64_t>(whole.chrome_trace_json().size());
    if (end >= part.total_bytes()) return whole;
    if (part.chrome_trace_json().empty()) {
      return absl::DataLossError(absl::StrCat("GetTrace(", job_id, "): the daemon sent nothing at ",
                                              "offset ", end, " of ", part.total_bytes(),
                                              " bytes"));
    }
    request.set_offset(end);
  }
}

absl::StatusOr<std::vector<v1::NodeInfo>> ClusterClient::ListNodes() {
  v1::ListNodesRequest request;
  v1::ListNodesResponse response;
  grpc::Status status =
      cluster_->ListNodes(CallContext(options_.call_timeout).get(), request, &response);
  if (!status.ok()) return FromGrpc(status, "ListNodes");
  return std::vector<v1::NodeInfo>(response.nodes().begin(), response.nodes().end());
}

absl::Status ClusterClient::CheckHealth(const std::string& service) {
  // No generated code for grpc.health.v1 ships with gRPC's C++ packages: the two tiny messages
  // are encoded by hand.
  std::unique_ptr<grpc::ClientContext> context = CallContext(options_.call_timeout);
  std::string bytes;
  grpc::Status status = RawUnaryCall(channel_, context.get(), "/grpc.health.v1.Health/Check",
                                     HealthCheckRequestBytes(service), &bytes);
  if (!status.ok()) return FromGrpc(status, "Health.Check");
  const int health = HealthCheckResponseStatus(bytes);
  if (health == 1) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat("loomd at ", address_, " is ",
                                             HealthStatusName(health),
                                             service.empty() ? "" : " for ", service));
}

absl::Status ClusterClient::WaitUntilReady(int expected_nodes, absl::Time deadline) {
  constexpr absl::Duration kPollInterval = absl::Milliseconds(100);
  std::string last_seen = "nothing yet";
  while (true) {
    absl::Status health = CheckHealth();
    if (!health.ok()) {
      last_seen = absl::StrCat("health: ", health.message());
    } else {
      absl::StatusOr<std::vector<v1::NodeInfo>> nodes = ListNodes();
      if (!nodes.ok()) {
        last_seen = absl::StrCat("ListNodes: ", nodes.status().message());
      } else {
        std::vector<std::string> not_ready;
        for (const v1::NodeInfo& node : *nodes) {
          if (node.state() != v1::NODE_STATE_READY) {
            not_ready.push_back(absl::StrCat(node.name(), " ", NodeStateName(node.state())));
          }
        }
        const int ready = static_cast<int>(nodes->size() - not_ready.size());
        if (static_cast<int>(nodes->size()) >= expected_nodes && not_ready.empty()) {
          return absl::OkStatus();
        }
        last_seen = absl::StrCat(ready, " of ", expected_nodes, " nodes ready");
        if (!not_ready.empty())
          absl::StrAppend(&last_seen, " (", absl::StrJoin(not_ready, ", "), ")");
      }
    }
    if (absl::Now() + kPollInterval > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("the cluster at ", address_, " is not ready: last seen ", last_seen));
    }
    std::this_thread::sleep_for(absl::ToChronoNanoseconds(kPollInterval));
  }
}

std::string JobStateName(v1::JobState state) {
  std::string name = v1::JobState_Name(state);
  if (absl::StartsWith(name, kJobStatePrefix)) name = name.substr(sizeof(kJobStatePrefix) - 1);
  return name.empty() ? absl::StrCat(static_cast<int>(state)) : name;
}

absl::StatusOr<v1::JobState> ParseJobState(const std::string& text) {
  std::string name = absl::AsciiStrToUpper(text);
  if (!absl::StartsWith(name, kJobStatePrefix)) name = absl::StrCat(kJobStatePrefix, name);
  v1::JobState state;
  if (!v1::JobState_Parse(name, &state) || state == v1::JOB_STATE_UNSPECIFIED) {
    std::vector<std::string> names;
    for (int value = v1::JobState_MIN + 1; value <= v1::JobState_MAX; ++value) {
      if (v1::JobState_IsValid(value)) {
        names.push_back(absl::AsciiStrToLower(JobStateName(static_cast<v1::JobState>(value))));
      }
    }
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "' is not a job state; states are ", absl::StrJoin(names, ", ")));
  }
  return state;
}

std::string NodeStateName(v1::NodeState state) {
  std::string name = v1::NodeState_Name(state);
  if (absl::StartsWith(name, kNodeStatePrefix)) name = name.substr(sizeof(kNodeStatePrefix) - 1);
  return name.empty() ? absl::StrCat(static_cast<int>(state)) : name;
}

bool IsTerminal(v1::JobState state) {
  return state == v1::JOB_STATE_SUCCEEDED || state == v1::JOB_STATE_FAILED ||
         state == v1::JOB_STATE_CANCELLED;
}

}  // namespace loom
