// ZeRO as SBP (compiler/zero_sharding.h): the trained variables split over the data-parallel
// axes train as the replicated ones do, on every data-parallel layout, with the optimizer states
// divided among the ranks and every device allocating what the compiler estimated; pipelines
// keep 1F1B; the refusals.

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "compiler/compiler.h"
#include "compiler/memory_plan.h"
#include "core/shared_kernels.h"
#include "gtest/gtest.h"
#include "tests/compiler/gpt_layouts.h"
#include "tests/compiler/run_util.h"

namespace loom::compiler::testing {
namespace {

struct Trained {
  std::vector<float> losses;  // by piece
  MeasuredRun run;
  int64_t optimizer_states = 0;  // the largest device's
};

absl::StatusOr<Trained> Train(const GptLayout& layout, int zero_stage) {
  absl::StatusOr<job::Job> job = GptJobOn(layout, job::REGISTER_MEMORY_SHARED);
  if (!job.ok()) return job.status();
  job->set_zero_stage(zero_stage);
  absl::StatusOr<CompileResult> compiled = CompileOn(*job, layout.devices(), layout.nodes);
  if (!compiled.ok()) return compiled.status();
  Trained trained;
  for (const DeviceMemoryEstimate& estimate : EstimateMemory(compiled->node_plans)) {
    trained.optimizer_states = std::max(trained.optimizer_states, estimate.parts.optimizer_states);
  }
  absl::StatusOr<MeasuredRun> run = RunMeasured(*compiled);
  if (!run.ok()) return run.status();
  trained.run = std::move(*run);
  for (const HostTensor& piece : trained.run.fetched.at(job->loss())) {
    trained.losses.push_back(piece.Values<float>()[0]);
  }
  return trained;
}

// The data-parallel layouts of the issue: DP 2 and 4, DP x TP, DP x PP with micro-batches and
// clipping, DP x EP with the MoE GPT; and mixed precision, micro-batches without stages.
std::vector<GptLayout> ZeroLayouts() {
  return {
      GptLayout{.name = "dp2", .data_parallel = 2},
      GptLayout{.name = "dp4", .data_parallel = 4},
      GptLayout{.name = "dp2_tp2_clipped",
                .data_parallel = 2,
                .tensor_parallel = 2,
                .max_grad_norm = 0.5},
      GptLayout{.name = "dp2_pp2_m4_clipped",
                .data_parallel = 2,
                .pipeline_stages = 2,
                .micro_batches = 4,
                .max_grad_norm = 0.5},
      GptLayout{.name = "dp4_ep2_moe", .data_parallel = 4, .experts = 4, .expert_parallel = 2},
      GptLayout{.name = "dp2_bf16", .data_parallel = 2, .matmul_data_type = plan::BFLOAT16},
      // Gradient accumulation: under stage 3 each micro-batch gathers each use again.
      GptLayout{.name = "dp2_m4_clipped_bf16",
                .data_parallel = 2,
                .micro_batches = 4,
                .max_grad_norm = 0.5,
                .matmul_data_type = plan::BFLOAT16},
  };
}

class ZeroShardingTest : public ::testing::TestWithParam<GptLayout> {};

TEST_P(ZeroShardingTest, TrainsAsReplicatedWithTheStatesDivided) {
  const GptLayout& layout = GetParam();
  absl::StatusOr<Trained> replicated = Train(layout, 0);
  ASSERT_TRUE(replicated.ok()) << replicated.status();
  for (int stage : {1, 2, 3}) {
    const std::string what = absl::StrCat(layout.name, " zero_stage ", stage);
    absl::StatusOr<Trained> sharded = Train(layout, stage);
    ASSERT_TRUE(sharded.ok()) << what << ": " << sharded.status();
    // A reduce-scatter sums in another order than an all-reduce on more than two ranks.
    ASSERT_EQ(sharded->losses.size(), replicated->losses.size()) << what;
    for (size_t piece = 0; piece < replicated->losses.size(); ++piece) {
      EXPECT_NEAR(sharded->losses[piece], replicated->losses[piece],
                  1e-6 * std::abs(replicated->losses[piece]))
          << what << ", piece " << piece;
    }
    EXPECT_EQ(sharded->run.allocated_bytes, sharded->run.estimated_bytes) << what;
    // Every variable of the tiny GPT divides by the data-parallel degree of its axis, but under
    // TP the column-parallel biases (split by TP, nothing left for DP): within 5%.
    const int64_t ranks = layout.data_parallel / std::max<int64_t>(layout.expert_parallel, 1);
    EXPECT_LE(sharded->optimizer_states * ranks, replicated->optimizer_states * 105 / 100) << what;
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, ZeroShardingTest, ::testing::ValuesIn(ZeroLayouts()),
                         [](const ::testing::TestParamInfo<GptLayout>& info) {
                           return info.param.name;
                         });

int64_t CountCollectives(const CompileResult& compiled, plan::CollectiveKind kind) {
  return std::count_if(compiled.plan.tasks().begin(), compiled.plan.tasks().end(),
                       [&](const plan::Task& task) {
                         return task.kind() == plan::COLLECTIVE && task.collective().kind() == kind;
                       });
}

absl::StatusOr<CompileResult> CompileZero(GptLayout layout, int zero_stage, int64_t bucket_bytes) {
  layout.zero_stage = zero_stage;
  absl::StatusOr<job::Job> job = GptJobOn(layout, job::REGISTER_MEMORY_SHARED);
  if (!job.ok()) return job.status();
  job->set_gradient_bucket_bytes(bucket_bytes);
  return CompileOn(*job, layout.devices(), layout.nodes);
}

// Both plans train bit for bit alike, and the second allocates what the compiler estimated.
void ExpectSameTraining(const CompileResult& expected_plan, const CompileResult& actual_plan,
                        const std::string& what) {
  absl::StatusOr<MeasuredRun> expected = RunMeasured(expected_plan);
  ASSERT_TRUE(expected.ok()) << expected.status();
  absl::StatusOr<MeasuredRun> actual = RunMeasured(actual_plan);
  ASSERT_TRUE(actual.ok()) << actual.status();
  ExpectBitIdentical(expected->fetched, actual->fetched, what);
  EXPECT_EQ(actual->allocated_bytes, actual->estimated_bytes) << what;
}

// Stages 1 and 2 reduce-scatter the gradients in buckets (packed shard by shard) and all-gather
// the updated variables in buckets (each rank's shards packed, unpacked shard by shard): bit for
// bit what one collective per tensor gives, with fewer collectives, within the estimate.
TEST_P(ZeroShardingTest, BucketedCollectivesTrainBitForBitAsOnePerTensor) {
  const GptLayout& layout = GetParam();
  auto reduce_scatters = [](const CompileResult& compiled) {
    return CountCollectives(compiled, plan::REDUCE_SCATTER);
  };
  auto all_gathers = [](const CompileResult& compiled) {
    return CountCollectives(compiled, plan::ALL_GATHER);
  };
  absl::StatusOr<CompileResult> apart = CompileZero(layout, 2, -1);
  ASSERT_TRUE(apart.ok()) << apart.status();
  absl::StatusOr<CompileResult> bucketed = CompileZero(layout, 2, 0);
  ASSERT_TRUE(bucketed.ok()) << bucketed.status();
  EXPECT_LE(reduce_scatters(*bucketed), reduce_scatters(*apart)) << layout.name;
  // Under clipping the reduce-scatters are the clipping ops' conversions (the ops run on the
  // shards; the variables take the clipped shards as they are), bucketed alike. Not bucketed:
  // the dense variables under EP, split over two axes, and under TP the row-parallel weights'
  // (split on both axes after, on the TP axis before) and the activations'.
  if (layout.experts == 0 && layout.tensor_parallel == 1) {
    EXPECT_LT(reduce_scatters(*bucketed), reduce_scatters(*apart) / 4) << layout.name;
  }
  // The variables' gathers (under bfloat16 the matrices' copies, cast on the shard): all but the
  // dense ones under EP (split over two axes); the others are TP's activations.
  EXPECT_LT(all_gathers(*bucketed), all_gathers(*apart)) << layout.name;
  if (layout.tensor_parallel == 1 && layout.experts == 0) {
    EXPECT_LT(all_gathers(*bucketed), all_gathers(*apart) / 4) << layout.name;
  }
  ExpectSameTraining(*apart, *bucketed, layout.name);
}

// Small buckets: each gather of parameters but the first of a device acts after the chain's task
// before the bucket's first reader (one use ahead, as a variable's own gather), not all at the
// step's start; bit for bit as one gather per variable.
TEST(ZeroShardingTest, ParameterBucketsGatherOneUseAhead) {
  const GptLayout layout{.name = "dp2", .data_parallel = 2};
  absl::StatusOr<CompileResult> apart = CompileZero(layout, 1, -1);
  ASSERT_TRUE(apart.ok()) << apart.status();
  absl::StatusOr<CompileResult> bucketed = CompileZero(layout, 1, 16 << 10);
  ASSERT_TRUE(bucketed.ok()) << bucketed.status();
  std::map<std::string, std::vector<const plan::Task*>> gathers;  // by device
  for (const plan::Task& task : bucketed->plan.tasks()) {
    if (task.kind() == plan::COLLECTIVE && task.collective().kind() == plan::ALL_GATHER &&
        absl::StrContains(task.name(), "parameter_bucket.")) {
      gathers[task.stream().device().DebugString()].push_back(&task);
    }
  }
  std::map<std::string, std::string> producer;  // register -> task
  for (const plan::Task& task : bucketed->plan.tasks()) {
    for (const std::string& output : task.outputs()) producer[output] = task.name();
  }
  ASSERT_EQ(gathers.size(), 2u);
  for (const auto& [device, tasks] : gathers) {
    ASSERT_GE(tasks.size(), 4u) << device;
    int ahead = 0;  // ordered after a task of the forward pass, not a pack or unpack
    for (const plan::Task* task : tasks) {
      if (task->ordering_inputs() == 0) continue;
      const std::string& after = producer.at(task->inputs(task->inputs_size() - 1));
      if (!absl::StartsWith(after, "pack:") && !absl::StartsWith(after, "unpack:")) ++ahead;
    }
    EXPECT_GE(ahead, static_cast<int>(tasks.size()) - 1) << device;
  }
  ExpectSameTraining(*apart, *bucketed, layout.name);
}

// Stage 3 under mixed precision: a weight's bfloat16 copy (cast on the shard) is gathered for each
// op that reads it whole, the forward's matmul and the backward's, each gather read by that op
// alone.
TEST(ZeroShardingTest, Stage3GathersTheBfloat16CopiesPerUse) {
  const GptLayout layout{
      .name = "dp2_bf16", .data_parallel = 2, .matmul_data_type = plan::BFLOAT16};
  absl::StatusOr<CompileResult> compiled = CompileZero(layout, 3, 0);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  std::map<std::string, const plan::Task*> writer;
  std::map<std::string, int> readers;
  for (const plan::Task& task : compiled->plan.tasks()) {
    for (const std::string& output : task.outputs()) writer[output] = &task;
    for (const std::string& input : task.inputs()) ++readers[input];
  }
  std::map<std::string, int> gathers;  // by bfloat16 copy
  for (const plan::Task& task : compiled->plan.tasks()) {
    if (task.kind() != plan::COLLECTIVE || task.collective().kind() != plan::ALL_GATHER) continue;
    const plan::Task* cast = writer.at(task.inputs(0));
    if (KernelOf(compiled->plan, *cast).op_type() != "cast" ||
        writer.at(cast->inputs(0))->kind() != plan::VARIABLE) {
      continue;
    }
    ++gathers[task.inputs(0)];
    EXPECT_EQ(readers[task.outputs(0)], 1) << task.name();
  }
  // Gathered twice where the backward reads the copy whole too (not the head's: its backward
  // reads the shard).
  int twice = 0;
  for (const auto& [copy, count] : gathers) twice += count == 2 ? 1 : 0;
  EXPECT_GE(twice, 4 * 6) << "of " << gathers.size();  // 6 matmuls a layer, 4 layers, 2 ranks
}

// ZeRO keeps one-forward-one-backward on pipeline stages (OneFlow's ZeRO turned its pipeline
// serial): on DP = 2 x PP = 2 with 4 micro-batches, under ZeRO stages 0, 2 and 3 alike, what a
// stage's forward stashes for its backward (a register a forward task writes per micro-batch and
// a backward task reads) has at most p - s slots, the credits from which 1F1B emerges, and the
// first stage's stashes have p.
TEST(ZeroShardingTest, PipelinesKeepOneForwardOneBackward) {
  constexpr int kStages = 2;
  for (int stage : {0, 2, 3}) {
    const GptLayout layout{.name = absl::StrCat("dp2_pp2_m4_zero", stage),
                           .data_parallel = 2,
                           .pipeline_stages = kStages,
                           .micro_batches = 4,
                           .zero_stage = stage};
    absl::StatusOr<CompileResult> compiled = CompileGpt(layout, job::REGISTER_MEMORY_SHARED);
    ASSERT_TRUE(compiled.ok()) << layout.name << ": " << compiled.status();
    const plan::Plan& plan = compiled->plan;
    std::map<std::string, const plan::Task*> producer;
    std::map<std::string, std::vector<const plan::Task*>> readers;
    for (const plan::Task& task : plan.tasks()) {
      for (const std::string& output : task.outputs()) producer[output] = &task;
      for (const std::string& input : task.inputs()) readers[input].push_back(&task);
    }
    std::map<int, int> most_slots;  // pipeline stage -> the most slots of its stashes
    for (const plan::RegisterDesc& reg : plan.registers()) {
      auto found = producer.find(reg.name());
      if (found == producer.end()) continue;
      const plan::Task& writer = *found->second;
      if (writer.kind() != plan::COMPUTE || writer.priority() != 0 ||
          writer.pieces_per_step() != layout.micro_batches) {
        continue;
      }
      const std::vector<const plan::Task*>& reading = readers[reg.name()];
      const bool stashed = std::any_of(reading.begin(), reading.end(), [](const plan::Task* task) {
        return task->kind() == plan::COMPUTE && task->priority() != 0;
      });
      if (!stashed) continue;
      // Stage s runs on devices 2s and 2s + 1 (loom-gpt's StageDevices).
      const int pipeline_stage = writer.stream().device().index() / 2;
      most_slots[pipeline_stage] = std::max(most_slots[pipeline_stage], reg.num_slots());
    }
    ASSERT_EQ(most_slots.size(), static_cast<size_t>(kStages)) << layout.name;
    for (int s = 0; s < kStages; ++s) {
      EXPECT_EQ(most_slots[s], kStages - s) << layout.name << ", stage " << s;
    }
  }
}

TEST(ZeroShardingTest, SplitsTheVariablesOverTheDataParallelAxisOnly) {
  const GptLayout layout{.name = "dp2_tp2", .data_parallel = 2, .tensor_parallel = 2};
  absl::StatusOr<job::Job> job = GptJobOn(layout, job::REGISTER_MEMORY_SHARED);
  ASSERT_TRUE(job.ok()) << job.status();
  job->set_zero_stage(2);
  absl::StatusOr<CompileResult> compiled = CompileOn(*job, 4);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  // [dp, tp]: the first axis splits what the second does not.
  EXPECT_EQ(SbpOf(*compiled, "wte"), "(S(0), B)");
  EXPECT_EQ(SbpOf(*compiled, "h.0.attn.q.weight"), "(S(0), S(1))");
  EXPECT_EQ(SbpOf(*compiled, "h.0.attn.q.bias"), "(B, S(0))");  // nothing left to split
  EXPECT_EQ(SbpOf(*compiled, "h.0.ln_1.weight"), "(S(0), B)");

  // Without data parallelism there is nothing to split.
  const GptLayout tensor_parallel{.name = "tp2", .tensor_parallel = 2};
  job = GptJobOn(tensor_parallel, job::REGISTER_MEMORY_SHARED);
  ASSERT_TRUE(job.ok()) << job.status();
  job->set_zero_stage(2);
  compiled = CompileOn(*job, 2);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  EXPECT_EQ(SbpOf(*compiled, "wte"), "B");
}

TEST(ZeroShardingTest, RefusesWhatItCannotDo) {
  const GptLayout layout{.name = "dp2", .data_parallel = 2};
  absl::StatusOr<job::Job> job = GptJobOn(layout, job::REGISTER_MEMORY_SHARED);
  ASSERT_TRUE(job.ok()) << job.status();
  job->set_zero_stage(4);
  absl::StatusOr<CompileResult> compiled = CompileOn(*job, 2);
  EXPECT_EQ(compiled.status().code(), absl::StatusCode::kInvalidArgument) << compiled.status();
  EXPECT_TRUE(absl::StrContains(compiled.status().message(), "zero_stage")) << compiled.status();
  job->set_zero_stage(2);
  job->clear_loss();
  job->clear_optimizer();
  compiled = CompileOn(*job, 2);
  EXPECT_EQ(compiled.status().code(), absl::StatusCode::kInvalidArgument) << compiled.status();
  EXPECT_TRUE(absl::StrContains(compiled.status().message(), "trains nothing"))
      << compiled.status();
}

}  // namespace
}  // namespace loom::compiler::testing
