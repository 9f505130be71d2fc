#include "tools/loomctl/cluster_tables.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "client/cluster_client.h"
#include "core/format_bytes.h"
#include "tools/loomctl/job_summary.h"
#include "tools/loomctl/job_watch.h"

namespace loom::loomctl {
namespace {

std::string StateText(const v1::JobInfo& job) {
  std::string text = JobStateName(job.state());
  if (job.state() == v1::JOB_STATE_PENDING) {
    // queue_position counts the jobs ahead.
    absl::StrAppend(&text, job.queue_position() == 0
                               ? " (next)"
                               : absl::StrCat(" (", job.queue_position(), " ahead)"));
  }
  return text;
}

std::string StepsText(const v1::JobInfo& job) {
  return job.num_steps() > 0 ? absl::StrCat(job.steps_done(), "/", job.num_steps())
                             : absl::StrCat(job.steps_done());
}

std::string LossText(const v1::JobInfo& job) {
  return job.has_last_loss() ? absl::StrFormat("%.5f", job.last_loss()) : "-";
}

}  // namespace

std::string FormatTimestamp(const google::protobuf::Timestamp& time) {
  if (time.seconds() == 0 && time.nanos() == 0) return "-";
  const absl::Time instant =
      absl::FromUnixSeconds(time.seconds()) + absl::Nanoseconds(time.nanos());
  return absl::FormatTime("%Y-%m-%d %H:%M:%S", instant, absl::LocalTimeZone());
}

std::string FormatMemoryBudget(int64_t bytes) {
  return bytes == 0 ? "no limit" : FormatBytes(bytes);
}

std::string FormatJobTable(const std::vector<v1::JobInfo>& jobs) {
  if (jobs.empty()) return "no jobs\n";
  std::vector<std::vector<std::string>> rows = {
      {"JOB", "NAME", "STATE", "SUBMITTED", "STEPS", "LOSS", "DEVICES"}};
  for (const v1::JobInfo& job : jobs) {
    rows.push_back({job.job_id(), job.name(), StateText(job), FormatTimestamp(job.submit_time()),
                    StepsText(job), LossText(job), absl::StrCat(job.devices_size())});
  }
  return FormatTable(rows, 4);
}

std::string FormatJobStatus(const v1::JobInfo& job) {
  std::vector<std::pair<std::string, std::string>> fields = {
      {"job", absl::StrCat(job.job_id(), " (", job.name(), ")")},
      {"state", StateText(job)},
      {"steps", StepsText(job)},
  };
  if (job.has_last_loss()) fields.emplace_back("last loss", LossText(job));
  fields.emplace_back("devices", absl::StrJoin(job.devices(), ", "));
  fields.emplace_back("submitted", FormatTimestamp(job.submit_time()));
  fields.emplace_back("started", FormatTimestamp(job.start_time()));
  fields.emplace_back("ended", FormatTimestamp(job.end_time()));
  if (job.has_error() && (job.error().code() != 0 || !job.error().message().empty())) {
    fields.emplace_back("error", FormatJobError(job.error()));
  }
  if (!job.checkpoint_path().empty()) {
    fields.emplace_back(
        "checkpoint",
        job.checkpoint_step() > 0
            ? absl::StrCat(job.checkpoint_path(), " (after step ", job.checkpoint_step(), ")")
            : absl::StrCat(job.checkpoint_path(), " (none saved yet)"));
  }
  if (job.traced()) {
    fields.emplace_back(
        "trace",
        absl::StrCat(job.has_trace_steps() ? absl::StrCat("steps ", job.trace_steps().first(), "-",
                                                          job.trace_steps().last())
                                           : "every step",
                     " (GetTrace once the job ended)"));
  }
  if (job.streams_fetches()) {
    fields.emplace_back("fetches", job.fetches_released()
                                       ? "streamed; released (a later job streamed its own)"
                                       : "streamed; held ('loomctl watch JOB --fetch-dir DIR')");
  }
  std::string text;
  for (const auto& [name, value] : fields) {
    absl::StrAppend(&text, absl::StrFormat("%-10s %s\n", name + ":", value));
  }
  return text;
}

std::string FormatNodeTable(const std::vector<v1::NodeInfo>& nodes) {
  if (nodes.empty()) return "no nodes\n";
  std::vector<std::vector<std::string>> rows = {
      {"NAME", "ADDRESS", "STATE", "ROLE", "DEVICES", "MEMORY/DEVICE", "JOB", "VERSION", "INDEX"}};
  for (const v1::NodeInfo& node : nodes) {
    std::vector<std::string> device_names;
    for (const v1::DeviceInfo& device : node.devices()) {
      device_names.push_back(absl::StrCat(device.type(), ":", device.index()));
    }
    const std::string memory =
        node.devices().empty() ? "-" : FormatMemoryBudget(node.devices(0).memory_budget_bytes());
    const std::string state =
        node.unhealthy().empty() ? NodeStateName(node.state())
                                 : absl::StrCat(NodeStateName(node.state()), " (", node.unhealthy(),
                                                ")");
    rows.push_back({node.name(), node.address(), state,
                    node.coordinator() ? "coordinator" : "worker",
                    absl::StrCat(node.devices_size(), " (", absl::StrJoin(device_names, " "), ")"),
                    memory, node.running_job_id().empty() ? "-" : node.running_job_id(),
                    node.version(), absl::StrCat(node.index())});
  }
  return FormatTable(rows, 8);
}

}  // namespace loom::loomctl
