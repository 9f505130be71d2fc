#include "tools/loomctl/compile_command.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "cli/parse_options_and_run.h"
#include "compiler/compile_for_devices.h"
#include "compiler/memory_plan.h"
#include "compiler/op_definition.h"
#include "compiler/placement.h"
#include "core/format_bytes.h"
#include "glog/logging.h"
#include "node/device_backends.h"
#include "runtime/plan_text.h"
#include "tools/loomctl/job_summary.h"

namespace loom::loomctl {
namespace {

constexpr char kCommand[] = "loomctl compile";

// Wraps `text` at word boundaries to lines of at most `columns` characters (longer words stay
// whole).
std::string WrapParagraph(const std::string& text, size_t columns) {
  std::string wrapped;
  size_t line_length = 0;
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (line_length > 0 && line_length + 1 + word.size() > columns) {
      wrapped += '\n';
      line_length = 0;
    } else if (line_length > 0) {
      wrapped += ' ';
      ++line_length;
    }
    absl::StrAppend(&wrapped, word);
    line_length += word.size();
  }
  return wrapped;
}

absl::Status WriteTextFile(const std::string& path, const std::string& text) {
  std::ofstream file(path, std::ios::binary);
  file << text;
  if (!file) return absl::UnavailableError(absl::StrCat("cannot write '", path, "'"));
  return absl::OkStatus();
}

int CompileFromArguments(const std::vector<std::string>& arguments, std::ostream& out,
                         std::ostream& error) {
  return cli::ParseOptionsAndRun(CompileArgumentSpec(), arguments, CompileOptionsFrom, CompileJob,
                                 out, error);
}

}  // namespace

cli::Subcommand CompileSubcommand() {
  return cli::Subcommand{"compile",
                         "compile a job into a physical plan; write, explain or summarise the plan",
                         CompileFromArguments};
}

cli::ArgumentSpec CompileArgumentSpec() {
  cli::ArgumentSpec spec(
      kCommand,
      "Compiles a job (a logical model whose tensors carry SBP annotations) for --devices into a\n"
      "physical plan: SBP inference, boxing, lowering, the split per node, the memory check.\n"
      "Writes the plan with --out, --node-plans and --dot, prints what the compiler chose with\n"
      "--explain, and otherwise a one-paragraph summary of the plan. JOB is required unless\n"
      "--list-ops is given.\n\n"
      "A job whose one-axis default placement names devices outside --devices (and that places\n"
      "nothing else itself) is placed on all of --devices instead, with a note on stderr.\n\n"
      "Exit codes: 0 compiled; 1 an output file could not be written; 2 usage error, or the job\n"
      "cannot be read or does not compile (the error names the op, or the device over budget).");
  spec.AddOptionalPositional("JOB", "the job: protobuf text format (.pbtxt) or binary (.pb)")
      .AddFlag("devices", "SPEC", "",
               "compile for these devices (required with JOB): cpu:N, cuda:all or cuda:I[,J...]")
      .AddFlag("nodes", "K", "1",
               "spread the devices evenly over K nodes (each numbering its own from the first "
               "of --devices)")
      .AddFlag("out", "PATH", "",
               "write the whole plan to PATH: binary when PATH ends in .pb, text format otherwise "
               "(then no summary is printed)")
      .AddFlag("node-plans", "DIR", "", "write each node's plan to DIR/node<k>.pbtxt")
      .AddFlag("dot", "PATH", "",
               "write the plan as a Graphviz graph to PATH (one cluster per device; render "
               "with dot -Tsvg)")
      .AddSwitch(
          "explain",
          "print every op's chosen SBP signature, every boxing with its collective and "
          "bytes, and the memory per device (registers, optimizer states, collective staging)")
      .AddSwitch("list-ops", "list the op types the compiler knows, one a line, and exit")
      .AddSwitch("verbose", "log INFO messages (default: warnings and errors only)");
  return spec;
}

absl::StatusOr<CompileOptions> CompileOptionsFrom(const cli::ParsedArguments& arguments) {
  CompileOptions options;
  options.list_ops = arguments.Switch("list-ops");
  options.explain = arguments.Switch("explain");
  options.verbose = arguments.Switch("verbose");
  if (!arguments.positionals().empty()) options.job_path = arguments.positionals()[0];
  if (options.list_ops) {
    if (!options.job_path.empty()) {
      return cli::UsageError(kCommand,
                             "--list-ops lists the op types and compiles nothing: give it no JOB");
    }
    return options;
  }
  if (options.job_path.empty()) {
    return cli::UsageError(kCommand,
                           "missing JOB; usage: loomctl compile JOB --devices cpu:N [flags]");
  }

  if (!arguments.Has("devices")) {
    return cli::UsageError(
        kCommand, "--devices is required: the devices to compile for, e.g. --devices cpu:4");
  }
  absl::StatusOr<cli::DeviceSpec> devices =
      cli::ParseDeviceSpec(kCommand, arguments.Value("devices"), CudaDeviceCount);
  if (!devices.ok()) return devices.status();
  options.devices = *std::move(devices);
  std::string nodes = arguments.Value("nodes");
  if (!absl::SimpleAtoi(nodes, &options.nodes) || options.nodes < 1) {
    return cli::UsageError(kCommand,
                           absl::StrCat("--nodes must be a whole number >= 1, not '", nodes, "'"));
  }
  if (options.nodes > options.devices.size()) {
    return cli::UsageError(kCommand,
                           absl::StrCat("--nodes ", options.nodes, " is more than the ",
                                        options.devices.size(), " devices of --devices ",
                                        options.devices.ToString(), ": every node needs a device"));
  }

  for (const auto& [flag, field] : std::vector<std::pair<std::string, std::string*>>{
           {"out", &options.plan_path},
           {"node-plans", &options.node_plan_directory},
           {"dot", &options.dot_path}}) {
    if (!arguments.Has(flag)) continue;
    *field = arguments.Value(flag);
    if (field->empty()) return cli::UsageError(kCommand, absl::StrCat("--", flag, " needs a path"));
  }
  return options;
}

std::string FormatPlanSummary(const compiler::CompileResult& result,
                              const compiler::DeviceSet& devices) {
  int64_t ops = 0;
  for (const compiler::LogicalNode& node : result.graph.nodes) {
    if (node.kind == compiler::LogicalNode::Kind::kOp) ++ops;
  }
  // Tasks by kind: the six main kinds always, any other kind when present.
  std::vector<plan::TaskKind> kinds = {plan::COMPUTE, plan::SOURCE, plan::VARIABLE,
                                       plan::SINK,    plan::COPY,   plan::COLLECTIVE};
  std::vector<int64_t> counts(plan::TaskKind_ARRAYSIZE, 0);
  for (const plan::Task& task : result.plan.tasks()) ++counts[task.kind()];
  for (int kind = 0; kind < plan::TaskKind_ARRAYSIZE; ++kind) {
    if (counts[kind] > 0 && std::find(kinds.begin(), kinds.end(), kind) == kinds.end()) {
      kinds.push_back(static_cast<plan::TaskKind>(kind));
    }
  }
  std::vector<std::string> by_kind;
  for (plan::TaskKind kind : kinds) {
    by_kind.push_back(absl::StrCat(counts[kind], " ", TaskKindName(kind)));
  }
  int64_t register_bytes = 0;
  int64_t unshared_register_bytes = 0;
  int64_t state_bytes = 0;
  int64_t staging_bytes = 0;
  int64_t largest_device_bytes = 0;
  int64_t host_bytes = 0;
  for (const compiler::DeviceMemoryEstimate& estimate :
       compiler::EstimateMemory(result.node_plans)) {
    host_bytes += estimate.parts.offloaded;
    register_bytes += estimate.register_bytes;
    unshared_register_bytes += estimate.unshared_register_bytes;
    state_bytes += estimate.state_bytes;
    staging_bytes += estimate.staging_bytes;
    largest_device_bytes = std::max(largest_device_bytes, estimate.total_bytes());
  }
  std::string summary = absl::StrCat(
      "job '", result.plan.job_name(), "' compiled for ", compiler::DescribeDevices(devices), ": ",
      FormatCount(ops, "op"), " lowered to ", FormatCount(result.plan.tasks_size(), "task"), " (",
      absl::StrJoin(by_kind, ", "), "), ",
      FormatCount(result.plan.communicators_size(), "communicator"), ", ",
      FormatCount(result.plan.registers_size(), "register"), " holding ",
      FormatBytes(register_bytes), " in total (every slot counted",
      unshared_register_bytes > register_bytes
          ? absl::StrCat(", sharing memory: ", FormatBytes(unshared_register_bytes), " apart")
          : "",
      state_bytes > 0 ? absl::StrCat(", plus ", FormatBytes(state_bytes),
                                     " of optimizer states and accumulators")
                      : "",
      staging_bytes > 0
          ? absl::StrCat(", plus ", FormatBytes(staging_bytes), " of collective staging")
          : "",
      "; at most ", FormatBytes(largest_device_bytes), " on one device",
      host_bytes > 0
          ? absl::StrCat("; ", FormatBytes(host_bytes), " of offloaded activations in host memory")
          : "",
      "), ", FormatCount(static_cast<int64_t>(result.node_plans.size()), "node plan"), ".");
  return WrapParagraph(summary, 100) + "\n";
}

compiler::CompileOptions ProgressTo(std::ostream& error, absl::string_view command,
                                    const std::string& job_path) {
  compiler::CompileOptions options;
  options.progress = [&error, command = std::string(command), job_path](absl::string_view line) {
    error << command << ": " << job_path << ": " << line << "\n";
    error.flush();
  };
  return options;
}

int CompileJob(const CompileOptions& options, std::ostream& out, std::ostream& error) {
  SetLogVerbosity(options.verbose);
  if (options.list_ops) {
    compiler::OpRegistry registry;
    if (absl::Status status = compiler::RegisterStandardOps(&registry); !status.ok()) {
      error << kCommand << ": cannot register the standard ops: " << status << "\n";
      return cli::kExitFailure;
    }
    for (const std::string& op_type : registry.OpTypes()) out << op_type << "\n";
    out.flush();
    return cli::kExitSuccess;
  }

  compiler::DeviceSet devices = options.devices.Spread(options.nodes);
  std::string note;
  absl::StatusOr<job::Job> job =
      compiler::ReadJobForDevices(options.job_path, devices, /*steps=*/0, &note);
  if (!note.empty()) error << kCommand << ": note: " << note << "\n";
  absl::StatusOr<std::unique_ptr<compiler::CompiledJob>> compiled =
      job.ok() ? compiler::CompileJobWithStandardOps(std::move(*job), devices,
                                                     ProgressTo(error, kCommand, options.job_path))
               : absl::StatusOr<std::unique_ptr<compiler::CompiledJob>>(job.status());
  if (!compiled.ok()) {
    error << kCommand << ": " << options.job_path << ": " << compiled.status().message() << "\n";
    return cli::kExitUsage;
  }
  const compiler::CompileResult& result = (*compiled)->result;
  LOG(INFO) << "compiled job '" << result.plan.job_name() << "' from " << options.job_path
            << " into " << result.plan.tasks_size() << " tasks on " << result.plan.devices_size()
            << " devices";

  int exit_code = cli::kExitSuccess;
  std::vector<std::string> written;
  if (!options.plan_path.empty()) {
    if (absl::Status status = WritePlanFile(result.plan, options.plan_path); status.ok()) {
      written.push_back(absl::StrCat("plan: ", options.plan_path));
    } else {
      error << kCommand << ": " << status.message() << "\n";
      exit_code = cli::kExitFailure;
    }
  }
  if (!options.node_plan_directory.empty()) {
    std::error_code error_code;
    std::filesystem::create_directories(options.node_plan_directory, error_code);
    if (error_code) {
      error << kCommand << ": cannot create the node plan directory '"
            << options.node_plan_directory << "': " << error_code.message() << "\n";
      exit_code = cli::kExitFailure;
    } else {
      int files = 0;
      for (const plan::Plan& node_plan : result.node_plans) {
        std::string path = (std::filesystem::path(options.node_plan_directory) /
                            absl::StrCat("node", node_plan.node(), ".pbtxt"))
                               .string();
        if (absl::Status status = WritePlanFile(node_plan, path); !status.ok()) {
          error << kCommand << ": " << status.message() << "\n";
          exit_code = cli::kExitFailure;
          continue;
        }
        ++files;
      }
      written.push_back(absl::StrCat("node plans: ", FormatCount(files, "file"), " in ",
                                     options.node_plan_directory));
    }
  }
  if (!options.dot_path.empty()) {
    if (absl::Status status = WriteTextFile(options.dot_path, compiler::PlanToDot(result.plan));
        status.ok()) {
      written.push_back(absl::StrCat("dot: ", options.dot_path));
    } else {
      error << kCommand << ": " << status.message() << "\n";
      exit_code = cli::kExitFailure;
    }
  }

  if (options.explain) out << compiler::Explain(result);
  if (options.plan_path.empty()) out << FormatPlanSummary(result, devices);
  for (const std::string& line : written) out << line << "\n";
  out.flush();
  return exit_code;
}

}  // namespace loom::loomctl
