// Activation recomputation (compiler/recomputation.h): what the backward keeps of each block under
// SELECTIVE, FULL and per-op settings, the gates it waits on, the errors; and the GPT trained on
// every layout computing bit for bit what it computes without recomputation, its devices
// allocating what the compiler estimated, FULL taking less memory.

#include "compiler/recomputation.h"

#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "compiler/autodiff.h"
#include "compiler/compiler.h"
#include "compiler/memory_plan.h"
#include "gtest/gtest.h"
#include "tests/compiler/gpt_layouts.h"
#include "tests/compiler/run_util.h"

namespace loom::compiler::testing {
namespace {

// The tiny GPT of gpt_layouts.h on `layout` with `recompute`.
absl::StatusOr<job::Job> GptJob(const GptLayout& layout, job::Recompute recompute) {
  absl::StatusOr<job::Job> job = GptJobOn(layout, job::REGISTER_MEMORY_SHARED);
  if (!job.ok()) return job.status();
  job->set_recompute(recompute);
  return job;
}

// What the backward of a job reads of its forward ops' outputs.
struct BackwardReads {
  // Forward tensors that ops marked backward read, except through identity_after gates.
  absl::flat_hash_set<std::string> kept;
  // The gates: the forward tensor each copies, and what it waits for.
  std::vector<std::pair<std::string, std::vector<std::string>>> gates;
  int barriers = 0;  // identity_after ops on gradients only (a block's backward done)
  int copies = 0;    // clones of forward ops (Op.recomputes set)
};

BackwardReads ReadsOf(const job::Job& trained) {
  absl::flat_hash_set<std::string> forward_tensors;
  for (const job::Op& op : trained.ops()) {
    if (op.backward()) continue;
    for (const std::string& output : op.outputs()) forward_tensors.insert(output);
  }
  BackwardReads reads;
  for (const job::Op& op : trained.ops()) {
    if (!op.backward()) continue;
    if (op.type() == "identity_after") {
      if (forward_tensors.contains(op.inputs(0))) {
        reads.gates.emplace_back(
            op.inputs(0), std::vector<std::string>(op.inputs().begin() + 1, op.inputs().end()));
      } else {
        ++reads.barriers;
      }
      continue;
    }
    if (!op.recomputes().empty()) ++reads.copies;
    for (const std::string& input : op.inputs()) {
      if (forward_tensors.contains(input)) reads.kept.insert(input);
    }
  }
  for (const auto& [input, after] : reads.gates) reads.kept.insert(input);
  return reads;
}

// What the backward autodiff adds to `job` (on one device) reads of the forward.
absl::StatusOr<BackwardReads> BackwardReadsOf(const job::Job& job) {
  absl::StatusOr<job::Job> trained =
      AddBackward(job, StandardOps(), DeviceSet::Cpus(1, 1), job.loss());
  if (!trained.ok()) return trained.status();
  return ReadsOf(*trained);
}

// The forward ops of `job` by output tensor.
absl::flat_hash_map<std::string, const job::Op*> ProducersOf(const job::Job& job) {
  absl::flat_hash_map<std::string, const job::Op*> producers;
  for (const job::Op& op : job.ops()) {
    for (const std::string& output : op.outputs()) producers[output] = &op;
  }
  return producers;
}

// The forward tensors the backward keeps from inside a block, i.e. made there and read by no op
// outside it (what FULL would recompute), with the type of the op making each.
std::vector<std::pair<std::string, std::string>> KeptInsideBlocks(const job::Job& job,
                                                                  const BackwardReads& reads) {
  const absl::flat_hash_map<std::string, const job::Op*> producers = ProducersOf(job);
  absl::flat_hash_set<std::string> crossing;  // read by an op outside the block
  for (const job::Op& op : job.ops()) {
    for (const std::string& input : op.inputs()) {
      auto found = producers.find(input);
      if (found != producers.end() && found->second->block() != op.block()) {
        crossing.insert(input);
      }
    }
  }
  std::vector<std::pair<std::string, std::string>> kept;
  for (const std::string& tensor : reads.kept) {
    auto found = producers.find(tensor);
    if (found == producers.end() || found->second->block().empty() || crossing.contains(tensor)) {
      continue;
    }
    kept.emplace_back(tensor, found->second->type());
  }
  return kept;
}

const GptLayout kOneDevice{.name = "one_device"};

TEST(RecomputationTest, FullKeepsOnlyWhatCrossesABlock) {
  absl::StatusOr<job::Job> job = GptJob(kOneDevice, job::RECOMPUTE_FULL);
  ASSERT_TRUE(job.ok()) << job.status();
  absl::StatusOr<BackwardReads> reads = BackwardReadsOf(*job);
  ASSERT_TRUE(reads.ok()) << reads.status();
  EXPECT_GT(reads->copies, 0);
  // (A matmul's bfloat16 weight casts would be kept: they read only variables. Float32 here.)
  for (const auto& [tensor, op_type] : KeptInsideBlocks(*job, *reads)) {
    ADD_FAILURE() << "the backward keeps '" << tensor << "' (" << op_type << ") inside a block";
  }
  // Every block's input is kept (gated); every gate waits on a gradient and, but in the last
  // block, on the barrier of the block after it (4 blocks: 3 barriers).
  EXPECT_TRUE(reads->kept.contains("h.in")) << "block 0's input";
  EXPECT_EQ(reads->barriers, 3);
  int behind_barriers = 0;
  for (const auto& [input, after] : reads->gates) {
    ASSERT_FALSE(after.empty());
    EXPECT_TRUE(absl::StartsWith(after[0], "grad/")) << input << " gated on " << after[0];
    if (after.size() == 2) ++behind_barriers;
  }
  EXPECT_GT(behind_barriers, 0);
  EXPECT_LT(behind_barriers, static_cast<int>(reads->gates.size()));
}

TEST(RecomputationTest, SelectiveKeepsMatmulAndAttentionOutputsOnly) {
  absl::StatusOr<job::Job> job = GptJob(kOneDevice, job::RECOMPUTE_SELECTIVE);
  ASSERT_TRUE(job.ok()) << job.status();
  absl::StatusOr<BackwardReads> reads = BackwardReadsOf(*job);
  ASSERT_TRUE(reads.ok()) << reads.status();
  bool keeps_a_matmul_output = false;
  for (const auto& [tensor, op_type] : KeptInsideBlocks(*job, *reads)) {
    EXPECT_FALSE(IsCheapToRecompute(op_type))
        << "the backward keeps '" << tensor << "' (" << op_type << ")";
    keeps_a_matmul_output = keeps_a_matmul_output || op_type == "matmul";
  }
  EXPECT_TRUE(keeps_a_matmul_output);
  // LayerNorm and GELU outputs are read by matmuls' backward: now through copies.
  EXPECT_FALSE(reads->kept.contains("h.0.ln_1"));
  EXPECT_FALSE(reads->kept.contains("h.0.mlp.gelu"));
}

TEST(RecomputationTest, NoneKeepsWhatTheBackwardReadsAndAddsNothing) {
  absl::StatusOr<job::Job> job = GptJob(kOneDevice, job::RECOMPUTE_NONE);
  ASSERT_TRUE(job.ok()) << job.status();
  absl::StatusOr<BackwardReads> reads = BackwardReadsOf(*job);
  ASSERT_TRUE(reads.ok()) << reads.status();
  EXPECT_EQ(reads->copies, 0);
  EXPECT_TRUE(reads->gates.empty());
  EXPECT_TRUE(reads->kept.contains("h.0.ln_1"));
}

TEST(RecomputationTest, PerOpSettingsOverrideTheJobs) {
  absl::StatusOr<job::Job> job = GptJob(kOneDevice, job::RECOMPUTE_FULL);
  ASSERT_TRUE(job.ok()) << job.status();
  for (job::Op& op : *job->mutable_ops()) {
    if (op.name() == "h.1.ln_2") op.set_recompute(job::OP_RECOMPUTE_NEVER);
  }
  absl::StatusOr<BackwardReads> reads = BackwardReadsOf(*job);
  ASSERT_TRUE(reads.ok()) << reads.status();
  EXPECT_TRUE(reads->kept.contains("h.1.ln_2"));
  EXPECT_FALSE(reads->kept.contains("h.1.ln_1"));

  job = GptJob(kOneDevice, job::RECOMPUTE_NONE);
  ASSERT_TRUE(job.ok()) << job.status();
  for (job::Op& op : *job->mutable_ops()) {
    if (op.name() == "h.2.ln_1") op.set_recompute(job::OP_RECOMPUTE_ALWAYS);
  }
  reads = BackwardReadsOf(*job);
  ASSERT_TRUE(reads.ok()) << reads.status();
  EXPECT_FALSE(reads->kept.contains("h.2.ln_1"));
  EXPECT_TRUE(reads->kept.contains("h.2.ln_2"));
  EXPECT_TRUE(reads->kept.contains("h.1.ln_1"));
  EXPECT_EQ(reads->copies, 1);  // the LayerNorm, from its gated input
  ASSERT_EQ(reads->gates.size(), 1u);
  EXPECT_EQ(reads->gates[0].first, "h.1.mlp.residual");
  // ... once block 3's backward is done (its gradients to leave it: a barrier).
  EXPECT_EQ(reads->barriers, 1);
  EXPECT_EQ(reads->gates[0].second.size(), 2u);
}

TEST(RecomputationTest, RefusesSettingsItCannotHonour) {
  absl::StatusOr<job::Job> job = GptJob(kOneDevice, job::RECOMPUTE_NONE);
  ASSERT_TRUE(job.ok()) << job.status();
  job::Job outside = *job;
  for (job::Op& op : *outside.mutable_ops()) {
    if (op.name() == "ln_f") op.set_recompute(job::OP_RECOMPUTE_ALWAYS);
  }
  absl::StatusOr<CompileResult> compiled = CompileOn(outside, 1);
  EXPECT_EQ(compiled.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(compiled.status().message(), "'ln_f'")) << compiled.status();

  job::Job no_blocks = *job;
  for (job::Op& op : *no_blocks.mutable_ops()) op.clear_block();
  no_blocks.set_recompute(job::RECOMPUTE_FULL);
  compiled = CompileOn(no_blocks, 1);
  EXPECT_EQ(compiled.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(compiled.status().message(), "no op of job")) << compiled.status();

  job::Job inference = *job;
  inference.clear_loss();
  inference.clear_optimizer();
  inference.set_recompute(job::RECOMPUTE_SELECTIVE);
  compiled = CompileOn(inference, 1);
  EXPECT_EQ(compiled.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(compiled.status().message(), "no loss")) << compiled.status();
}

// Op.recomputes, which the compiler sets, is checked when a job sets it by hand.
TEST(RecomputationTest, ACopyMustNameAnEarlierOpLikeIt) {
  const std::string base = R"pb(
    name: "copies"
    placement { devices: "cpu:0" }
    inputs {
      name: "x"
      shape: [ 4, 4 ]
      random_normal { std: 1 }
    }
    ops { name: "a" type: "relu" inputs: "x" outputs: "a" }
  )pb";
  job::Job job = ParseJob(absl::StrCat(
      base, R"pb(ops { name: "b" type: "relu" inputs: "a" outputs: "b" recomputes: "a" })pb"));
  EXPECT_TRUE(CompileOn(job, 1).ok()) << CompileOn(job, 1).status();
  job = ParseJob(absl::StrCat(
      base, R"pb(ops { name: "b" type: "relu" inputs: "a" outputs: "b" recomputes: "zz" })pb"));
  absl::StatusOr<CompileResult> compiled = CompileOn(job, 1);
  EXPECT_EQ(compiled.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(compiled.status().message(), "no op before it"))
      << compiled.status();
  job = ParseJob(absl::StrCat(
      base, R"pb(ops { name: "b" type: "gelu" inputs: "a" outputs: "b" recomputes: "a" })pb"));
  compiled = CompileOn(job, 1);
  EXPECT_EQ(compiled.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(compiled.status().message(), "differs from it"))
      << compiled.status();
}

// `job` compiled for `layout`'s devices and run in this process.
absl::StatusOr<MeasuredRun> Train(const GptLayout& layout, const job::Job& job) {
  absl::StatusOr<CompileResult> compiled = CompileOn(job, layout.devices(), layout.nodes);
  if (!compiled.ok()) return compiled.status();
  return RunMeasured(*compiled);
}

class RecomputationLayoutTest : public ::testing::TestWithParam<GptLayout> {};

TEST_P(RecomputationLayoutTest, TrainsBitForBitWithinTheEstimate) {
  const GptLayout& layout = GetParam();
  absl::StatusOr<job::Job> job = GptJob(layout, job::RECOMPUTE_NONE);
  ASSERT_TRUE(job.ok()) << job.status();
  absl::StatusOr<MeasuredRun> kept = Train(layout, *job);
  ASSERT_TRUE(kept.ok()) << kept.status();
  for (job::Recompute recompute : {job::RECOMPUTE_SELECTIVE, job::RECOMPUTE_FULL}) {
    const std::string what = absl::StrCat(layout.name, " ", job::Recompute_Name(recompute));
    job->set_recompute(recompute);
    absl::StatusOr<MeasuredRun> recomputed = Train(layout, *job);
    ASSERT_TRUE(recomputed.ok()) << what << ": " << recomputed.status();
    ExpectBitIdentical(kept->fetched, recomputed->fetched, what);
    EXPECT_EQ(recomputed->allocated_bytes, recomputed->estimated_bytes) << what;
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, RecomputationLayoutTest,
                         ::testing::ValuesIn(OneNodeSharingLayouts()),
                         [](const ::testing::TestParamInfo<GptLayout>& info) {
                           return info.param.name;
                         });

// The tiny GPT with a context of 256 (activations dominate, as in training) on `layout`, one
// step.
gpt::GptConfig ActivationHeavyGpt(const GptLayout& layout, job::Recompute recompute) {
  gpt::GptConfig config;
  config.context = 256;
  config.width = 64;
  config.layers = 4;
  config.heads = 2;
  config.mlp_width = 256;
  config.batch = 8;
  config.steps = 1;
  ApplyLayout(layout, config);
  config.recompute = recompute;
  return config;
}

// The most a device of `config`'s job needs, compiled for `layout`'s devices.
absl::StatusOr<int64_t> LargestEstimate(const gpt::GptConfig& config, const GptLayout& layout) {
  absl::StatusOr<job::Job> job = gpt::BuildGptJob(config);
  if (!job.ok()) return job.status();
  absl::StatusOr<CompileResult> compiled = CompileOn(*job, layout.devices(), layout.nodes);
  if (!compiled.ok()) return compiled.status();
  int64_t most = 0;
  for (const DeviceMemoryEstimate& estimate : EstimateMemory(compiled->node_plans)) {
    most = std::max(most, estimate.total_bytes());
  }
  return most;
}

// Where activations dominate, recomputation takes much less memory on every device: the
// compiler's estimate, which the runtime allocates to the byte (above). Under TP since the
// registers of collectives share memory; under micro-batches, on pipeline stages too, since the
// chains order them (docs/ARCHITECTURE.md, "Recomputation").
TEST(RecomputationTest, ActivationHeavyJobsTakeLessMemory) {
  for (const GptLayout& layout :
       {kOneDevice, GptLayout{.name = "dp2", .data_parallel = 2},
        GptLayout{.name = "tp2", .tensor_parallel = 2},
        GptLayout{.name = "pp2", .pipeline_stages = 2},
        GptLayout{.name = "m4_one_device", .micro_batches = 4},
        GptLayout{.name = "pp2_m4", .pipeline_stages = 2, .micro_batches = 4}}) {
    std::map<job::Recompute, int64_t> peak;
    for (job::Recompute recompute :
         {job::RECOMPUTE_NONE, job::RECOMPUTE_SELECTIVE, job::RECOMPUTE_FULL}) {
      absl::StatusOr<int64_t> most = LargestEstimate(ActivationHeavyGpt(layout, recompute), layout);
      ASSERT_TRUE(most.ok()) << layout.name << ": " << most.status();
      peak[recompute] = *most;
    }
    // On stages and under TP, the tasks that read the other stage's data or a collective's output
    // stay out of the compute chains (compiler/act_order.h), so the proof orders fewer of
    // SELECTIVE's copies: they save less (TP = 2: 20.1 against 25.7 MiB, FULL 12.5). Under
    // micro-batches the activations of one micro-batch are a smaller part of the whole (the
    // weight gradients of each micro-batch wait for their accumulation, unordered).
    const double selective_bound = layout.pipeline_stages > 1 || layout.tensor_parallel > 1 ? 1.0
                                   : layout.micro_batches > 1                               ? 0.9
                                                                                            : 0.8;
    EXPECT_LT(peak[job::RECOMPUTE_SELECTIVE], peak[job::RECOMPUTE_NONE] * selective_bound)
        << layout.name;
    EXPECT_LT(peak[job::RECOMPUTE_FULL], peak[job::RECOMPUTE_NONE] * 0.8) << layout.name;
  }
}

// A job over its budget is refused with what recomputation would give, compiled.
TEST(RecomputationTest, OverBudgetJobsAreToldWhatRecomputationGives) {
  std::map<job::Recompute, int64_t> peak;
  for (job::Recompute recompute :
       {job::RECOMPUTE_NONE, job::RECOMPUTE_SELECTIVE, job::RECOMPUTE_FULL}) {
    absl::StatusOr<int64_t> most =
        LargestEstimate(ActivationHeavyGpt(kOneDevice, recompute), kOneDevice);
    ASSERT_TRUE(most.ok()) << most.status();
    peak[recompute] = *most;
  }
  ASSERT_LT(peak[job::RECOMPUTE_FULL], peak[job::RECOMPUTE_SELECTIVE]);
  ASSERT_LT(peak[job::RECOMPUTE_SELECTIVE], peak[job::RECOMPUTE_NONE]);
  absl::StatusOr<job::Job> job =
      gpt::BuildGptJob(ActivationHeavyGpt(kOneDevice, job::RECOMPUTE_NONE));
  ASSERT_TRUE(job.ok()) << job.status();

  // Between FULL and SELECTIVE: FULL fits, SELECTIVE is named with what it would need.
  job->set_device_memory_budget_bytes((peak[job::RECOMPUTE_FULL] + peak[job::RECOMPUTE_SELECTIVE]) /
                                      2);
  absl::StatusOr<CompileResult> compiled = CompileOn(*job, 1);
  EXPECT_EQ(compiled.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(
      absl::StrContains(compiled.status().message(), "It fits with recompute: RECOMPUTE_FULL"))
      << compiled.status();
  // The alternatives it compiled, one progress line each, up to the one that fits.
  std::vector<std::string> progress;
  CompileOptions options;
  options.progress = [&](absl::string_view line) { progress.emplace_back(line); };
  OpRegistry registry;
  ASSERT_TRUE(RegisterStandardOps(&registry).ok());
  EXPECT_EQ(Compile(*job, registry, DeviceSet::Cpus(1, 1), options).status().code(),
            absl::StatusCode::kResourceExhausted);
  ASSERT_GE(progress.size(), 2u);
  EXPECT_TRUE(absl::StartsWith(progress.front(), "over its memory budget; compiling it with "))
      << progress.front();
  EXPECT_TRUE(absl::StrContains(progress.back(), "recompute: RECOMPUTE_FULL (")) << progress.back();
  EXPECT_TRUE(absl::StrContains(progress.back(), absl::StrCat(progress.size(), " of at most ")))
      << progress.back();
  EXPECT_TRUE(absl::StrContains(compiled.status().message(), "RECOMPUTE_SELECTIVE would need"))
      << compiled.status();

  // Between SELECTIVE and NONE: SELECTIVE fits.
  job->set_device_memory_budget_bytes((peak[job::RECOMPUTE_SELECTIVE] + peak[job::RECOMPUTE_NONE]) /
                                      2);
  compiled = CompileOn(*job, 1);
  EXPECT_TRUE(
      absl::StrContains(compiled.status().message(), "It fits with recompute: RECOMPUTE_SELECTIVE"))
      << compiled.status();

  // Below FULL: offloading every stash to host memory fits (on one device without micro-batches
  // the device then keeps no activation for the backward), and FULL is named with its needs.
  job->set_device_memory_budget_bytes(peak[job::RECOMPUTE_FULL] - 1);
  compiled = CompileOn(*job, 1);
  EXPECT_TRUE(absl::StrContains(compiled.status().message(),
                                "It fits with offload_activations: OFFLOAD_ALL"))
      << compiled.status();
  EXPECT_TRUE(absl::StrContains(compiled.status().message(), "RECOMPUTE_FULL would need"))
      << compiled.status();
  // Nor that with a host too small for the stashes: nothing fits, and it says so.
  job->set_host_memory_budget_bytes(4096);
  compiled = CompileOn(*job, 1);
  EXPECT_TRUE(absl::StrContains(compiled.status().message(),
                                "ZeRO, recomputation and offload do not make it fit"))
      << compiled.status();
  // One device: ZeRO gains nothing and is not offered.
  EXPECT_FALSE(absl::StrContains(compiled.status().message(), "zero_stage")) << compiled.status();

  // A job without blocks (or data parallelism) gets no advice.
  for (job::Op& op : *job->mutable_ops()) op.clear_block();
  compiled = CompileOn(*job, 1);
  EXPECT_EQ(compiled.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_FALSE(absl::StrContains(compiled.status().message(), "ecompute")) << compiled.status();
}

// With data parallelism ZeRO comes first: it adds no compute.
TEST(RecomputationTest, OverBudgetDataParallelJobsAreToldWhatZeroGives) {
  const GptLayout layout{.name = "dp4", .data_parallel = 4};
  gpt::GptConfig config;
  config.width = 64;
  config.mlp_width = 256;
  config.vocab = 1024;
  config.steps = 1;
  ApplyLayout(layout, config);
  std::map<int, int64_t> peak;
  for (int zero_stage : {0, 2}) {
    config.zero_stage = zero_stage;
    absl::StatusOr<int64_t> most = LargestEstimate(config, layout);
    ASSERT_TRUE(most.ok()) << most.status();
    peak[zero_stage] = *most;
  }
  ASSERT_LT(peak[2], peak[0]);
  config.zero_stage = 0;
  absl::StatusOr<job::Job> job = gpt::BuildGptJob(config);
  ASSERT_TRUE(job.ok()) << job.status();
  job->set_device_memory_budget_bytes((peak[0] + peak[2]) / 2);
  absl::StatusOr<CompileResult> compiled = CompileOn(*job, 4);
  EXPECT_EQ(compiled.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(compiled.status().message(), "It fits with zero_stage: 2 (at most"))
      << compiled.status();
}

// Random per-op settings (any subset of a block's ops recomputed) train bit for bit as none.
TEST(RecomputationTest, RandomPerOpSettingsTrainBitForBit) {
  for (const GptLayout& layout :
       {kOneDevice, GptLayout{.name = "pp2_m2", .pipeline_stages = 2, .micro_batches = 2}}) {
    absl::StatusOr<job::Job> job = GptJob(layout, job::RECOMPUTE_NONE);
    ASSERT_TRUE(job.ok()) << job.status();
    absl::StatusOr<MeasuredRun> kept = Train(layout, *job);
    ASSERT_TRUE(kept.ok()) << kept.status();
    for (uint32_t seed = 1; seed <= 3; ++seed) {
      std::mt19937 random(seed);
      job::Job mixed = *job;
      mixed.set_recompute(seed % 2 == 0 ? job::RECOMPUTE_FULL : job::RECOMPUTE_NONE);
      for (job::Op& op : *mixed.mutable_ops()) {
        if (op.block().empty()) continue;
        const uint32_t draw = random() % 3;
        op.set_recompute(draw == 0   ? job::OP_RECOMPUTE_ALWAYS
                         : draw == 1 ? job::OP_RECOMPUTE_NEVER
                                     : job::OP_RECOMPUTE_DEFAULT);
      }
      const std::string what = absl::StrCat(layout.name, " seed ", seed);
      absl::StatusOr<MeasuredRun> recomputed = Train(layout, mixed);
      ASSERT_TRUE(recomputed.ok()) << what << ": " << recomputed.status();
      ExpectBitIdentical(kept->fetched, recomputed->fetched, what);
      EXPECT_EQ(recomputed->allocated_bytes, recomputed->estimated_bytes) << what;
    }
  }
}

}  // namespace
}  // namespace loom::compiler::testing
