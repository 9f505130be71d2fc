#include "daemon/job_service.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "rpc/grpc_status.h"
#include "rpc/message_payload.h"
#include "rpc/tls.h"

namespace loom::daemon {
namespace {

// How long CancelJob waits for a running job to end when the call has no deadline.
constexpr absl::Duration kCancelWait = absl::Seconds(30);
// How often a WatchJob stream checks whether its client went away.
constexpr absl::Duration kWatchPoll = absl::Milliseconds(200);

grpc::Status CheckJobId(const std::string& job_id) {
  if (job_id.empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "job_id is empty: pass the id SubmitJob or ListJobs returned");
  }
  return grpc::Status::OK;
}

// ListJobs' page tokens: "after:" and the id of the last job of the page ("after:job-42").
constexpr absl::string_view kPageTokenPrefix = "after:";

// The number of the job a page token continues after; nullopt for a token ListJobs never returns.
std::optional<int64_t> JobNumberAfter(absl::string_view token) {
  int64_t number = 0;
  if (!absl::ConsumePrefix(&token, kPageTokenPrefix) || !absl::ConsumePrefix(&token, "job-") ||
      !absl::SimpleAtoi(token, &number) || number < 1) {
    return std::nullopt;
  }
  return number;
}

// OK when the caller may `action` ("cancel") job `job_id`: an admin any job, a client the jobs it
// submitted (JobInfo.owner). PERMISSION_DENIED naming the caller otherwise; NOT_FOUND for an
// unknown job (to a client or an admin).
grpc::Status CheckJobAccess(const JobManager& manager, const Caller& caller,
                            const std::string& job_id, absl::string_view action) {
  const std::string what = absl::StrCat(action, " job '", job_id.substr(0, 64), "'");
  if (absl::Status role = RequireRole(caller, {Role::kClient, Role::kAdmin}, what); !role.ok()) {
    return ToGrpcStatus(role);
  }
  if (grpc::Status status = CheckJobId(job_id); !status.ok()) return status;
  if (caller.Has(Role::kAdmin)) return grpc::Status::OK;
  absl::StatusOr<v1::JobInfo> info = manager.Get(job_id);
  if (!info.ok()) return ToGrpcStatus(info.status());
  if (info->owner() == caller.identity) return grpc::Status::OK;
  return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                      absl::StrCat(caller.Describe(), " may not ", what,
                                   ": a client certificate may act only on the jobs it submitted, "
                                   "and this one is another's (an admin certificate, role admin, "
                                   "may act on any)"));
}

// The time left before the call's deadline (capped at `cap`).
absl::Duration TimeLeft(const grpc::ServerContext& context, absl::Duration cap) {
  const auto left = context.deadline() - std::chrono::system_clock::now();
  return std::clamp(absl::FromChrono(left), absl::ZeroDuration(), cap);
}

}  // namespace

grpc::Status JobServiceImpl::SubmitJob(grpc::ServerContext* context,
                                       const v1::SubmitJobRequest* request,
                                       v1::SubmitJobResponse* response) {
  const Caller caller = CallerOf(*context);
  if (absl::Status role = RequireRole(caller, {Role::kClient, Role::kAdmin}, "submit jobs");
      !role.ok()) {
    return ToGrpcStatus(role);
  }
  if (!request->has_job()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "the request has no job: set SubmitJobRequest.job");
  }
  SubmitOptions options;
  options.trace = request->trace();
  if (request->has_trace_steps()) options.trace_steps = request->trace_steps();
  options.checkpoint_path = request->checkpoint_path();
  options.checkpoint_every_steps = request->checkpoint_every_steps();
  options.overwrite_checkpoint = request->overwrite_checkpoint();
  options.stream_fetches = request->stream_fetches();
  options.owner = caller.identity;
  absl::StatusOr<v1::JobInfo> info = manager_->Submit(request->job(), options);
  if (!info.ok()) return ToGrpcStatus(info.status());
  *response->mutable_job() = std::move(*info);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::GetJob(grpc::ServerContext* context, const v1::GetJobRequest* request,
                                    v1::GetJobResponse* response) {
  if (grpc::Status status = CheckJobAccess(*manager_, CallerOf(*context), request->job_id(), "read");
      !status.ok()) {
    return status;
  }
  absl::StatusOr<v1::JobInfo> info = manager_->Get(request->job_id());
  if (!info.ok()) return ToGrpcStatus(info.status());
  *response->mutable_job() = std::move(*info);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::ListJobs(grpc::ServerContext* context,
                                      const v1::ListJobsRequest* request,
                                      v1::ListJobsResponse* response) {
  const Caller caller = CallerOf(*context);
  if (absl::Status role = RequireRole(caller, {Role::kClient, Role::kAdmin}, "list jobs");
      !role.ok()) {
    return ToGrpcStatus(role);
  }
  // A client lists the jobs it submitted, an admin every job.
  std::optional<std::string> owner;
  if (!caller.Has(Role::kAdmin)) owner = caller.identity;
  if (request->page_size() < 0) {
    return grpc::Status(
        grpc::StatusCode::INVALID_ARGUMENT,
        absl::StrCat("page_size must be 0 (every job) or more, not ", request->page_size()));
  }
  int64_t after = 0;
  if (!request->page_token().empty()) {
    std::optional<int64_t> number = JobNumberAfter(request->page_token());
    if (!number.has_value()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          absl::StrCat("page_token '", request->page_token().substr(0, 64),
                                       "' is not a next_page_token of ListJobs"));
    }
    after = *number;
  }
  std::vector<v1::JobState> states;
  for (int state : request->states()) states.push_back(static_cast<v1::JobState>(state));
  bool more = false;
  std::vector<v1::JobInfo> jobs =
      manager_->List(states, after, request->page_size(), &more, owner);
  if (more) {
    response->set_next_page_token(absl::StrCat(kPageTokenPrefix, jobs.back().job_id()));
  }
  for (v1::JobInfo& info : jobs) *response->add_jobs() = std::move(info);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::CancelJob(grpc::ServerContext* context,
                                       const v1::CancelJobRequest* request,
                                       v1::CancelJobResponse* response) {
  if (grpc::Status status =
          CheckJobAccess(*manager_, CallerOf(*context), request->job_id(), "cancel");
      !status.ok()) {
    return status;
  }
  absl::StatusOr<v1::JobInfo> info =
      manager_->Cancel(request->job_id(), request->reason(), TimeLeft(*context, kCancelWait));
  if (!info.ok()) return ToGrpcStatus(info.status());
  *response->mutable_job() = std::move(*info);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::WatchJob(grpc::ServerContext* context,
                                      const v1::WatchJobRequest* request,
                                      grpc::ServerWriter<v1::JobEvent>* writer) {
  if (grpc::Status status =
          CheckJobAccess(*manager_, CallerOf(*context), request->job_id(), "watch");
      !status.ok()) {
    return status;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (watches_ >= max_watches_) {
      return grpc::Status(
          grpc::StatusCode::RESOURCE_EXHAUSTED,
          absl::StrCat(watches_, " WatchJob streams are open, as many as loomd serves ",
                       "(--max-watches): close one, or poll GetJob"));
    }
    ++watches_;
  }
  absl::Cleanup ended = [this] {
    std::lock_guard<std::mutex> lock(mutex_);
    --watches_;
    watch_ended_.notify_all();
  };
  int64_t next_sequence = 0;
  bool first = true;
  while (!context->IsCancelled()) {
    absl::StatusOr<JobManager::EventBatch> batch =
        manager_->WaitForEvents(request->job_id(), next_sequence, kWatchPoll);
    if (!batch.ok()) {
      // Unknown at the start: NOT_FOUND. Forgotten while watched (a long history): the stream
      // simply ends.
      return first ? ToGrpcStatus(batch.status()) : grpc::Status::OK;
    }
    first = false;
    for (const std::shared_ptr<const v1::JobEvent>& event : batch->events) {
      if (!writer->Write(*event)) return grpc::Status::OK;  // the client went away
      next_sequence = event->sequence() + 1;
    }
    if (batch->ended) return grpc::Status::OK;
  }
  return grpc::Status(grpc::StatusCode::CANCELLED, "the watch was cancelled by the client");
}

bool JobServiceImpl::WaitForWatchesToEnd(absl::Duration timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  return watch_ended_.wait_for(lock, absl::ToChronoNanoseconds(timeout),
                               [this] { return watches_ == 0; });
}

grpc::Status JobServiceImpl::GetPlan(grpc::ServerContext* context,
                                     const v1::GetPlanRequest* request,
                                     v1::GetPlanResponse* response) {
  if (grpc::Status status =
          CheckJobAccess(*manager_, CallerOf(*context), request->job_id(), "read the plan of");
      !status.ok()) {
    return status;
  }
  std::optional<int> node;
  if (request->has_node()) node = request->node();
  absl::StatusOr<v1::GetPlanResponse> plan = manager_->GetPlan(request->job_id(), node);
  if (!plan.ok()) return ToGrpcStatus(plan.status());
  // Said here, with what to do, rather than by gRPC's "Sent message larger than max".
  if (const size_t bytes = plan->ByteSizeLong();
      bytes > static_cast<size_t>(MessagePayloadBytes(max_message_bytes_))) {
    return grpc::Status(
        grpc::StatusCode::RESOURCE_EXHAUSTED,
        absl::StrCat(node.has_value() ? absl::StrCat("node ", *node, "'s plan of job '")
                                      : "the plans of job '",
                     request->job_id(), "' take ", bytes, " bytes, more than fits in a message (",
                     max_message_bytes_, " bytes, loomd --max-message-size): ",
                     node.has_value() ? "raise --max-message-size (on the client too)"
                                      : "ask for one node's (GetPlanRequest.node; loomctl plan "
                                        "JOB --node N)"));
  }
  *response = std::move(*plan);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::GetTrace(grpc::ServerContext* context,
                                      const v1::GetTraceRequest* request,
                                      v1::GetTraceResponse* response) {
  if (grpc::Status status =
          CheckJobAccess(*manager_, CallerOf(*context), request->job_id(), "read the trace of");
      !status.ok()) {
    return status;
  }
  if (request->offset() < 0 || request->max_bytes() < 0) {
    return grpc::Status(
        grpc::StatusCode::INVALID_ARGUMENT,
        absl::StrCat("GetTrace of job '", request->job_id(), "': offset (", request->offset(),
                     ") and max_bytes (", request->max_bytes(), ") may not be negative"));
  }
  const int64_t fits = MessagePayloadBytes(max_message_bytes_);
  const int64_t max_bytes = request->max_bytes() == 0 ? fits : std::min(request->max_bytes(), fits);
  absl::StatusOr<v1::GetTraceResponse> trace =
      manager_->GetTrace(request->job_id(), request->offset(), max_bytes);
  if (!trace.ok()) return ToGrpcStatus(trace.status());
  const int64_t end = request->offset() + static_cast<int64_t>(trace->chrome_trace_json().size());
  if (request->max_bytes() == 0 && end < trace->total_bytes()) {
    return grpc::Status(
        grpc::StatusCode::RESOURCE_EXHAUSTED,
        absl::StrCat(
            "the trace of job '", request->job_id(), "' is ", trace->total_bytes(), " bytes",
            request->offset() == 0 ? ""
                                   : absl::StrCat(" (", trace->total_bytes() - request->offset(),
                                                  " from offset ", request->offset(), ")"),
            ", more than fits in a message (", max_message_bytes_,
            " bytes, loomd --max-message-size): ask for it in parts "
            "(GetTraceRequest.offset and max_bytes), as loomctl does"));
  }
  *response = std::move(*trace);
  return grpc::Status::OK;
}

}  // namespace loom::daemon
