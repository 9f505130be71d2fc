// Activation offload (compiler/activation_offload.h): the backward reads its stashes from host
// memory through offload and reload ops; the GPT trains bit for bit as without on every layout,
// devices and host allocate what the compiler estimated, the pipeline's stash leaves the device,
// OFFLOAD_OVER_BUDGET offloads only the devices over their budget, and bad settings are refused.

#include "compiler/activation_offload.h"

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "compiler/compiler.h"
#include "compiler/memory_plan.h"
#include "core/device_name.h"
#include "gtest/gtest.h"
#include "tests/compiler/compiler_test_util.h"
#include "tests/compiler/gpt_layouts.h"
#include "tests/compiler/run_util.h"

namespace loom::compiler::testing {
namespace {

GptLayout Offloaded(GptLayout layout, job::OffloadActivations offload = job::OFFLOAD_ALL) {
  layout.name += "_offloaded";
  layout.offload_activations = offload;
  return layout;
}

// The memory-sharing matrix (every schedule, DP, TP, PP, EP, ZeRO-3, clipping, bfloat16), and
// four stages, ZeRO-3 under PP and recomputation.
std::vector<GptLayout> OffloadLayouts() {
  std::vector<GptLayout> layouts = OneNodeSharingLayouts();
  layouts.push_back(GptLayout{.name = "pp4_m8_1f1b", .pipeline_stages = 4, .micro_batches = 8});
  layouts.push_back(PipelineScheduleLayouts().back());  // dp2_pp2_m4_zero3
  layouts.push_back(GptLayout{.name = "pp2_m4_recompute_full",
                              .pipeline_stages = 2,
                              .micro_batches = 4,
                              .recompute = job::RECOMPUTE_FULL});
  layouts.push_back(
      GptLayout{.name = "one_device_recompute_selective", .recompute = job::RECOMPUTE_SELECTIVE});
  return layouts;
}

absl::StatusOr<CompileResult> CompileShared(const GptLayout& layout) {
  return CompileGpt(layout, job::REGISTER_MEMORY_SHARED);
}

class ActivationOffloadTest : public ::testing::TestWithParam<GptLayout> {};

// Every stash the backward reads comes back through a reload from a register in host memory that
// an offload wrote; the GPT trains bit for bit as without offload; every device and the node's
// host memory allocate what the compiler estimated, to the byte.
TEST_P(ActivationOffloadTest, TrainsBitForBitWithinTheEstimate) {
  const GptLayout& layout = GetParam();
  absl::StatusOr<CompileResult> kept = CompileShared(layout);
  ASSERT_TRUE(kept.ok()) << kept.status();
  absl::StatusOr<CompileResult> offloaded = CompileShared(Offloaded(layout));
  ASSERT_TRUE(offloaded.ok()) << offloaded.status();

  std::map<std::string, const plan::Task*> producer;
  for (const plan::Task& task : offloaded->plan.tasks()) {
    for (const std::string& output : task.outputs()) producer[output] = &task;
  }
  int host_registers = 0;
  for (const plan::RegisterDesc& reg : offloaded->plan.registers()) {
    if (!reg.host_memory()) continue;
    ++host_registers;
    EXPECT_TRUE(absl::StartsWith(producer.at(reg.name())->name(), "offload/")) << reg.name();
  }
  EXPECT_GT(host_registers, 0) << "nothing offloaded";
  int reloads = 0;
  for (const plan::Task& task : offloaded->plan.tasks()) {
    if (!absl::StartsWith(task.name(), "reload/")) continue;
    ++reloads;
    // Its data; an ordering input may follow (compiler/act_order.h).
    ASSERT_EQ(task.inputs_size() - task.ordering_inputs(), 1) << task.name();
    // Straight from host memory: no boxing between the two copies keeps the stash on a device.
    const plan::Task* from = producer.at(task.inputs(0));
    EXPECT_TRUE(absl::StartsWith(from->name(), "offload/"))
        << task.name() << " reads " << from->name();
  }
  EXPECT_GT(reloads, 0);

  absl::StatusOr<MeasuredRun> expected = RunMeasured(*kept);
  ASSERT_TRUE(expected.ok()) << expected.status();
  absl::StatusOr<MeasuredRun> actual = RunMeasured(*offloaded);
  ASSERT_TRUE(actual.ok()) << actual.status();
  ExpectBitIdentical(expected->fetched, actual->fetched, layout.name);
  EXPECT_EQ(actual->allocated_bytes, actual->estimated_bytes);
  EXPECT_GT(actual->host_estimated_bytes, 0);
  EXPECT_EQ(actual->host_allocated_bytes, actual->host_estimated_bytes);
  EXPECT_EQ(expected->host_estimated_bytes, 0);
}

INSTANTIATE_TEST_SUITE_P(Layouts, ActivationOffloadTest, ::testing::ValuesIn(OffloadLayouts()),
                         [](const ::testing::TestParamInfo<GptLayout>& info) {
                           return info.param.name;
                         });

// What each device's estimate is, by name.
std::map<std::string, DeviceMemoryEstimate> EstimatesOf(const CompileResult& compiled) {
  std::map<std::string, DeviceMemoryEstimate> estimates;
  for (const DeviceMemoryEstimate& estimate : EstimateMemory(compiled.node_plans)) {
    estimates[DeviceName(estimate.device)] = estimate;
  }
  return estimates;
}

// 1F1B on 4 stages keeps 4 micro-batches of stage 0's activations and 3 of stage 1's; offloaded,
// those devices keep the copies in flight (two slots), so their activations shrink, and the
// runtime's peak with them.
TEST(ActivationOffloadTest, TheFirstStagesStashLeavesTheDevice) {
  const GptLayout layout{.name = "pp4_m8", .pipeline_stages = 4, .micro_batches = 8};
  absl::StatusOr<CompileResult> kept = CompileShared(layout);
  ASSERT_TRUE(kept.ok()) << kept.status();
  absl::StatusOr<CompileResult> offloaded = CompileShared(Offloaded(layout));
  ASSERT_TRUE(offloaded.ok()) << offloaded.status();
  const auto before = EstimatesOf(*kept);
  const auto after = EstimatesOf(*offloaded);
  for (const char* device : {"node0/cpu:0", "node0/cpu:1"}) {
    SCOPED_TRACE(device);
    EXPECT_LT(after.at(device).parts.activations, before.at(device).parts.activations);
    EXPECT_LT(after.at(device).total_bytes(), before.at(device).total_bytes());
    EXPECT_GT(after.at(device).parts.offloaded, 0);
  }
  absl::StatusOr<MeasuredRun> kept_run = RunMeasured(*kept);
  ASSERT_TRUE(kept_run.ok()) << kept_run.status();
  absl::StatusOr<MeasuredRun> offloaded_run = RunMeasured(*offloaded);
  ASSERT_TRUE(offloaded_run.ok()) << offloaded_run.status();
  EXPECT_LT(offloaded_run->peak_bytes.at("node0/cpu:0"), kept_run->peak_bytes.at("node0/cpu:0"));
  EXPECT_LE(offloaded_run->host_peak_bytes, offloaded_run->host_estimated_bytes);
}

// One device without micro-batches: the forward's activations no longer wait on the device for
// the backward, so they share memory with the rest of the step.
TEST(ActivationOffloadTest, OneDeviceKeepsLessActivationMemory) {
  const GptLayout layout{.name = "one_device"};
  absl::StatusOr<CompileResult> kept = CompileShared(layout);
  ASSERT_TRUE(kept.ok()) << kept.status();
  absl::StatusOr<CompileResult> offloaded = CompileShared(Offloaded(layout));
  ASSERT_TRUE(offloaded.ok()) << offloaded.status();
  EXPECT_LT(EstimatesOf(*offloaded).at("node0/cpu:0").register_bytes,
            EstimatesOf(*kept).at("node0/cpu:0").register_bytes);
}

// OFFLOAD_OVER_BUDGET: with a budget between stage 0's needs with and without offload and over
// the other stages' needs, the job as it is would be refused; the compiler offloads what the
// backward reads on stage 0's device and nothing on the others (where the last stage's would
// grow: its stash has one slot).
TEST(ActivationOffloadTest, OverBudgetOffloadsOnlyTheDevicesOverIt) {
  const GptLayout layout{.name = "pp4_m8", .pipeline_stages = 4, .micro_batches = 8};
  absl::StatusOr<CompileResult> kept = CompileShared(layout);
  ASSERT_TRUE(kept.ok()) << kept.status();
  absl::StatusOr<CompileResult> all = CompileShared(Offloaded(layout));
  ASSERT_TRUE(all.ok()) << all.status();
  const auto before = EstimatesOf(*kept);
  const auto after = EstimatesOf(*all);
  int64_t budget = after.at("node0/cpu:0").total_bytes();
  for (const char* device : {"node0/cpu:1", "node0/cpu:2", "node0/cpu:3"}) {
    budget = std::max(budget, before.at(device).total_bytes());
  }
  ASSERT_LT(budget, before.at("node0/cpu:0").total_bytes());

  absl::StatusOr<job::Job> job = GptJobOn(layout, job::REGISTER_MEMORY_SHARED);
  ASSERT_TRUE(job.ok()) << job.status();
  job->set_device_memory_budget_bytes(budget);
  absl::StatusOr<CompileResult> refused = CompileOn(*job, layout.devices());
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "offload_activations: OFFLOAD_ALL"))
      << refused.status();

  job->set_offload_activations(job::OFFLOAD_OVER_BUDGET);
  absl::StatusOr<CompileResult> chosen = CompileOn(*job, layout.devices());
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  const auto estimates = EstimatesOf(*chosen);
  EXPECT_GT(estimates.at("node0/cpu:0").parts.offloaded, 0);
  for (const char* device : {"node0/cpu:1", "node0/cpu:2", "node0/cpu:3"}) {
    EXPECT_EQ(estimates.at(device).parts.offloaded, 0) << device;
  }
  absl::StatusOr<MeasuredRun> run = RunMeasured(*chosen);
  ASSERT_TRUE(run.ok()) << run.status();
  absl::StatusOr<MeasuredRun> reference = RunMeasured(*kept);
  ASSERT_TRUE(reference.ok()) << reference.status();
  ExpectBitIdentical(reference->fetched, run->fetched, "over budget");
  for (const auto& [device, peak] : run->peak_bytes) EXPECT_LE(peak, budget) << device;
}

// What forward ops make from variables alone (the weights' bfloat16 copies under mixed precision)
// is no activation: it stays on the device.
TEST(ActivationOffloadTest, WeightsCopiesAreNoActivations) {
  absl::StatusOr<CompileResult> compiled = CompileShared(
      Offloaded(GptLayout{.name = "one_device_bf16", .matmul_data_type = plan::BFLOAT16}));
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  std::map<std::string, const plan::Task*> producer;
  for (const plan::Task& task : compiled->plan.tasks()) {
    for (const std::string& output : task.outputs()) producer[output] = &task;
  }
  int offloads = 0;
  for (const plan::Task& task : compiled->plan.tasks()) {
    if (!absl::StartsWith(task.name(), "offload/")) continue;
    ++offloads;
    // Its data inputs (the orders for memory add ordering inputs after them).
    const plan::Task& made_by = *producer.at(task.inputs(0));
    EXPECT_TRUE(std::any_of(
        made_by.inputs().begin(), made_by.inputs().end() - made_by.ordering_inputs(),
        [&](const std::string& input) { return producer.at(input)->kind() != plan::VARIABLE; }))
        << task.name() << " offloads what " << made_by.name() << " makes from variables alone";
  }
  EXPECT_GT(offloads, 0);
}

// Op.offload overrides the job: ALWAYS offloads one op's outputs under OFFLOAD_NONE, NEVER keeps
// them under OFFLOAD_ALL.
TEST(ActivationOffloadTest, AnOpOverridesTheJob) {
  const GptLayout layout{.name = "one_device"};
  absl::StatusOr<job::Job> job = GptJobOn(layout, job::REGISTER_MEMORY_SHARED);
  ASSERT_TRUE(job.ok()) << job.status();
  std::string chosen_op;
  for (job::Op& op : *job->mutable_ops()) {
    if (op.type() == "gelu") {
      op.set_offload(job::OP_OFFLOAD_ALWAYS);
      chosen_op = op.outputs_size() > 0 ? op.outputs(0) : "";
      break;
    }
  }
  ASSERT_FALSE(chosen_op.empty());
  absl::StatusOr<CompileResult> one = CompileOn(*job, 1);
  ASSERT_TRUE(one.ok()) << one.status();
  std::vector<std::string> offloads;
  for (const plan::Task& task : one->plan.tasks()) {
    if (absl::StartsWith(task.name(), "offload/")) offloads.push_back(task.name());
  }
  ASSERT_EQ(offloads.size(), 1u);
  EXPECT_TRUE(absl::StartsWith(offloads[0], absl::StrCat("offload/", chosen_op)));

  for (job::Op& op : *job->mutable_ops()) {
    if (op.offload() == job::OP_OFFLOAD_ALWAYS) op.set_offload(job::OP_OFFLOAD_NEVER);
  }
  job->set_offload_activations(job::OFFLOAD_ALL);
  absl::StatusOr<CompileResult> all_but_one = CompileOn(*job, 1);
  ASSERT_TRUE(all_but_one.ok()) << all_but_one.status();
  int count = 0;
  for (const plan::Task& task : all_but_one->plan.tasks()) {
    if (!absl::StartsWith(task.name(), "offload/")) continue;
    ++count;
    EXPECT_FALSE(absl::StartsWith(task.name(), absl::StrCat("offload/", chosen_op, "@")))
        << task.name();
  }
  EXPECT_GT(count, 1);
}

// Random per-op settings, with and without recomputation, on layouts with and without pipeline
// stages and tensor parallelism: any subset of stashes offloaded trains bit for bit as none, and
// devices and host allocate the estimate.
TEST(ActivationOffloadTest, RandomPerOpSettingsTrainBitForBit) {
  for (const GptLayout& base :
       {GptLayout{.name = "one_device"},
        GptLayout{.name = "pp2_m2", .pipeline_stages = 2, .micro_batches = 2},
        GptLayout{.name = "dp2_tp2", .data_parallel = 2, .tensor_parallel = 2}}) {
    for (uint32_t seed = 1; seed <= 4; ++seed) {
      GptLayout layout = base;
      layout.recompute = seed % 2 == 0 ? job::RECOMPUTE_FULL : job::RECOMPUTE_NONE;
      absl::StatusOr<CompileResult> kept = CompileShared(layout);
      ASSERT_TRUE(kept.ok()) << kept.status();
      absl::StatusOr<job::Job> job = GptJobOn(layout, job::REGISTER_MEMORY_SHARED);
      ASSERT_TRUE(job.ok()) << job.status();
      std::mt19937 random(seed);
      job->set_offload_activations(seed % 3 == 0 ? job::OFFLOAD_ALL : job::OFFLOAD_NONE);
      for (job::Op& op : *job->mutable_ops()) {
        const uint32_t draw = random() % 3;
        op.set_offload(draw == 0   ? job::OP_OFFLOAD_ALWAYS
                       : draw == 1 ? job::OP_OFFLOAD_NEVER
                                   : job::OP_OFFLOAD_DEFAULT);
      }
      const std::string what = absl::StrCat(base.name, " seed ", seed);
      absl::StatusOr<CompileResult> offloaded = CompileOn(*job, layout.devices());
      ASSERT_TRUE(offloaded.ok()) << what << ": " << offloaded.status();
      absl::StatusOr<MeasuredRun> expected = RunMeasured(*kept);
      ASSERT_TRUE(expected.ok()) << what << ": " << expected.status();
      absl::StatusOr<MeasuredRun> actual = RunMeasured(*offloaded);
      ASSERT_TRUE(actual.ok()) << what << ": " << actual.status();
      ExpectBitIdentical(expected->fetched, actual->fetched, what);
      EXPECT_EQ(actual->allocated_bytes, actual->estimated_bytes) << what;
      EXPECT_EQ(actual->host_allocated_bytes, actual->host_estimated_bytes) << what;
      EXPECT_GT(actual->host_estimated_bytes, 0) << what;
    }
  }
}

// The node's host memory has a budget: the job's own, or the cluster's; beyond it the job is
// refused naming the node and its largest holders.
TEST(ActivationOffloadTest, HostMemoryOverItsBudgetIsRefused) {
  const GptLayout layout =
      Offloaded(GptLayout{.name = "pp2_m4", .pipeline_stages = 2, .micro_batches = 4});
  absl::StatusOr<job::Job> job = GptJobOn(layout, job::REGISTER_MEMORY_SHARED);
  ASSERT_TRUE(job.ok()) << job.status();
  job->set_host_memory_budget_bytes(4096);
  absl::StatusOr<CompileResult> refused = CompileOn(*job, layout.devices());
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "node 0's host memory needs"))
      << refused.status();
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "node0/cpu:0")) << refused.status();

  job->set_host_memory_budget_bytes(0);
  DeviceSet devices = DeviceSet::Cpus(layout.devices(), 1);
  devices.host_memory_budget_bytes = {4096};
  refused = Compile(*job, StandardOps(), devices);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  devices.host_memory_budget_bytes = {int64_t{1} << 40};
  EXPECT_TRUE(Compile(*job, StandardOps(), devices).ok());
}

// Stages on two nodes: each node plan holds its own stage's host copies and the job's host budget.
TEST(ActivationOffloadTest, EachNodeHoldsItsStagesHostCopies) {
  const GptLayout layout = Offloaded(
      GptLayout{.name = "pp2_two_nodes", .pipeline_stages = 2, .micro_batches = 4, .nodes = 2});
  absl::StatusOr<job::Job> job = GptJobOn(layout, job::REGISTER_MEMORY_SHARED);
  ASSERT_TRUE(job.ok()) << job.status();
  job->set_host_memory_budget_bytes(int64_t{1} << 30);
  absl::StatusOr<CompileResult> compiled = CompileOn(*job, layout.devices(), layout.nodes);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  ASSERT_EQ(compiled->node_plans.size(), 2u);
  for (const plan::Plan& node_plan : compiled->node_plans) {
    EXPECT_EQ(node_plan.host_memory_budget_bytes(), int64_t{1} << 30);
    int host_registers = 0;
    for (const plan::RegisterDesc& reg : node_plan.registers()) host_registers += reg.host_memory();
    EXPECT_GT(host_registers, 0) << "node " << node_plan.node();
  }
}

// On a GPU the copies run on its copy streams, out to pinned host memory and back in, so that
// they overlap its compute (compiled here; tests/cuda/cuda_training_test.cc runs it on a GPU).
TEST(ActivationOffloadTest, OnAGpuTheCopiesRunOnItsCopyStreams) {
  absl::StatusOr<job::Job> job = GptJobOn(
      Offloaded(GptLayout{.name = "one_gpu", .device_type = "cuda"}), job::REGISTER_MEMORY_SHARED);
  ASSERT_TRUE(job.ok()) << job.status();
  DeviceSet gpu;
  gpu.devices.emplace_back().set_type(plan::CUDA);
  absl::StatusOr<CompileResult> compiled = Compile(*job, StandardOps(), gpu);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  int offloads = 0;
  int reloads = 0;
  for (const plan::Task& task : compiled->plan.tasks()) {
    if (absl::StartsWith(task.name(), "offload/")) {
      ++offloads;
      EXPECT_EQ(task.stream().device().type(), plan::CUDA) << task.name();
      EXPECT_EQ(task.stream().kind(), plan::STREAM_COPY_OUT) << task.name();
    } else if (absl::StartsWith(task.name(), "reload/")) {
      ++reloads;
      EXPECT_EQ(task.stream().kind(), plan::STREAM_COPY_IN) << task.name();
    }
  }
  EXPECT_GT(offloads, 0);
  EXPECT_EQ(offloads, reloads);
}

TEST(ActivationOffloadTest, BadSettingsAreRefused) {
  absl::StatusOr<job::Job> job =
      GptJobOn(GptLayout{.name = "one_device"}, job::REGISTER_MEMORY_SHARED);
  ASSERT_TRUE(job.ok()) << job.status();
  job::Job unknown = *job;
  unknown.set_offload_activations(static_cast<job::OffloadActivations>(7));
  absl::StatusOr<CompileResult> refused = CompileOn(unknown, 1);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "offload_activations is 7"))
      << refused.status();

  job::Job negative = *job;
  negative.set_host_memory_budget_bytes(-1);
  refused = CompileOn(negative, 1);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();

  job::Job untrained = *job;
  untrained.clear_loss();
  untrained.clear_optimizer();
  untrained.set_offload_activations(job::OFFLOAD_ALL);
  refused = CompileOn(untrained, 1);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "no loss")) << refused.status();
}

}  // namespace
}  // namespace loom::compiler::testing
