// loom-gpt: the reference GPT of Loom's training work as a job for `loomctl run`, and its initial
// weights as a safetensors checkpoint.
//
//   loom-gpt --emit gpt.pbtxt --write-init init.safetensors --dp 2 --tp 2
//   loomctl run gpt.pbtxt --devices cpu:4 --init init.safetensors
#include <algorithm>
#include <fstream>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cli/arguments.h"
#include "google/protobuf/text_format.h"
#include "tools/loom-gpt/gpt_model.h"

namespace loom::gpt {
namespace {

constexpr char kCommand[] = "loom-gpt";

// --schedule's names (docs/ARCHITECTURE.md, "Pipelines").
constexpr std::pair<const char*, job::PipelineSchedule> kSchedules[] = {
    {"1f1b", job::ONE_F_ONE_B},        {"gpipe", job::GPIPE},
    {"zero-bubble", job::ZERO_BUBBLE}, {"zb-h2", job::ZERO_BUBBLE_H2},
    {"interleaved", job::INTERLEAVED}, {"zb-v", job::ZERO_BUBBLE_V}};

// "1f1b | gpipe | ...".
std::string ScheduleNames() {
  std::vector<std::string> names;
  for (const auto& [name, schedule] : kSchedules) names.push_back(name);
  return absl::StrJoin(names, " | ");
}

cli::ArgumentSpec MakeSpec() {
  const GptConfig defaults;
  cli::ArgumentSpec spec(
      kCommand,
      "Writes the reference GPT (tests/oracle/models.py) as a Loom job for `loomctl run` "
      "(--emit) and its seeded initial weights as safetensors (--write-init). Defaults: the "
      "\"tiny\" model (byte vocabulary 256, context 64, width 128, 4 layers, 4 heads, MLP 512), "
      "global batch 16, AdamW lr 1e-3, betas (0.9, 0.95), weight decay 0.1. The job uses "
      "pp x dp x tp devices: stage s on cpu:[s*dp*tp, (s+1)*dp*tp), seen as [dp, tp] when both "
      "exceed 1.");
  auto number = [](auto value) { return absl::StrCat(value); };
  spec.AddFlag("emit", "PATH", "", "write the job (text format) to PATH ('-': stdout)")
      .AddFlag("write-init", "PATH", "", "write the initial weights (safetensors, F32) to PATH")
      .AddRepeatedFlag("data", "PATH",
                       "the token data: a token file, a directory of them or a glob pattern "
                       "(quoted); several --data make a blend (default " +
                           defaults.data_paths.front() + ")")
      .AddFlag("data-weights", "W,W,...", "",
               "the blend's weights, one per --data (default: equal)")
      .AddFlag("data-format", "FORMAT", defaults.data_format,
               "bytes | uint16 | uint32 (little-endian; scripts/tokenize writes them)")
      .AddFlag("eot-token", "ID", "",
               "the end-of-text token that ends each document (default: each file is one)")
      .AddSwitch("data-in-order",
                 "read documents and samples in order instead of shuffling them each epoch")
      .AddFlag("data-seed", "S", "0", "seed of the data's per-epoch shuffles")
      .AddFlag("eval-every", "K", "0",
               "every K steps (from step 1), the validation loss on a batch of --eval-data")
      .AddRepeatedFlag("eval-data", "PATH",
                       "held-out token data for --eval-every (as --data; several: equal blend)")
      .AddFlag("dp", "N", "1", "data-parallel degree")
      .AddFlag("tp", "N", "1", "tensor-parallel degree (Megatron layout; divides heads)")
      .AddFlag("pp", "N", "1", "pipeline stages (blocks split evenly; <= layers)")
      .AddFlag("micro-batches", "M", "1", "micro-batches per step (divides batch / dp)")
      .AddFlag("schedule", "NAME", "1f1b",
               "pipeline schedule: " + ScheduleNames() +
                   " (zero-bubble is ZB-H1; interleaved with --virtual-stages; zb-v puts two "
                   "stages V-shaped on each device group: 2 * pp stages)")
      .AddFlag("virtual-stages", "V", "1",
               "interleaved 1F1B: V stages on each of the --pp device groups (pp * V stages in "
               "all, stage k on group k % pp; blocks split evenly over them)")
      .AddFlag("devices-per-node", "K", "0",
               "spread the devices over nodes, K per node (node<i/K>/cpu:<i%K>), for a cluster "
               "of loomd processes; 0: all on one node")
      .AddFlag("device-type", "TYPE", "cpu",
               "cpu | cuda: the devices the job is placed on (cuda:<i>, token batches read on "
               "cpu:<i>)")
      .AddFlag("max-grad-norm", "X", "0", "clip the gradients' global L2 norm to X (0: off)")
      .AddFlag("zero-stage", "N", "0",
               "0 | 1 | 2 | 3: ZeRO as SBP, the trained variables and their optimizer states "
               "split over the data-parallel ranks (gradients reduce-scattered; values "
               "all-gathered once a step, or under 3 for each use, one use ahead)")
      .AddFlag("recompute", "WHAT", "none",
               "none | selective | full: activation recomputation in the backward; selective: "
               "each block's cheap ops (LayerNorm, GELU, adds, reshapes), keeping matmul and "
               "attention outputs; full: each block from its input")
      .AddFlag("offload-activations", "WHICH", "none",
               "none | all | over-budget: copy the activations the backward reads to host "
               "memory after the forward and back before the backward (all of them, or those "
               "of the devices that would be over their memory budget)")
      .AddFlag("matmul-data-type", "TYPE", "float32",
               "float32 | bfloat16: mixed precision, every matmul (forward and backward) on "
               "bfloat16 copies of its inputs with float32 accumulation; weights, gradients and "
               "optimizer state stay float32")
      .AddFlag("experts", "E", "0",
               "experts of each MoE MLP (0: dense MLPs only); the MoE GPT of the expert work is "
               "--experts 4 (top-2, capacity factor 1.25, MoE blocks 1 and 3)")
      .AddFlag("moe-layers", "LIST", "1,3", "the blocks (0-based, comma-separated) with an MoE MLP")
      .AddFlag("top-k", "K", "2", "experts per token (1 or 2)")
      .AddFlag("capacity-factor", "X", "1.25",
               "each expert takes at most ceil(X * context * top-k / experts) tokens per sequence")
      .AddFlag("aux-loss-coefficient", "X", "0.01",
               "weight of the load-balancing loss (Switch Transformer) added to the loss")
      .AddFlag("ep", "N", "1",
               "expert-parallel degree: experts split over groups of N data-parallel ranks "
               "(divides --dp; --dp 4 --ep 2 is [2 groups, 2 experts' ranks])")
      .AddFlag("batch", "B", number(defaults.batch), "global batch")
      .AddFlag("steps", "N", number(defaults.steps), "training steps of the job")
      .AddFlag("vocab", "V", number(defaults.vocab), "vocabulary size")
      .AddFlag("context", "T", number(defaults.context), "context = sequence length")
      .AddFlag("width", "D", number(defaults.width), "model width")
      .AddFlag("layers", "L", number(defaults.layers), "transformer blocks")
      .AddFlag("heads", "H", number(defaults.heads), "attention heads")
      .AddFlag("mlp-width", "F", number(defaults.mlp_width), "MLP hidden width")
      .AddFlag("ln-eps", "X", "1e-05", "LayerNorm epsilon")
      .AddFlag("lr", "X", "0.001", "AdamW learning rate")
      .AddFlag("beta1", "X", "0.9", "AdamW beta1")
      .AddFlag("beta2", "X", "0.95", "AdamW beta2")
      .AddFlag("eps", "X", "1e-08", "AdamW epsilon")
      .AddFlag("weight-decay", "X", "0.1", "AdamW weight decay")
      .AddFlag("weight-decay-on", "WHICH", "all",
               "all | matrices: 'matrices' puts biases, LayerNorm weights and the embeddings in a "
               "parameter group without weight decay")
      .AddFlag("no-decay-lr-scale", "X", "1",
               "with --weight-decay-on matrices: that group's learning rate is lr times X")
      .AddFlag("lr-warmup", "N", "0", "steps of linear learning-rate warmup")
      .AddFlag("lr-decay", "KIND", "constant",
               "constant | linear | cosine: the learning rate's decay after the warmup")
      .AddFlag("lr-decay-steps", "N", "0",
               "the step at which the decay reaches --min-lr (warmup included; 0: --steps)")
      .AddFlag("min-lr", "X", "0", "the learning rate's floor at the end of the decay")
      .AddFlag("seed", "N", number(defaults.seed), "seed of the initial weights");
  return spec;
}

absl::Status ParseInt(const cli::ParsedArguments& parsed, const std::string& flag, int64_t* value) {
  if (!absl::SimpleAtoi(parsed.Value(flag), value)) {
    return cli::UsageError(
        kCommand, absl::StrCat("--", flag, " needs an integer, got '", parsed.Value(flag), "'"));
  }
  return absl::OkStatus();
}

absl::Status ParseDouble(const cli::ParsedArguments& parsed, const std::string& flag,
                         double* value) {
  if (!absl::SimpleAtod(parsed.Value(flag), value)) {
    return cli::UsageError(
        kCommand, absl::StrCat("--", flag, " needs a number, got '", parsed.Value(flag), "'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<GptConfig> ConfigFromArguments(const cli::ParsedArguments& parsed) {
  GptConfig config;
  const std::pair<const char*, int64_t*> integers[] = {
      {"dp", &config.data_parallel},
      {"tp", &config.tensor_parallel},
      {"pp", &config.pipeline_stages},
      {"virtual-stages", &config.virtual_stages},
      {"micro-batches", &config.micro_batches},
      {"batch", &config.batch},
      {"steps", &config.steps},
      {"vocab", &config.vocab},
      {"context", &config.context},
      {"width", &config.width},
      {"layers", &config.layers},
      {"heads", &config.heads},
      {"mlp-width", &config.mlp_width},
      {"seed", &config.seed},
      {"devices-per-node", &config.devices_per_node},
      {"experts", &config.experts},
      {"top-k", &config.top_k},
      {"ep", &config.expert_parallel},
      {"lr-warmup", &config.lr_warmup_steps},
      {"lr-decay-steps", &config.lr_decay_steps},
      {"data-seed", &config.data_seed},
      {"eval-every", &config.eval_every},
      {"zero-stage", &config.zero_stage},
  };
  for (const auto& [flag, value] : integers) {
    if (absl::Status status = ParseInt(parsed, flag, value); !status.ok()) return status;
  }
  const std::pair<const char*, double*> reals[] = {
      {"max-grad-norm", &config.max_grad_norm},
      {"ln-eps", &config.layer_norm_epsilon},
      {"lr", &config.learning_rate},
      {"beta1", &config.beta1},
      {"beta2", &config.beta2},
      {"eps", &config.adam_epsilon},
      {"weight-decay", &config.weight_decay},
      {"capacity-factor", &config.capacity_factor},
      {"aux-loss-coefficient", &config.aux_loss_coefficient},
      {"min-lr", &config.min_learning_rate},
      {"no-decay-lr-scale", &config.no_decay_lr_scale},
  };
  for (const auto& [flag, value] : reals) {
    if (absl::Status status = ParseDouble(parsed, flag, value); !status.ok()) return status;
  }
  config.moe_layers.clear();
  for (absl::string_view item :
       absl::StrSplit(parsed.Value("moe-layers"), ',', absl::SkipEmpty())) {
    int64_t layer = 0;
    if (!absl::SimpleAtoi(item, &layer)) {
      return cli::UsageError(kCommand,
                             absl::StrCat("--moe-layers needs comma-separated block indices, "
                                          "got '",
                                          parsed.Value("moe-layers"), "'"));
    }
    config.moe_layers.push_back(layer);
  }
  const std::string matmul_data_type = parsed.Value("matmul-data-type");
  if (matmul_data_type == "bfloat16") {
    config.matmul_data_type = plan::BFLOAT16;
  } else if (matmul_data_type != "float32") {
    return cli::UsageError(kCommand,
                           absl::StrCat("--matmul-data-type must be float32 or bfloat16, got '",
                                        matmul_data_type, "'"));
  }
  config.lr_decay = parsed.Value("lr-decay");
  config.weight_decay_on = parsed.Value("weight-decay-on");
  config.device_type = parsed.Value("device-type");
  if (std::vector<std::string> paths = parsed.Values("data"); !paths.empty()) {
    config.data_paths = std::move(paths);
  }
  for (absl::string_view item :
       absl::StrSplit(parsed.Value("data-weights"), ',', absl::SkipEmpty())) {
    double weight = 0;
    if (!absl::SimpleAtod(item, &weight)) {
      return cli::UsageError(kCommand,
                             absl::StrCat("--data-weights needs comma-separated numbers, got '",
                                          parsed.Value("data-weights"), "'"));
    }
    config.data_weights.push_back(weight);
  }
  if (!parsed.Value("eot-token").empty()) {
    int64_t token = 0;
    if (!absl::SimpleAtoi(parsed.Value("eot-token"), &token)) {
      return cli::UsageError(kCommand, absl::StrCat("--eot-token needs an integer, got '",
                                                    parsed.Value("eot-token"), "'"));
    }
    config.end_of_text = token;
  }
  config.data_in_order = parsed.Switch("data-in-order");
  config.eval_data_paths = parsed.Values("eval-data");
  config.data_format = parsed.Value("data-format");
  const std::string recompute = parsed.Value("recompute");
  if (recompute == "none") {
    config.recompute = job::RECOMPUTE_NONE;
  } else if (recompute == "selective") {
    config.recompute = job::RECOMPUTE_SELECTIVE;
  } else if (recompute == "full") {
    config.recompute = job::RECOMPUTE_FULL;
  } else {
    return cli::UsageError(
        kCommand,
        absl::StrCat("--recompute must be none, selective or full, got '", recompute, "'"));
  }
  const std::string offload = parsed.Value("offload-activations");
  if (offload == "none") {
    config.offload_activations = job::OFFLOAD_NONE;
  } else if (offload == "all") {
    config.offload_activations = job::OFFLOAD_ALL;
  } else if (offload == "over-budget") {
    config.offload_activations = job::OFFLOAD_OVER_BUDGET;
  } else {
    return cli::UsageError(
        kCommand, absl::StrCat("--offload-activations must be none, all or over-budget, got '",
                               offload, "'"));
  }
  const std::string schedule = parsed.Value("schedule");
  auto named = std::find_if(std::begin(kSchedules), std::end(kSchedules),
                            [&](const auto& entry) { return schedule == entry.first; });
  if (named == std::end(kSchedules)) {
    return cli::UsageError(
        kCommand, absl::StrCat("--schedule must be ", ScheduleNames(), ", got '", schedule, "'"));
  }
  config.schedule = named->second;
  if (!parsed.Has("emit") && !parsed.Has("write-init")) {
    return cli::UsageError(kCommand, "nothing to do: give --emit PATH and/or --write-init PATH");
  }
  if (absl::Status status = ValidateGptConfig(config); !status.ok()) {
    return cli::UsageError(kCommand, status.message());
  }
  return config;
}

absl::Status EmitJob(const GptConfig& config, const std::vector<std::string>& arguments,
                     const std::string& path) {
  absl::StatusOr<job::Job> job = BuildGptJob(config);
  if (!job.ok()) return job.status();
  std::string text;
  if (!google::protobuf::TextFormat::PrintToString(*job, &text)) {
    return absl::InternalError("could not print the job in text format");
  }
  const std::string header =
      absl::StrCat("# The reference GPT, written by: loom-gpt ", absl::StrJoin(arguments, " "),
                   "\n", "# Run on ", GptDeviceCount(config),
                   " device(s): loomctl run FILE --devices cpu:", GptDeviceCount(config), "\n");
  if (path == "-") {
    std::cout << header << text;
    return absl::OkStatus();
  }
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file << header << text;
  file.close();
  if (!file) return absl::PermissionDeniedError(absl::StrCat("could not write ", path));
  return absl::OkStatus();
}

int Main(const std::vector<std::string>& arguments) {
  const cli::ArgumentSpec spec = MakeSpec();
  absl::StatusOr<cli::ParsedArguments> parsed = spec.Parse(arguments);
  if (!parsed.ok()) {
    std::cerr << parsed.status().message() << "\n";
    return cli::kExitUsage;
  }
  if (parsed->help_requested()) {
    std::cout << spec.Help();
    return cli::kExitSuccess;
  }
  absl::StatusOr<GptConfig> config = ConfigFromArguments(*parsed);
  if (!config.ok()) {
    std::cerr << config.status().message() << "\n";
    return cli::kExitUsage;
  }
  if (parsed->Has("emit")) {
    if (absl::Status status = EmitJob(*config, arguments, parsed->Value("emit")); !status.ok()) {
      std::cerr << kCommand << ": " << status.message() << "\n";
      return cli::kExitFailure;
    }
  }
  if (parsed->Has("write-init")) {
    const std::string path = parsed->Value("write-init");
    if (absl::Status status = WriteGptInitialWeights(*config, path); !status.ok()) {
      std::cerr << kCommand << ": " << status.message() << "\n";
      return cli::kExitFailure;
    }
  }
  return cli::kExitSuccess;
}

}  // namespace
}  // namespace loom::gpt

int main(int argc, char** argv) {
  return loom::gpt::Main(std::vector<std::string>(argv + 1, argv + argc));
}
