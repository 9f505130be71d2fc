#include "tools/loomctl/job_and_node_commands.h"

#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cli/parse_options_and_run.h"
#include "core/shared_kernels.h"
#include "google/protobuf/text_format.h"
#include "tools/loomctl/cluster_connection.h"
#include "tools/loomctl/cluster_tables.h"
#include "tools/loomctl/fetch_directory.h"
#include "tools/loomctl/job_watch.h"
#include "tools/loomctl/trace_file.h"

namespace loom::loomctl {
namespace {

// A parsed cluster command, or the exit code when it should not run (help, usage error).
struct Invocation {
  std::optional<int> exit_code;
  cli::ParsedArguments arguments;
  ClusterCommandOptions options;
};

Invocation Parse(const cli::ArgumentSpec& spec, const std::vector<std::string>& arguments,
                 std::ostream& out, std::ostream& error) {
  Invocation invocation;
  int exit_code = cli::kExitSuccess;
  std::optional<cli::ParsedArguments> parsed =
      cli::ParseOrReport(spec, arguments, out, error, &exit_code);
  if (!parsed.has_value()) {
    invocation.exit_code = exit_code;
    return invocation;
  }
  absl::StatusOr<ClusterCommandOptions> options =
      ClusterOptionsFrom(spec.command().c_str(), *parsed);
  if (!options.ok()) {
    error << options.status().message() << "\n";
    invocation.exit_code = cli::kExitUsage;
    return invocation;
  }
  invocation.arguments = std::move(*parsed);
  invocation.options = std::move(*options);
  return invocation;
}

bool Json(const Invocation& invocation) { return invocation.options.output == OutputFormat::kJson; }

cli::ArgumentSpec WithClusterFlags(cli::ArgumentSpec spec) {
  AddClusterFlags(spec);
  return spec;
}

// --- status ---

cli::ArgumentSpec StatusSpec() {
  cli::ArgumentSpec spec(
      "loomctl status",
      "Shows a job: its state (with its place in the queue when pending), steps done,\n"
      "last loss, devices, submit/start/end times and, when it failed or was\n"
      "cancelled, its error. --output json: the JobInfo message.");
  spec.AddPositional("JOB_ID", "the job's id (from 'loomctl submit' or 'loomctl jobs')");
  return WithClusterFlags(std::move(spec));
}

int RunStatus(const std::vector<std::string>& arguments, std::ostream& out, std::ostream& error) {
  const cli::ArgumentSpec spec = StatusSpec();
  Invocation invocation = Parse(spec, arguments, out, error);
  if (invocation.exit_code.has_value()) return *invocation.exit_code;
  const char* command = spec.command().c_str();
  std::unique_ptr<ClusterClient> client = ConnectOrReport(command, invocation.options, error);
  if (client == nullptr) return cli::kExitUnreachable;
  absl::StatusOr<v1::JobInfo> job = client->GetJob(invocation.arguments.positionals()[0]);
  if (!job.ok()) return ReportRpcError(command, job.status(), error);
  out << (Json(invocation) ? MessageToJsonLine(*job) : FormatJobStatus(*job));
  return cli::kExitSuccess;
}

// --- jobs ---

cli::ArgumentSpec JobsSpec() {
  cli::ArgumentSpec spec(
      "loomctl jobs",
      "Lists the jobs the daemon remembers (queued, running and the most recent\n"
      "finished ones), oldest first. --output json: the ListJobsResponse message.");
  spec.AddFlag("state", "S[,S...]", "",
               "only jobs in these states: pending, compiling, launching, running, succeeded, "
               "failed, cancelled");
  return WithClusterFlags(std::move(spec));
}

int RunJobs(const std::vector<std::string>& arguments, std::ostream& out, std::ostream& error) {
  const cli::ArgumentSpec spec = JobsSpec();
  Invocation invocation = Parse(spec, arguments, out, error);
  if (invocation.exit_code.has_value()) return *invocation.exit_code;
  const char* command = spec.command().c_str();
  std::vector<v1::JobState> states;
  if (invocation.arguments.Has("state")) {
    for (absl::string_view name : absl::StrSplit(invocation.arguments.Value("state"), ',')) {
      absl::StatusOr<v1::JobState> state = ParseJobState(std::string(name));
      if (!state.ok()) {
        error << cli::UsageError(command, absl::StrCat("--state: ", state.status().message()))
                     .message()
              << "\n";
        return cli::kExitUsage;
      }
      states.push_back(*state);
    }
  }
  std::unique_ptr<ClusterClient> client = ConnectOrReport(command, invocation.options, error);
  if (client == nullptr) return cli::kExitUnreachable;
  absl::StatusOr<std::vector<v1::JobInfo>> jobs = client->ListJobs(states);
  if (!jobs.ok()) return ReportRpcError(command, jobs.status(), error);
  if (Json(invocation)) {
    v1::ListJobsResponse response;
    for (const v1::JobInfo& job : *jobs) *response.add_jobs() = job;
    out << MessageToJsonLine(response);
  } else {
    out << FormatJobTable(*jobs);
  }
  return cli::kExitSuccess;
}

// --- cancel ---

cli::ArgumentSpec CancelSpec() {
  cli::ArgumentSpec spec(
      "loomctl cancel",
      "Cancels a job: a pending one never runs, a running one is aborted on every node. Returns\n"
      "once the job has ended. Cancelling a cancelled job succeeds again; cancelling a job that\n"
      "already succeeded or failed is refused (FAILED_PRECONDITION, exit code 4).\n"
      "--output json: the job's JobInfo after the cancel.");
  spec.AddPositional("JOB_ID", "the job's id")
      .AddFlag("reason", "TEXT", "",
               "recorded in the job's error (\"cancelled by the client: TEXT\")");
  return WithClusterFlags(std::move(spec));
}

int RunCancel(const std::vector<std::string>& arguments, std::ostream& out, std::ostream& error) {
  const cli::ArgumentSpec spec = CancelSpec();
  Invocation invocation = Parse(spec, arguments, out, error);
  if (invocation.exit_code.has_value()) return *invocation.exit_code;
  const char* command = spec.command().c_str();
  std::unique_ptr<ClusterClient> client = ConnectOrReport(command, invocation.options, error);
  if (client == nullptr) return cli::kExitUnreachable;
  absl::StatusOr<v1::JobInfo> job = client->CancelJob(invocation.arguments.positionals()[0],
                                                      invocation.arguments.Value("reason"));
  if (!job.ok()) return ReportRpcError(command, job.status(), error);
  if (Json(invocation)) {
    out << MessageToJsonLine(*job);
  } else {
    out << job->job_id() << ": " << JobStateName(job->state());
    if (job->has_error() && !job->error().message().empty())
      out << " (" << job->error().message() << ")";
    out << "\n";
  }
  return cli::kExitSuccess;
}

// --- watch ---

cli::ArgumentSpec WatchSpec() {
  cli::ArgumentSpec spec(
      "loomctl watch",
      "Follows a submitted job until it ends, as 'loomctl submit --watch' does: first the\n"
      "events the daemon still holds, then live ones. The exit code says how the job ended:\n"
      "0 succeeded, 1 failed (or, with --fetch-dir, a file could not be written or there\n"
      "was nothing to write), 3 cancelled (its error on stderr).");
  spec.AddPositional("JOB_ID", "the job's id")
      .AddFlag("fetch-dir", "DIR", "",
               "write the job's fetched tensors to DIR as 'loomctl submit --fetch-dir' does (a "
               "job submitted with it, whose tensors the coordinator still holds: those of the "
               "last such job to start)");
  return WithClusterFlags(std::move(spec));
}

int RunWatch(const std::vector<std::string>& arguments, std::ostream& out, std::ostream& error) {
  const cli::ArgumentSpec spec = WatchSpec();
  Invocation invocation = Parse(spec, arguments, out, error);
  if (invocation.exit_code.has_value()) return *invocation.exit_code;
  const char* command = spec.command().c_str();
  const std::string fetch_directory = invocation.arguments.Value("fetch-dir");
  if (invocation.arguments.Has("fetch-dir") && fetch_directory.empty()) {
    error << cli::UsageError(command, "--fetch-dir needs a directory").message() << "\n";
    return cli::kExitUsage;
  }
  if (!fetch_directory.empty()) {
    if (absl::Status created = CreateFetchDirectory(fetch_directory); !created.ok()) {
      error << command << ": " << created.message() << "\n";
      return cli::kExitUsage;
    }
  }
  std::unique_ptr<ClusterClient> client = ConnectOrReport(command, invocation.options, error);
  if (client == nullptr) return cli::kExitUnreachable;
  return WatchJobAndReport(command, *client, invocation.arguments.positionals()[0],
                           invocation.options.output, out, error, fetch_directory);
}

// --- nodes ---

cli::ArgumentSpec NodesSpec() {
  cli::ArgumentSpec spec(
      "loomctl nodes",
      "Lists the cluster's nodes, the coordinator first: name, address, state\n"
      "(READY, MISSING, DRAINING), role, devices and their memory budget, the job\n"
      "running on it, loomd version. --output json: the ListNodesResponse message.");
  return WithClusterFlags(std::move(spec));
}

int RunNodes(const std::vector<std::string>& arguments, std::ostream& out, std::ostream& error) {
  const cli::ArgumentSpec spec = NodesSpec();
  Invocation invocation = Parse(spec, arguments, out, error);
  if (invocation.exit_code.has_value()) return *invocation.exit_code;
  const char* command = spec.command().c_str();
  std::unique_ptr<ClusterClient> client = ConnectOrReport(command, invocation.options, error);
  if (client == nullptr) return cli::kExitUnreachable;
  absl::StatusOr<std::vector<v1::NodeInfo>> nodes = client->ListNodes();
  if (!nodes.ok()) return ReportRpcError(command, nodes.status(), error);
  if (Json(invocation)) {
    v1::ListNodesResponse response;
    for (const v1::NodeInfo& node : *nodes) *response.add_nodes() = node;
    out << MessageToJsonLine(response);
  } else {
    out << FormatNodeTable(*nodes);
  }
  return cli::kExitSuccess;
}

// --- plan ---

cli::ArgumentSpec PlanSpec() {
  cli::ArgumentSpec spec(
      "loomctl plan",
      "Prints the physical plan a job was compiled into, in protobuf text format (the format\n"
      "'loomctl run-plan' reads), or with --output json as JSON: the whole plan, or with --node N\n"
      "node N's part of it. Its tasks name their kernel configurations by position in the plan's\n"
      "'kernels' (kernel_index), each held once; --inline-kernels writes them into the tasks.");
  spec.AddPositional("JOB_ID", "the job's id")
      .AddFlag("node", "N", "", "only node N's plan (0-based, as in 'loomctl nodes')")
      .AddSwitch("inline-kernels",
                 "write each task's kernel configurations into the task (easier to read, larger)");
  return WithClusterFlags(std::move(spec));
}

int RunPlan(const std::vector<std::string>& arguments, std::ostream& out, std::ostream& error) {
  const cli::ArgumentSpec spec = PlanSpec();
  Invocation invocation = Parse(spec, arguments, out, error);
  if (invocation.exit_code.has_value()) return *invocation.exit_code;
  const char* command = spec.command().c_str();
  std::optional<int> node;
  if (invocation.arguments.Has("node")) {
    int index = 0;
    if (!absl::SimpleAtoi(invocation.arguments.Value("node"), &index) || index < 0) {
      error << cli::UsageError(command, absl::StrCat("--node must be a node index >= 0, not '",
                                                     invocation.arguments.Value("node"), "'"))
                   .message()
            << "\n";
      return cli::kExitUsage;
    }
    node = index;
  }
  std::unique_ptr<ClusterClient> client = ConnectOrReport(command, invocation.options, error);
  if (client == nullptr) return cli::kExitUnreachable;
  const std::string& job_id = invocation.arguments.positionals()[0];
  // Only the node's plan comes, as a whole plan may be larger than a message.
  absl::StatusOr<v1::GetPlanResponse> plans = client->GetPlan(job_id, node);
  if (!plans.ok()) return ReportRpcError(command, plans.status(), error);
  if (node.has_value() && plans->node_plans_size() != 1) {
    error << command << ": the daemon sent " << plans->node_plans_size() << " node plans for node "
          << *node << "'s\n";
    return cli::kExitFailure;
  }
  const plan::Plan* plan = node.has_value() ? &plans->node_plans(0) : &plans->plan();
  plan::Plan inlined;
  if (invocation.arguments.Switch("inline-kernels")) {
    if (absl::Status valid = CheckSharedKernels(*plan); !valid.ok()) {
      error << command << ": the kernels of job " << job_id
            << "'s plan cannot be written into its tasks: " << valid.message() << "\n";
      return cli::kExitFailure;
    }
    inlined = *plan;
    InlineSharedKernels(&inlined);
    plan = &inlined;
  }
  if (Json(invocation)) {
    out << MessageToJsonLine(*plan);
  } else {
    std::string text;
    google::protobuf::TextFormat::PrintToString(*plan, &text);
    out << text;
  }
  return cli::kExitSuccess;
}

// --- trace ---

cli::ArgumentSpec TraceSpec() {
  cli::ArgumentSpec spec(
      "loomctl trace",
      "Writes the Chrome trace of a job submitted with a trace ('loomctl submit --trace', or\n"
      "SubmitJobRequest.trace) to FILE once the job has ended: every act of every node, or of\n"
      "the steps it was traced for. Open it in https://ui.perfetto.dev. 'submit --watch --trace'\n"
      "writes it itself; this is for a job whose watch was stopped, or submitted by a program.");
  spec.AddPositional("JOB_ID", "the job's id").AddPositional("FILE", "where to write the trace");
  return WithClusterFlags(std::move(spec));
}

int RunTrace(const std::vector<std::string>& arguments, std::ostream& out, std::ostream& error) {
  const cli::ArgumentSpec spec = TraceSpec();
  Invocation invocation = Parse(spec, arguments, out, error);
  if (invocation.exit_code.has_value()) return *invocation.exit_code;
  const char* command = spec.command().c_str();
  std::unique_ptr<ClusterClient> client = ConnectOrReport(command, invocation.options, error);
  if (client == nullptr) return cli::kExitUnreachable;
  return WriteTraceFile(command, *client, invocation.arguments.positionals()[0],
                        invocation.arguments.positionals()[1], error);
}

}  // namespace

cli::Subcommand StatusSubcommand() {
  return cli::Subcommand{"status", "show a job's state, progress and error", RunStatus};
}
cli::Subcommand JobsSubcommand() {
  return cli::Subcommand{"jobs", "list the cluster's jobs (--state to filter)", RunJobs};
}
cli::Subcommand CancelSubcommand() {
  return cli::Subcommand{"cancel", "cancel a pending or running job", RunCancel};
}
cli::Subcommand WatchSubcommand() {
  return cli::Subcommand{"watch", "follow a submitted job until it ends", RunWatch};
}
cli::Subcommand NodesSubcommand() {
  return cli::Subcommand{"nodes", "list the cluster's nodes and their devices", RunNodes};
}
cli::Subcommand PlanSubcommand() {
  return cli::Subcommand{"plan", "print the plan a job was compiled into (whole or one node's)",
                         RunPlan};
}
cli::Subcommand TraceSubcommand() {
  return cli::Subcommand{"trace", "write the Chrome trace of a traced job that has ended",
                         RunTrace};
}

}  // namespace loom::loomctl
