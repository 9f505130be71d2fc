#include "compiler/compiler.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "compiler/act_order.h"
#include "compiler/activation_offload.h"
#include "compiler/autodiff.h"
#include "compiler/boxing.h"
#include "compiler/evaluation_branch.h"
#include "compiler/gradient_clipping.h"
#include "compiler/lowering.h"
#include "compiler/memory_plan.h"
#include "compiler/memory_sharing.h"
#include "compiler/mixed_precision.h"
#include "compiler/node_split.h"
#include "compiler/parallel_for.h"
#include "compiler/pieces_per_step.h"
#include "compiler/sbp_inference.h"
#include "compiler/step_proof.h"
#include "compiler/zero_sharding.h"
#include "core/device_key.h"
#include "core/device_name.h"
#include "core/file_contents.h"
#include "core/format_bytes.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"

namespace loom::compiler {

namespace {

// Job.offload_activations and Op.offload: known values, and only in a training job.
absl::Status CheckOffloadSettings(const job::Job& job) {
  if (!job::OffloadActivations_IsValid(job.offload_activations())) {
    return absl::InvalidArgumentError(
        absl::StrCat("offload_activations is ", job.offload_activations(),
                     ", not one of OFFLOAD_NONE, OFFLOAD_ALL and OFFLOAD_OVER_BUDGET"));
  }
  for (const job::Op& op : job.ops()) {
    if (!job::OpOffload_IsValid(op.offload())) {
      return absl::InvalidArgumentError(absl::StrCat("op '", op.name(), "' sets offload to ",
                                                     op.offload(), ", which is no OpOffload"));
    }
  }
  if (job.loss().empty()) {
    const bool asked = job.offload_activations() != job::OFFLOAD_NONE ||
                       std::any_of(job.ops().begin(), job.ops().end(), [](const job::Op& op) {
                         return op.offload() == job::OP_OFFLOAD_ALWAYS;
                       });
    if (asked) {
      return absl::InvalidArgumentError(
          "activations are offloaded (offload_activations or Op.offload), but the job has no "
          "loss to train: only what a backward reads is offloaded");
    }
  }
  return absl::OkStatus();
}

// LowerJob, offloading also the stashes that the backward ops named in `offload_readers` read
// (OFFLOAD_OVER_BUDGET's choice; null: none); without the orders for memory where `order_acts`
// is false.
absl::StatusOr<CompileResult> LowerJobOffloading(
    const job::Job& job, const OpRegistry& registry, const DeviceSet& devices,
    const CompileOptions& options, const absl::flat_hash_set<std::string>* offload_readers,
    bool order_acts = true) {
  if (absl::Status status = CheckOffloadSettings(job); !status.ok()) return status;
  CompileResult result;
  const job::Job* compiled = &job;
  absl::StatusOr<std::optional<job::Job>> evaluated = AddEvaluationBranch(job);
  if (!evaluated.ok()) return evaluated.status();
  if (evaluated->has_value()) {
    result.transformed_job = std::make_unique<job::Job>(std::move(**evaluated));
    compiled = result.transformed_job.get();
  }
  if (job.matmul_data_type() != plan::DATA_TYPE_UNSPECIFIED &&
      job.matmul_data_type() != plan::FLOAT32) {
    absl::StatusOr<job::Job> cast = AddMixedPrecisionCasts(*compiled, registry, devices);
    if (!cast.ok()) return cast.status();
    result.transformed_job = std::make_unique<job::Job>(std::move(*cast));
    compiled = result.transformed_job.get();
  }
  if (!job.loss().empty()) {
    absl::StatusOr<job::Job> training = AddBackward(*compiled, registry, devices, job.loss());
    if (!training.ok()) return training.status();
    if (job.max_grad_norm() != 0) {
      training = AddGradientClipping(*training, job.max_grad_norm());
      if (!training.ok()) return training.status();
    }
    *training = OffloadActivations(*training, [&](const job::Op& producer, const job::Op& reader) {
      if (producer.offload() == job::OP_OFFLOAD_NEVER) return false;
      return OffloadedBySettings(job, producer) ||
             (offload_readers != nullptr && offload_readers->contains(reader.name()));
    });
    result.transformed_job = std::make_unique<job::Job>(std::move(*training));
    compiled = result.transformed_job.get();
  } else if (job.max_grad_norm() != 0) {
    return absl::InvalidArgumentError("max_grad_norm is set, but the job has no loss to train");
  } else if (job.recompute() != job::RECOMPUTE_NONE) {
    return absl::InvalidArgumentError(absl::StrCat("recompute is ",
                                                   job::Recompute_Name(job.recompute()),
                                                   ", but the job has no loss to train"));
  }
  absl::StatusOr<LogicalGraph> graph = BuildLogicalGraph(*compiled, registry, devices);
  if (!graph.ok()) return graph.status();
  result.graph = std::move(*graph);
  if (absl::Status status = InferSbp(&result.graph); !status.ok()) return status;
  if (absl::Status status = ShardOverDataParallel(job, &result.graph); !status.ok()) return status;
  absl::StatusOr<plan::Plan> plan = LowerToPlan(result.graph, devices, options.max_tasks);
  if (!plan.ok()) return plan.status();
  result.plan = std::move(*plan);
  SetPiecesPerStep(result.plan);
  result.plan.set_first_step(result.graph.first_step);
  if (result.graph.evaluation_every_steps > 0) {
    result.plan.set_evaluation_every_steps(result.graph.evaluation_every_steps);
    MarkEvaluationTasks(result.plan, result.graph.evaluation_every_steps, result.graph.first_step);
  }
  if (order_acts && !job.loss().empty() && job.register_memory() != job::REGISTER_MEMORY_SEPARATE) {
    OrderActsForMemory(*compiled, result.plan);
  }
  return result;
}

// Compile's passes but the memory check.
absl::StatusOr<CompileResult> PlanJob(
    const job::Job& job, const OpRegistry& registry, const DeviceSet& devices,
    const CompileOptions& options,
    const absl::flat_hash_set<std::string>* offload_readers = nullptr) {
  absl::StatusOr<CompileResult> lowered =
      LowerJobOffloading(job, registry, devices, options, offload_readers);
  if (!lowered.ok()) return lowered.status();
  CompileResult& result = *lowered;
  const int threads = options.threads > 0 ? options.threads : DefaultCompileThreads();
  if (absl::Status status = OrderCollectivesToFinish(result.plan, threads); !status.ok()) {
    // The orders for memory follow each device's own data; should they contradict a wait through
    // other devices that the compiler did not foresee, the plan without them (registers that
    // share less) is the one to admit, if it finishes.
    if (!absl::IsFailedPrecondition(status)) return status;
    absl::StatusOr<CompileResult> unordered =
        LowerJobOffloading(job, registry, devices, options, offload_readers, /*order_acts=*/false);
    if (!unordered.ok() || !OrderCollectivesToFinish(unordered->plan, threads).ok()) {
      return status;
    }
    if (options.progress) {
      options.progress(absl::StrCat("the orders for memory would keep the plan from finishing (",
                                    status.message(),
                                    "); compiled without them, its registers share less"));
    }
    result = std::move(*unordered);
  }
  result.node_plans = SplitByNode(result.plan, threads);
  if (job.register_memory() != job::REGISTER_MEMORY_SEPARATE) {
    ShareRegisterMemory(result.node_plans, threads);
    CopyRegisterPlacement(result.node_plans, result.plan);
  }
  return lowered;
}

}  // namespace

absl::StatusOr<CompileResult> LowerJob(const job::Job& job, const OpRegistry& registry,
                                       const DeviceSet& devices, const CompileOptions& options) {
  return LowerJobOffloading(job, registry, devices, options, nullptr);
}

namespace {

// The most any device of `plans` needs.
int64_t LargestDeviceEstimate(absl::Span<const plan::Plan> plans, int threads) {
  int64_t most = 0;
  for (const DeviceMemoryEstimate& estimate : EstimateMemory(plans, threads)) {
    most = std::max(most, estimate.total_bytes());
  }
  return most;
}

// For a training job refused for memory (its devices needing up to `needed` bytes): the options
// of ZeRO, recomputation and activation offload it does not use yet, cheapest first (ZeRO stage
// 2 adds no compute; SELECTIVE recomputes elementwise ops, FULL whole blocks; offload moves every
// stash over the host's memory bus and is tried last: alone, with FULL, with FULL and ZeRO-3),
// each compiled, up to the first that fits; those that would not shrink the job are left out. ""
// when nothing applies.
std::string MemoryAdvice(const job::Job& job, int64_t needed, const OpRegistry& registry,
                         const DeviceSet& devices, const CompileOptions& options) {
  if (job.loss().empty()) return "";
  const bool has_blocks = std::any_of(job.ops().begin(), job.ops().end(),
                                      [](const job::Op& op) { return !op.block().empty(); });
  struct Candidate {
    int zero_stage;
    job::Recompute recompute;
    job::OffloadActivations offload;
    bool operator==(const Candidate&) const = default;
  };
  // By recomputation's cost, then ZeRO's: stage 2 adds no communication, 3 a gather per use.
  std::vector<Candidate> candidates;
  auto add = [&](Candidate candidate) {
    if (std::find(candidates.begin(), candidates.end(), candidate) == candidates.end()) {
      candidates.push_back(candidate);
    }
  };
  for (job::Recompute recompute :
       {job.recompute(), job::RECOMPUTE_SELECTIVE, job::RECOMPUTE_FULL}) {
    for (int zero_stage : {job.zero_stage(), std::max(job.zero_stage(), 2), 3}) {
      add({zero_stage, recompute, job.offload_activations()});
    }
  }
  if (job.offload_activations() != job::OFFLOAD_ALL) {
    const job::Recompute most_recompute =
        has_blocks ? std::max(job.recompute(), job::RECOMPUTE_FULL) : job.recompute();
    add({job.zero_stage(), job.recompute(), job::OFFLOAD_ALL});
    add({job.zero_stage(), most_recompute, job::OFFLOAD_ALL});
    add({3, most_recompute, job::OFFLOAD_ALL});
  }
  const int threads = options.threads > 0 ? options.threads : DefaultCompileThreads();
  std::vector<std::string> tried;
  // What each recompute and offload setting needs without more ZeRO: ZeRO is offered only where
  // it gains.
  std::map<std::pair<job::Recompute, job::OffloadActivations>, int64_t> without_zero = {
      {{job.recompute(), job.offload_activations()}, needed}};
  std::erase_if(candidates, [&](const Candidate& candidate) {
    return candidate == Candidate{job.zero_stage(), job.recompute(), job.offload_activations()} ||
           candidate.recompute < job.recompute() ||
           (candidate.recompute != job.recompute() && !has_blocks);
  });
  for (size_t index = 0; index < candidates.size(); ++index) {
    const auto [zero_stage, recompute, offload] = candidates[index];
    std::vector<std::string> settings;
    if (zero_stage != job.zero_stage())
      settings.push_back(absl::StrCat("zero_stage: ", zero_stage));
    if (recompute != job.recompute()) {
      settings.push_back(absl::StrCat("recompute: ", job::Recompute_Name(recompute)));
    }
    if (offload != job.offload_activations()) {
      settings.push_back(
          absl::StrCat("offload_activations: ", job::OffloadActivations_Name(offload)));
    }
    const std::string name = absl::StrJoin(settings, " and ");
    if (options.progress) {
      options.progress(absl::StrCat("over its memory budget; compiling it with ", name, " (",
                                    index + 1, " of at most ", candidates.size(), ")"));
    }
    job::Job alternative = job;
    alternative.set_zero_stage(zero_stage);
    alternative.set_recompute(recompute);
    alternative.set_offload_activations(offload);
    absl::StatusOr<CompileResult> planned = PlanJob(alternative, registry, devices, options);
    if (!planned.ok()) continue;
    const int64_t most = LargestDeviceEstimate(planned->node_plans, threads);
    if (zero_stage == job.zero_stage()) without_zero[{recompute, offload}] = most;
    auto baseline = without_zero.find({recompute, offload});
    if (most >= needed || (zero_stage != job.zero_stage() && baseline != without_zero.end() &&
                           most >= baseline->second)) {
      continue;
    }
    int64_t host = 0;
    for (const DeviceMemoryEstimate& estimate : EstimateMemory(planned->node_plans, threads)) {
      host = std::max(host, estimate.parts.offloaded);
    }
    const std::string host_text =
        host > 0 ? absl::StrCat(" and up to ", FormatBytes(host), " of host memory per device")
                 : "";
    if (CheckMemory(planned->node_plans, threads).ok()) {
      return absl::StrCat(" It fits with ", name, " (at most ", FormatBytes(most), " per device",
                          host_text, tried.empty() ? "" : "; ", absl::StrJoin(tried, "; "), ").");
    }
    tried.push_back(
        absl::StrCat(name, " would need up to ", FormatBytes(most), " per device", host_text));
  }
  if (tried.empty()) return "";
  return absl::StrCat(
      " ZeRO, recomputation and offload do not make it fit: ", absl::StrJoin(tried, "; "), ".");
}

// OFFLOAD_OVER_BUDGET: the backward ops (by name) that run on a device of `planned` over its
// budget, whose stashes the compiler then offloads.
absl::flat_hash_set<std::string> ReadersOverBudget(const CompileResult& planned, int threads) {
  absl::flat_hash_set<DeviceKey> over;
  for (const DeviceMemoryEstimate& estimate : EstimateMemory(planned.node_plans, threads)) {
    if (estimate.budget_bytes > 0 && estimate.total_bytes() > estimate.budget_bytes) {
      over.insert(DeviceKey::Of(estimate.device));
    }
  }
  absl::flat_hash_set<std::string> readers;
  for (const LogicalNode& node : planned.graph.nodes) {
    if (!node.backward || node.op == nullptr) continue;
    for (int rank = 0; rank < node.placement.size(); ++rank) {
      if (over.contains(DeviceKey::Of(node.placement.device(rank)))) {
        readers.insert(node.name);
        break;
      }
    }
  }
  return readers;
}

}  // namespace

absl::StatusOr<CompileResult> Compile(const job::Job& job, const OpRegistry& registry,
                                      const DeviceSet& devices, const CompileOptions& options) {
  absl::StatusOr<CompileResult> planned = PlanJob(job, registry, devices, options);
  if (!planned.ok()) return planned.status();
  const int threads = options.threads > 0 ? options.threads : DefaultCompileThreads();
  absl::Status status = CheckMemory(planned->node_plans, threads);
  if (status.code() == absl::StatusCode::kResourceExhausted &&
      job.offload_activations() == job::OFFLOAD_OVER_BUDGET) {
    const absl::flat_hash_set<std::string> readers = ReadersOverBudget(*planned, threads);
    if (!readers.empty()) {
      planned = PlanJob(job, registry, devices, options, &readers);
      if (!planned.ok()) return planned.status();
      status = CheckMemory(planned->node_plans, threads);
    }
  }
  if (!status.ok()) {
    if (status.code() != absl::StatusCode::kResourceExhausted) return status;
    const int64_t needed = LargestDeviceEstimate(planned->node_plans, threads);
    return absl::ResourceExhaustedError(
        absl::StrCat(status.message(), MemoryAdvice(job, needed, registry, devices, options)));
  }
  return planned;
}

std::string Explain(const CompileResult& result) {
  const LogicalGraph& graph = result.graph;
  std::string text;
  double total_bytes = 0;
  for (const LogicalNode& node : graph.nodes) {
    if (node.kind != LogicalNode::Kind::kOp) {
      absl::StrAppend(&text, node.kind == LogicalNode::Kind::kVariable ? "variable " : "input ",
                      node.name, " ", graph.tensors[node.outputs[0]].type.ToString(), " ",
                      NdSbpToString(graph.tensors[node.outputs[0]].sbp), " on ",
                      node.placement.ToString(), "\n");
      continue;
    }
    std::vector<std::string> inputs;
    std::vector<std::string> outputs;
    for (const NdSbp& sbp : node.input_sbp) inputs.push_back(NdSbpToString(sbp));
    for (int output : node.outputs) outputs.push_back(NdSbpToString(graph.tensors[output].sbp));
    absl::StrAppend(&text, "op ", node.name, " (", node.op_type, ") on ", node.placement.ToString(),
                    ": (", absl::StrJoin(inputs, ", "), ") -> (", absl::StrJoin(outputs, ", "),
                    ")\n");
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const LogicalTensor& tensor = graph.tensors[node.inputs[i]];
      const Placement& from = graph.nodes[tensor.producer].placement;
      absl::StatusOr<BoxingPlan> boxing =
          PlanBoxing(tensor.type, from, tensor.sbp, node.placement, node.input_sbp[i]);
      if (!boxing.ok() || boxing->empty()) continue;
      total_bytes += boxing->bytes;
      absl::StrAppend(&text, "  boxing of input '", tensor.name, "' ", tensor.type.ToString(), ": ",
                      NdSbpToString(tensor.sbp), " -> ", NdSbpToString(node.input_sbp[i]), ", ",
                      FormatBytes(static_cast<int64_t>(boxing->bytes)), " per rank\n");
      for (const BoxingStep& step : boxing->source_steps) {
        absl::StrAppend(&text, "    ", step.ToString(), ": ",
                        FormatBytes(static_cast<int64_t>(step.bytes)), "\n");
      }
      if (boxing->crosses_placements) {
        absl::StrAppend(&text, "    ",
                        boxing->one_to_one ? "one-to-one copies" : "copies from source rank 0", " ",
                        from.ToString(), " -> ", node.placement.ToString(), "\n");
      }
      for (const BoxingStep& step : boxing->destination_steps) {
        absl::StrAppend(&text, "    ", step.ToString(), ": ",
                        FormatBytes(static_cast<int64_t>(step.bytes)), "\n");
      }
    }
  }
  absl::StrAppend(&text, "boxing in total: ", FormatBytes(static_cast<int64_t>(total_bytes)),
                  " per rank and step\nmemory:\n");
  for (const DeviceMemoryEstimate& estimate : EstimateMemory(result.node_plans)) {
    absl::StrAppend(
        &text, "  ", DeviceName(estimate.device), ": ", FormatBytes(estimate.register_bytes),
        " of registers",
        estimate.unshared_register_bytes > estimate.register_bytes
            ? absl::StrCat(" (", FormatBytes(estimate.unshared_register_bytes),
                           " apart: registers share memory)")
            : "",
        estimate.state_bytes > 0 ? absl::StrCat(", ", FormatBytes(estimate.state_bytes),
                                                " of optimizer states and accumulators")
                                 : "",
        estimate.staging_bytes > 0
            ? absl::StrCat(", ", FormatBytes(estimate.staging_bytes), " of collective staging")
            : "",
        estimate.parts.offloaded > 0 ? absl::StrCat(", and ", FormatBytes(estimate.parts.offloaded),
                                                    " of offloaded activations in host memory")
                                     : "",
        estimate.budget_bytes > 0
            ? absl::StrCat(" (budget ", FormatBytes(estimate.budget_bytes), ")")
            : "",
        "\n    by what it holds: ", DescribeMemoryParts(estimate.parts), "\n");
  }
  return text;
}

std::string PlanToDot(const plan::Plan& plan) {
  auto quote = [](const std::string& text) {
    return absl::StrCat("\"", absl::StrReplaceAll(text, {{"\"", "\\\""}}), "\"");
  };
  std::string dot = absl::StrCat("digraph ", quote(plan.job_name()), " {\n  rankdir=LR;\n");
  absl::flat_hash_map<std::string, std::vector<const plan::Task*>> by_device;
  std::vector<std::string> device_order;
  for (const plan::Task& task : plan.tasks()) {
    std::string device = DeviceName(task.stream().device());
    if (!by_device.contains(device)) device_order.push_back(device);
    by_device[device].push_back(&task);
  }
  absl::flat_hash_map<std::string, std::string> producer;
  for (const plan::Task& task : plan.tasks()) {
    for (const std::string& output : task.outputs()) producer[output] = task.name();
  }
  int cluster = 0;
  for (const std::string& device : device_order) {
    absl::StrAppend(&dot, "  subgraph cluster_", cluster++, " {\n    label=", quote(device), ";\n");
    for (const plan::Task* task : by_device[device]) {
      std::string label = task->kind() == plan::COLLECTIVE
                              ? absl::StrCat(task->name(), "\\n", task->collective().communicator())
                              : task->name();
      absl::StrAppend(&dot, "    ", quote(task->name()), " [label=", quote(label),
                      task->kind() == plan::COLLECTIVE ? ", shape=box, style=filled" : "", "];\n");
    }
    absl::StrAppend(&dot, "  }\n");
  }
  for (const plan::Task& task : plan.tasks()) {
    const int first_ordering = task.inputs_size() - task.ordering_inputs();
    for (int i = 0; i < task.inputs_size(); ++i) {
      auto found = producer.find(task.inputs(i));
      if (found == producer.end()) continue;
      // Ordering inputs (compiler/act_order.h) dashed: an order, not data.
      absl::StrAppend(&dot, "  ", quote(found->second), " -> ", quote(task.name()),
                      i >= first_ordering ? " [style=dashed]"
                                          : absl::StrCat(" [label=", quote(task.inputs(i)), "]"),
                      ";\n");
    }
  }
  absl::StrAppend(&dot, "}\n");
  return dot;
}

namespace {

class CollectingErrors final : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    if (!errors.empty()) errors += "; ";
    absl::StrAppend(&errors, "line ", line + 1, ", column ", column + 1, ": ", message);
  }
  std::string errors;
};

}  // namespace

absl::StatusOr<job::Job> ReadJobFile(const std::string& path) {
  absl::StatusOr<std::string> contents = ReadFileContents(path);
  if (!contents.ok()) return contents.status();
  job::Job job;
  if (absl::EndsWith(path, ".pb")) {
    if (!job.ParseFromString(*contents)) {
      return absl::InvalidArgumentError(absl::StrCat(path, " is not a binary job"));
    }
    return job;
  }
  if (absl::EndsWith(path, ".json")) {
    // The proto3 JSON mapping (what grpcurl and protobuf's JSON printers write).
    auto status = google::protobuf::util::JsonStringToMessage(*contents, &job);
    if (!status.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, " is not a valid JSON job: ", status.ToString()));
    }
    return job;
  }
  google::protobuf::TextFormat::Parser parser;
  CollectingErrors errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(*contents, &job)) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a valid job: ", errors.errors));
  }
  return job;
}

}  // namespace loom::compiler
