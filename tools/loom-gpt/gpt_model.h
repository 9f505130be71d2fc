#ifndef LOOM_TOOLS_LOOM_GPT_GPT_MODEL_H_
#define LOOM_TOOLS_LOOM_GPT_GPT_MODEL_H_

// The reference GPT as a Loom job: GptConfig (model, mixture of experts, training, data, parallel
// layout), its parameters in canonical order (GptParameters), the training job (BuildGptJob) and
// its seeded initial weights (WriteGptInitialWeights). The loom-gpt tool writes both; tests and
// benchmarks build their GPT jobs with it.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/job.pb.h"
#include "proto/plan.pb.h"

namespace loom::gpt {

// The reference GPT of the training work (tests/oracle/models.py is the same model in PyTorch):
// byte-level, pre-LayerNorm blocks, GELU (erf), learned position embedding, causal attention,
// untied output head without bias, mean cross-entropy over every token of the global batch,
// AdamW on every parameter. The defaults are the "tiny" model.
struct GptConfig {
  // Model.
  int64_t vocab = 256;
  int64_t context = 64;  // T: also the sequence length of every batch
  int64_t width = 128;   // D
  int64_t layers = 4;
  int64_t heads = 4;
  int64_t mlp_width = 512;  // F
  double layer_norm_epsilon = 1e-5;

  // Mixture of experts (0 experts: every block has the dense MLP). The blocks in `moe_layers`
  // have an MoE MLP instead: a router (no bias) picking the top `top_k` of `experts` experts per
  // token, each expert an MLP width -> mlp_width -> width with GELU, each taking at most
  // ceil(capacity_factor * context * top_k / experts) tokens of a sequence. The loss adds
  // aux_loss_coefficient times the Switch Transformer load-balancing loss of every MoE layer.
  int64_t experts = 0;
  std::vector<int64_t> moe_layers = {1, 3};
  int64_t top_k = 2;
  double capacity_factor = 1.25;
  double aux_loss_coefficient = 0.01;

  // Training.
  int64_t batch = 16;  // global batch B
  int64_t steps = 20;
  double learning_rate = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double adam_epsilon = 1e-8;
  double weight_decay = 0.1;
  // The learning-rate schedule (Job.optimizer.learning_rate_schedule): linear warmup over
  // lr_warmup_steps, then "constant", "linear" or "cosine" decay to min_learning_rate at step
  // lr_decay_steps (0: `steps`).
  int64_t lr_warmup_steps = 0;
  std::string lr_decay = "constant";
  int64_t lr_decay_steps = 0;
  double min_learning_rate = 0;
  // "all": weight decay on every parameter; "matrices": not on biases, LayerNorm weights and the
  // embeddings (the anchors' parameter groups), whose group's learning rate is also scaled by
  // no_decay_lr_scale.
  std::string weight_decay_on = "all";
  double no_decay_lr_scale = 1.0;
  // > 0: clip the gradients' global L2 norm to this before each update.
  double max_grad_norm = 0;

  // Data: a token dataset read by the job itself (Input.token_dataset, docs/DATA.md): one source
  // per path (a token file, a directory or a glob pattern), blended by data_weights (empty: equal;
  // otherwise one weight > 0 per path), all in data_format, documents ending at end_of_text,
  // shuffled per epoch from data_seed unless data_in_order.
  std::vector<std::string> data_paths = {"/usr/share/common-licenses/GPL-3"};
  std::vector<double> data_weights;
  std::string data_format = "bytes";  // or "uint16", "uint32"
  std::optional<int64_t> end_of_text;
  bool data_in_order = false;
  int64_t data_seed = 0;
  // Evaluation (Job.evaluation): > 0, every this many steps the loss (the MoE GPT's
  // cross-entropy) of a held-out batch from eval_data_paths (one source each, read as the
  // training data is).
  int64_t eval_every = 0;
  std::vector<std::string> eval_data_paths;

  // Parallelism: pipeline_stages x data_parallel x tensor_parallel devices. Stage s runs on
  // devices [s * dp * tp, (s + 1) * dp * tp), seen as [dp, tp] when both exceed 1.
  int64_t data_parallel = 1;
  int64_t tensor_parallel = 1;
  int64_t pipeline_stages = 1;
  // Interleaved 1F1B (schedule INTERLEAVED): each group of devices holds this many stages,
  // pipeline_stages * virtual_stages in all, stage k on group k % pipeline_stages. (ZB-V,
  // schedule ZERO_BUBBLE_V, always puts two stages V-shaped on each group; this stays 1.)
  int64_t virtual_stages = 1;
  int64_t micro_batches = 1;
  // The experts are split over groups of this many devices of a stage (it divides
  // data_parallel: expert parallelism is carved out of data parallelism, as in Megatron-Core).
  // expert_parallel == data_parallel: one group, the stage's devices. Smaller: a stage's devices
  // are seen as [data_parallel / expert_parallel, expert_parallel], tokens split over both axes,
  // experts over the second. 1: every device holds every expert.
  int64_t expert_parallel = 1;
  job::PipelineSchedule schedule = job::ONE_F_ONE_B;
  // Activation recomputation (Job.recompute): each transformer block is a block (Op.block
  // "h.<layer>."); SELECTIVE recomputes its cheap ops, FULL all of it from the block's input.
  job::Recompute recompute = job::RECOMPUTE_NONE;
  // Activation offload (Job.offload_activations): every stash, or those of the devices over
  // their budget, copied to host memory between the forward and the backward.
  job::OffloadActivations offload_activations = job::OFFLOAD_NONE;
  // ZeRO as SBP (Job.zero_stage): 1 or 2 split the trained variables over the data-parallel
  // axis with their optimizer states, 3 also gathers their values for each use; 0 keeps them
  // replicated.
  int64_t zero_stage = 0;
  // > 0: the devices are spread over nodes, this many per node (device i is
  // "node<i / devices_per_node>/cpu:<i % devices_per_node>"), for a cluster of loomd processes.
  // 0: every device on one node ("cpu:<i>").
  int64_t devices_per_node = 0;
  // The devices' type: "cpu" or "cuda" (then device i is "cuda:<i>", its token batches read on
  // its host "cpu:<i>").
  std::string device_type = "cpu";

  // Mixed precision (Job.matmul_data_type): BFLOAT16 runs every matmul on bfloat16 copies of its
  // inputs with float32 accumulation; weights, gradients and optimizer state stay float32.
  plan::DataType matmul_data_type = plan::FLOAT32;

  // Seed of the initial weights (the job's initializers and WriteGptInitialWeights).
  int64_t seed = 0;
};

// How a parameter starts.
enum class ParameterInit { kNormal, kZeros, kOnes };

// One parameter of the model, in the canonical order of tests/oracle/models.py.
struct GptParameter {
  std::string name;
  std::vector<int64_t> shape;
  ParameterInit init = ParameterInit::kZeros;
  double std = 0;  // for kNormal
  // Its SBP on the tensor-parallel axis (Megatron layout): "S(1)" for the q, k, v and c_fc
  // weights and their biases' "S(0)", "S(0)" for the c_proj weights, "B" otherwise; and on the
  // expert-parallel axis: "S(0)" for the experts' weights and biases.
  std::string tensor_parallel_sbp = "B";
  int stage = 0;  // the pipeline stage that holds it
  // An expert's weight or bias ([E, ...]): split over the expert-parallel group.
  bool expert = false;
};

// OK, or INVALID_ARGUMENT saying which setting is wrong and what would be valid.
absl::Status ValidateGptConfig(const GptConfig& config);

// Whether block `layer` has an MoE MLP.
bool IsMoeLayer(const GptConfig& config, int64_t layer);

// The stages on each group of devices: virtual_stages (ZB-V: 2); and the job's pipeline stages,
// pipeline_stages times that (for a valid config, whose validation checks the product).
int64_t GptStagesPerGroup(const GptConfig& config);
int64_t GptStageCount(const GptConfig& config);
// The group of devices (0 .. pipeline_stages - 1) that holds stage `stage`: round-robin, or
// V-shaped under ZB-V (stage k >= p on group 2p - 1 - k).
int64_t GptGroupOfStage(const GptConfig& config, int64_t stage);

// The number of devices the job runs on: pipeline_stages * data_parallel * tensor_parallel.
int64_t GptDeviceCount(const GptConfig& config);
// The name of device `index` (see GptConfig::devices_per_node).
std::string GptDeviceName(const GptConfig& config, int64_t index);

// The first layer of stage `stage` (the layers are split evenly, earlier stages taking one more
// when they do not divide); GptFirstLayer(config, GptStageCount(config)) is `layers`.
int64_t GptFirstLayer(const GptConfig& config, int64_t stage);

// Every parameter, in canonical order (requires a valid config).
std::vector<GptParameter> GptParameters(const GptConfig& config);

// The training job: variables named as GptParameters, inputs "x" and "y" (int32 [B, T], read from
// the token file), loss "loss" (fetched every step: the mean cross-entropy plus, with experts, the
// auxiliary loss), the AdamW optimizer, and the parallel layout of the config. With experts it
// also fetches "moe.dropped" (float32 [1]: the micro-batch's assignments over capacity, summed over
// the MoE layers and sequences; a step reports their sum, Job.summed_fetches) and
// "moe.tokens_per_expert" ([experts]: assignments each expert took).
// INVALID_ARGUMENT for an invalid config.
absl::StatusOr<job::Job> BuildGptJob(const GptConfig& config);

// The initial value of element `index` of a parameter with normal initialisation: the value the
// job's initializer (seed `seed`) gives it, float(std * N(0, 1)) of Loom's counter-based
// generator.
float InitialNormalValue(double std, int64_t seed, int64_t index);

// The seed of the `position`-th parameter (canonical order) under the config's seed.
int64_t ParameterSeed(const GptConfig& config, int64_t position);

// Writes the initial parameters, as the job's initializers draw them, to a safetensors file
// (F32, by name; metadata "model" = "gpt", "seed", "config").
absl::Status WriteGptInitialWeights(const GptConfig& config, const std::string& path);

// The config as one line of JSON (the metadata of WriteGptInitialWeights).
std::string GptConfigJson(const GptConfig& config);

}  // namespace loom::gpt

#endif  // LOOM_TOOLS_LOOM_GPT_GPT_MODEL_H_
