// Orders for memory (compiler/act_order.h): on every CPU device that trains variables without
// micro-batches, the compute acts that wait for nothing outside their stream form one chain in the
// job's op order, each forward act of a step follows the step barrier, the barrier follows every
// update of the step before, and the memory-sharing proof turns those orders into smaller pools.

#include "compiler/act_order.h"

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "compiler/compiler.h"
#include "compiler/memory_plan.h"
#include "compiler/memory_sharing.h"
#include "compiler/node_split.h"
#include "core/device_name.h"
#include "gtest/gtest.h"
#include "tests/compiler/gpt_layouts.h"

namespace loom::compiler::testing {
namespace {

bool IsBarrier(const plan::Task& task) { return absl::StartsWith(task.name(), "step-barrier@"); }

// `plan` without the orders: the barriers removed, every task's ordering inputs dropped.
plan::Plan WithoutOrders(const plan::Plan& plan) {
  plan::Plan result = plan;
  result.clear_tasks();
  for (const plan::Task& task : plan.tasks()) {
    if (IsBarrier(task) || absl::StartsWith(task.name(), "repeat:step-barrier@")) continue;
    plan::Task& kept = *result.add_tasks();
    kept = task;
    const int inputs = task.inputs_size() - task.ordering_inputs();
    kept.mutable_inputs()->DeleteSubrange(inputs, task.ordering_inputs());
    if (!kept.input_lookahead().empty()) kept.mutable_input_lookahead()->Truncate(inputs);
    kept.set_ordering_inputs(0);
    kept.set_index(static_cast<uint32_t>(result.tasks_size() - 1));
  }
  result.clear_registers();
  for (const plan::RegisterDesc& reg : plan.registers()) {
    if (!absl::StartsWith(reg.name(), "step-barrier@")) *result.add_registers() = reg;
  }
  return result;
}

// The chain of `device`'s compute tasks that act `pieces` times a step (the step barrier aside)
// and that `keep` keeps, first to last: the one order the plan's edges among them (data and
// ordering inputs) allow. An error where they allow several (two tasks unordered).
absl::StatusOr<std::vector<std::string>> ChainOf(
    const plan::Plan& plan, const std::string& device, int pieces = 1,
    const std::function<bool(const plan::Task&)>& keep = [](const plan::Task&) { return true; }) {
  std::map<std::string, std::string> producer;  // register -> member
  std::vector<const plan::Task*> members;
  for (const plan::Task& task : plan.tasks()) {
    if (DeviceName(task.stream().device()) != device || task.kind() != plan::COMPUTE ||
        IsBarrier(task) || std::max(task.pieces_per_step(), 1) != pieces || !keep(task)) {
      continue;
    }
    members.push_back(&task);
    for (const std::string& output : task.outputs()) producer[output] = task.name();
  }
  std::map<std::string, std::set<std::string>> waits_for;
  for (const plan::Task* task : members) {
    waits_for[task->name()];
    for (const std::string& input : task->inputs()) {
      auto found = producer.find(input);
      if (found != producer.end() && found->second != task->name()) {
        waits_for[task->name()].insert(found->second);
      }
    }
  }
  std::vector<std::string> chain;
  std::set<std::string> done;
  while (chain.size() < members.size()) {
    std::vector<std::string> ready;
    for (const auto& [task, waits] : waits_for) {
      if (done.contains(task)) continue;
      bool all = true;
      for (const std::string& wait : waits) all = all && done.contains(wait);
      if (all) ready.push_back(task);
    }
    if (ready.size() != 1) {
      return absl::FailedPreconditionError(
          absl::StrCat("after ", chain.size(), " of ", members.size(), " tasks, ", ready.size(),
                       " are ready", ready.empty() ? "" : ": " + ready[0]));
    }
    chain.push_back(ready[0]);
    done.insert(ready[0]);
  }
  return chain;
}

int64_t PoolBytes(const plan::Plan& lowered) {
  std::vector<plan::Plan> node_plans = SplitByNode(lowered);
  ShareRegisterMemory(node_plans);
  int64_t bytes = 0;
  for (const plan::Plan& node_plan : node_plans) {
    for (const plan::MemoryPool& pool : node_plan.memory_pools()) bytes += pool.bytes();
  }
  return bytes;
}

absl::StatusOr<CompileResult> Lower(const GptLayout& layout, job::RegisterMemory memory) {
  absl::StatusOr<job::Job> job = GptJobOn(layout, memory);
  if (!job.ok()) return job.status();
  return LowerJob(*job, StandardOps(), DeviceSet::Cpus(layout.devices(), 1));
}

class ActOrderTest : public ::testing::TestWithParam<GptLayout> {};

// Per device: one barrier, reading exactly the device's trained variables as ordering inputs, and
// every other COMPUTE task of the device reads it or reads what a task that follows it wrote.
TEST_P(ActOrderTest, EveryForwardActFollowsTheUpdatesOfTheStepBefore) {
  const GptLayout& layout = GetParam();
  absl::StatusOr<CompileResult> compiled = CompileGpt(layout, job::REGISTER_MEMORY_SHARED);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  const plan::Plan& plan = compiled->plan;
  absl::flat_hash_map<std::string, int> producer;
  for (int t = 0; t < plan.tasks_size(); ++t) {
    for (const std::string& output : plan.tasks(t).outputs()) producer[output] = t;
  }
  std::map<std::string, std::vector<std::string>> trained;  // device -> variable values
  std::map<std::string, int> barriers;                      // device -> task
  for (int t = 0; t < plan.tasks_size(); ++t) {
    const plan::Task& task = plan.tasks(t);
    const std::string device = DeviceName(task.stream().device());
    if (task.kind() == plan::VARIABLE && task.inputs_size() == 1) {
      trained[device].push_back(task.outputs(0));
    }
    if (IsBarrier(task)) {
      EXPECT_TRUE(barriers.emplace(device, t).second) << "two barriers on " << device;
    }
  }
  ASSERT_FALSE(trained.empty());
  for (const auto& [device, values] : trained) {
    ASSERT_TRUE(barriers.contains(device)) << layout.name << ": no barrier on " << device;
    const plan::Task& barrier = plan.tasks(barriers.at(device));
    EXPECT_EQ(barrier.ordering_inputs(), barrier.inputs_size());
    EXPECT_EQ(std::vector<std::string>(barrier.inputs().begin(), barrier.inputs().end()), values);
  }
  // follows[t]: every act of task t follows the barrier's act of the same step (data edges on
  // the device, to a fixed point).
  std::vector<char> follows(plan.tasks_size(), 0);
  bool changed = true;
  while (changed) {
    changed = false;
    for (int t = 0; t < plan.tasks_size(); ++t) {
      const plan::Task& task = plan.tasks(t);
      if (follows[t] || task.kind() == plan::VARIABLE) continue;
      for (const std::string& input : task.inputs()) {
        const plan::Task& from = plan.tasks(producer.at(input));
        const bool same_device =
            DeviceName(from.stream().device()) == DeviceName(task.stream().device());
        if (same_device && (IsBarrier(from) || follows[producer.at(input)])) {
          follows[t] = 1;
          changed = true;
          break;
        }
      }
    }
  }
  for (int t = 0; t < plan.tasks_size(); ++t) {
    const plan::Task& task = plan.tasks(t);
    if (task.kind() != plan::COMPUTE || IsBarrier(task)) continue;
    EXPECT_TRUE(follows[t]) << layout.name << ": '" << task.name() << "' can act before "
                            << "its device's updates of the step before";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, ActOrderTest,
    ::testing::Values(
        GptLayout{.name = "one_device"}, GptLayout{.name = "dp2", .data_parallel = 2},
        GptLayout{.name = "tp2", .tensor_parallel = 2},
        GptLayout{.name = "pp2_m1", .pipeline_stages = 2},
        GptLayout{.name = "dp2_ep2_moe", .data_parallel = 2, .experts = 4, .expert_parallel = 2},
        GptLayout{.name = "dp2_tp2_bf16_clipped",
                  .data_parallel = 2,
                  .tensor_parallel = 2,
                  .max_grad_norm = 0.5,
                  .matmul_data_type = plan::BFLOAT16},
        GptLayout{.name = "dp2_zero3", .data_parallel = 2, .zero_stage = 3},
        GptLayout{
            .name = "dp2_tp2_zero3", .data_parallel = 2, .tensor_parallel = 2, .zero_stage = 3}),
    [](const ::testing::TestParamInfo<GptLayout>& info) { return info.param.name; });

// One device: every compute act is in the chain, in the job's order: the copies that weight
// gradients make of forward tensors come in the backward, right before their matmuls, not in
// the forward where they are first ready (and would be kept through it).
TEST(ActOrderTest, OneDeviceChainsEveryComputeActInTheJobsOrder) {
  const GptLayout layout{.name = "one_device"};
  absl::StatusOr<CompileResult> compiled = CompileGpt(layout, job::REGISTER_MEMORY_SHARED);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  absl::StatusOr<std::vector<std::string>> ordered = ChainOf(compiled->plan, "node0/cpu:0");
  ASSERT_TRUE(ordered.ok()) << ordered.status();
  const std::vector<std::string>& chain = *ordered;
  int compute = 0;
  for (const plan::Task& task : compiled->plan.tasks()) {
    compute += task.kind() == plan::COMPUTE && !IsBarrier(task);
  }
  EXPECT_EQ(static_cast<int>(chain.size()), compute);
  auto at = [&](const std::string& name) {
    return std::find(chain.begin(), chain.end(), name) - chain.begin();
  };
  ASSERT_LT(at("grad/h.0.attn.v.matmul/reshape@0"), static_cast<int64_t>(chain.size()));
  EXPECT_GT(at("grad/h.0.attn.v.matmul/reshape@0"), at("loss@0"));
  EXPECT_GT(at("grad/h.0.attn.v.matmul/reshape@0"), at("grad/h.3.attn.v.matmul/reshape@0"));
}

// The orders let the forward's transients of one step share with the backward's of the step
// before, and a step's backward transients share with each other: the pool of one device halves.
TEST(ActOrderTest, OneDevicePoolHalves) {
  absl::StatusOr<CompileResult> lowered =
      Lower(GptLayout{.name = "one_device"}, job::REGISTER_MEMORY_SHARED);
  ASSERT_TRUE(lowered.ok()) << lowered.status();
  const int64_t ordered = PoolBytes(lowered->plan);
  const int64_t free = PoolBytes(WithoutOrders(lowered->plan));
  EXPECT_LE(ordered * 2, free) << ordered << " ordered, " << free << " without the orders";
}

// With the barrier, step n + 1's gradient bucket is packed only after step n's updates, which
// follow its all-reduce and unpack: a second slot for the bucket could never be used, so it has
// one (the same bytes as the gradients it holds instead of twice them).
TEST(ActOrderTest, DataParallelBucketsKeepOneSlot) {
  absl::StatusOr<CompileResult> compiled =
      CompileGpt(GptLayout{.name = "dp2", .data_parallel = 2}, job::REGISTER_MEMORY_SHARED);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  int buckets = 0;
  for (const plan::RegisterDesc& reg : compiled->plan.registers()) {
    if (!absl::StartsWith(reg.name(), "gradient_bucket.")) continue;
    ++buckets;
    EXPECT_EQ(reg.num_slots(), 1) << reg.name();
  }
  EXPECT_EQ(buckets, 4);  // packed and all-reduced, on each of the two ranks
}

int64_t LargestDeviceBytes(const CompileResult& compiled) {
  int64_t most = 0;
  for (const DeviceMemoryEstimate& estimate : EstimateMemory(compiled.node_plans)) {
    most = std::max(most, estimate.total_bytes());
  }
  return most;
}

// ZeRO stage 3: each use of a split variable has its own all-gather, which acts once the chain
// reaches the use before (or at the step's start, after the barrier); its one slot shares a
// pool; each gradient's reduce-scatter acts before the chain writes the next gradient. So the
// gathered copies and the full gradients live briefly, and a device needs less than under
// stage 2, where each value is gathered once a step for all its uses.
TEST(ActOrderTest, ZeroStage3GathersEachUseOneUseAhead) {
  const GptLayout layout{.name = "dp2_zero3", .data_parallel = 2, .zero_stage = 3};
  absl::StatusOr<CompileResult> compiled = CompileGpt(layout, job::REGISTER_MEMORY_SHARED);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  const plan::Plan& plan = compiled->plan;
  absl::flat_hash_map<std::string, const plan::Task*> producer;
  absl::flat_hash_map<std::string, std::vector<const plan::Task*>> readers;
  absl::flat_hash_map<std::string, const plan::RegisterDesc*> registers;
  for (const plan::Task& task : plan.tasks()) {
    for (const std::string& output : task.outputs()) producer[output] = &task;
    for (const std::string& input : task.inputs()) readers[input].push_back(&task);
  }
  for (const plan::RegisterDesc& reg : plan.registers()) registers[reg.name()] = &reg;
  int gathers = 0;
  int scatters = 0;
  int ordered_scatters = 0;
  for (const plan::Task& task : plan.tasks()) {
    if (task.kind() != plan::COLLECTIVE) continue;
    const plan::Task& from = *producer.at(task.inputs(0));
    if (task.collective().kind() == plan::ALL_GATHER && from.kind() == plan::VARIABLE) {
      ++gathers;
      EXPECT_EQ(readers[task.outputs(0)].size(), 1u) << task.name();
      ASSERT_EQ(task.ordering_inputs(), 1) << task.name();
      EXPECT_EQ(producer.at(task.inputs(1))->kind(), plan::COMPUTE) << task.name();
      const plan::RegisterDesc& gathered = *registers.at(task.outputs(0));
      EXPECT_EQ(gathered.num_slots(), 1) << gathered.name();
      EXPECT_FALSE(gathered.pool().empty()) << gathered.name() << " shares no memory";
    }
    if (task.collective().kind() == plan::REDUCE_SCATTER && from.kind() == plan::COMPUTE) {
      ++scatters;
      for (const plan::Task* reader : readers[task.outputs(0)]) {
        const int first_ordering = reader->inputs_size() - reader->ordering_inputs();
        for (int i = first_ordering; i < reader->inputs_size(); ++i) {
          ordered_scatters +=
              reader->kind() == plan::COMPUTE && reader->inputs(i) == task.outputs(0);
        }
      }
    }
  }
  EXPECT_GT(gathers, 0);
  EXPECT_GT(scatters, 0);
  // On each of the two ranks every reduce-scatter but the last orders the next gradient.
  EXPECT_EQ(ordered_scatters, scatters - 2);

  GptLayout stage_2 = layout;
  stage_2.zero_stage = 2;
  absl::StatusOr<CompileResult> gathered_once = CompileGpt(stage_2, job::REGISTER_MEMORY_SHARED);
  ASSERT_TRUE(gathered_once.ok()) << gathered_once.status();
  EXPECT_LT(LargestDeviceBytes(*compiled), LargestDeviceBytes(*gathered_once));
}

// Micro-batches on one device: the compute acts of a micro-batch form one chain, as a step's do
// without micro-batches, and its last task reads the first task's first output (one slot), so
// micro-batch n + 1 starts after n ends: the chain is a cycle through every task that acts per
// micro-batch. The step barrier's token (once a step) is repeated to the micro-batches: the
// head of the chain reads it. So micro-batches share memory (without the orders nothing would):
// the same global batch in 4 micro-batches takes less than in one.
TEST(ActOrderTest, MicroBatchesFollowOneAnother) {
  const GptLayout layout{.name = "m4", .micro_batches = 4};
  absl::StatusOr<CompileResult> lowered = Lower(layout, job::REGISTER_MEMORY_SHARED);
  ASSERT_TRUE(lowered.ok()) << lowered.status();
  const plan::Plan& plan = lowered->plan;
  absl::flat_hash_map<std::string, const plan::Task*> producer;
  for (const plan::Task& task : plan.tasks()) {
    for (const std::string& output : task.outputs()) producer[output] = &task;
  }
  // One order of every per-micro-batch compute task; its first reads the barrier's token,
  // repeated to the micro-batches; its last reads the first's output, which has one slot.
  absl::StatusOr<std::vector<std::string>> ordered = ChainOf(plan, "node0/cpu:0", 4);
  ASSERT_TRUE(ordered.ok()) << ordered.status();
  const std::vector<std::string>& chain = *ordered;
  int per_micro_batch = 0;
  const plan::Task* head = nullptr;
  const plan::Task* tail = nullptr;
  for (const plan::Task& task : plan.tasks()) {
    if (task.kind() != plan::COMPUTE || task.pieces_per_step() != 4) continue;
    ++per_micro_batch;
    if (task.name() == chain.front()) head = &task;
    if (task.name() == chain.back()) tail = &task;
  }
  EXPECT_EQ(static_cast<int>(chain.size()), per_micro_batch);
  ASSERT_NE(head, nullptr);
  ASSERT_NE(tail, nullptr);
  ASSERT_EQ(head->ordering_inputs(), 1);
  const plan::Task& repeat = *producer.at(head->inputs(head->inputs_size() - 1));
  EXPECT_EQ(repeat.name(), "repeat:step-barrier@node0/cpu:0");
  EXPECT_EQ(repeat.kind(), plan::REPEAT);
  EXPECT_EQ(repeat.factor(), 4);
  EXPECT_NE(std::find(tail->inputs().begin(), tail->inputs().end(), head->outputs(0)),
            tail->inputs().end());
  for (const plan::RegisterDesc& reg : plan.registers()) {
    if (reg.name() == head->outputs(0)) EXPECT_EQ(reg.num_slots(), 1) << reg.name();
  }
  // Without the orders nothing is provably apart.
  EXPECT_GT(PoolBytes(plan), 0);
  EXPECT_EQ(PoolBytes(WithoutOrders(plan)), 0);

  absl::StatusOr<CompileResult> four = CompileGpt(layout, job::REGISTER_MEMORY_SHARED);
  ASSERT_TRUE(four.ok()) << four.status();
  absl::StatusOr<CompileResult> one =
      CompileGpt(GptLayout{.name = "m1"}, job::REGISTER_MEMORY_SHARED);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_LT(LargestDeviceBytes(*four), LargestDeviceBytes(*one));
}

// ZeRO stage 3 under micro-batches: each use's all-gather acts once per micro-batch (the shard
// repeated, then gathered), one use ahead in the chain, so the gathered copies live for one use
// of one micro-batch and a device needs less than under stage 2.
TEST(ActOrderTest, ZeroStage3GathersPerMicroBatch) {
  GptLayout layout{.name = "dp2_m4_zero3", .data_parallel = 2, .micro_batches = 4, .zero_stage = 3};
  absl::StatusOr<CompileResult> compiled = CompileGpt(layout, job::REGISTER_MEMORY_SHARED);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  absl::flat_hash_map<std::string, const plan::Task*> producer;
  for (const plan::Task& task : compiled->plan.tasks()) {
    for (const std::string& output : task.outputs()) producer[output] = &task;
  }
  int gathers = 0;
  int ordered = 0;
  for (const plan::Task& task : compiled->plan.tasks()) {
    if (task.kind() != plan::COLLECTIVE || task.collective().kind() != plan::ALL_GATHER) continue;
    const plan::Task& from = *producer.at(task.inputs(0));
    if (from.kind() != plan::REPEAT) continue;
    EXPECT_EQ(producer.at(from.inputs(0))->kind(), plan::VARIABLE) << task.name();
    EXPECT_EQ(task.pieces_per_step(), 4) << task.name();
    ++gathers;
    ordered += task.ordering_inputs();
  }
  EXPECT_GT(gathers, 0);
  EXPECT_GT(ordered, gathers / 2);  // all but each stream's first use of a micro-batch

  layout.zero_stage = 2;
  absl::StatusOr<CompileResult> stage_2 = CompileGpt(layout, job::REGISTER_MEMORY_SHARED);
  ASSERT_TRUE(stage_2.ok()) << stage_2.status();
  EXPECT_LT(LargestDeviceBytes(*compiled), LargestDeviceBytes(*stage_2));
}

// Pipeline stages under micro-batches (1F1B): a stage's forward and its backward each form a
// chain, micro-batch after micro-batch, and 1F1B's interleaving of the two is kept (the chains
// are apart: the stage-0 device runs forwards of micro-batches whose backward has not run). On
// the last stage, where 1F1B runs each micro-batch's backward before the next forward, one chain.
TEST(ActOrderTest, PipelineStagesChainEachDirection) {
  const GptLayout layout{.name = "pp2_m4", .pipeline_stages = 2, .micro_batches = 4};
  absl::StatusOr<CompileResult> lowered = Lower(layout, job::REGISTER_MEMORY_SHARED);
  ASSERT_TRUE(lowered.ok()) << lowered.status();
  const plan::Plan& plan = lowered->plan;
  auto backward = [](const plan::Task& task) { return absl::StartsWith(task.name(), "grad/"); };
  auto forward = [&](const plan::Task& task) { return !backward(task); };
  for (const std::string device : {"node0/cpu:0", "node0/cpu:1"}) {
    absl::StatusOr<std::vector<std::string>> forwards = ChainOf(plan, device, 4, forward);
    EXPECT_TRUE(forwards.ok()) << device << ": " << forwards.status();
    absl::StatusOr<std::vector<std::string>> backwards = ChainOf(plan, device, 4, backward);
    EXPECT_TRUE(backwards.ok()) << device << ": " << backwards.status();
  }
  // Stage 0 keeps forwards and backwards apart; the last stage chains them.
  EXPECT_FALSE(ChainOf(plan, "node0/cpu:0", 4).ok());
  EXPECT_TRUE(ChainOf(plan, "node0/cpu:1", 4).ok());
  // The pool: smaller than without the orders (tests/compiler/pipeline_test.cc checks that 1F1B
  // still emerges, its stash bound included).
  EXPECT_LT(PoolBytes(plan), PoolBytes(WithoutOrders(plan)));
}

// No orders where they cost more than they give: schedules whose weight gradients run
// micro-batches behind or whose stages share devices, experts exchanging tokens under
// micro-batches (the exchanges overlap other micro-batches' compute), registers apart.
TEST(ActOrderTest, NoneWhereItCannotHelp) {
  GptLayout zero_bubble{.name = "pp2_m4_zero_bubble", .pipeline_stages = 2, .micro_batches = 4};
  zero_bubble.schedule = job::ZERO_BUBBLE;
  GptLayout interleaved{.name = "pp2_v2_m4_interleaved", .pipeline_stages = 2, .micro_batches = 4};
  interleaved.schedule = job::INTERLEAVED;
  interleaved.virtual_stages = 2;
  GptLayout experts{.name = "dp2_ep2_m2_moe", .data_parallel = 2, .micro_batches = 2};
  experts.experts = 4;
  experts.expert_parallel = 2;
  for (const auto& [layout, memory] :
       {std::pair{zero_bubble, job::REGISTER_MEMORY_SHARED},
        std::pair{interleaved, job::REGISTER_MEMORY_SHARED},
        std::pair{experts, job::REGISTER_MEMORY_SHARED},
        std::pair{GptLayout{.name = "apart"}, job::REGISTER_MEMORY_SEPARATE}}) {
    absl::StatusOr<CompileResult> lowered = Lower(layout, memory);
    ASSERT_TRUE(lowered.ok()) << lowered.status();
    for (const plan::Task& task : lowered->plan.tasks()) {
      EXPECT_FALSE(IsBarrier(task)) << layout.name << ": " << task.name();
      EXPECT_EQ(task.ordering_inputs(), 0) << layout.name << ": " << task.name();
    }
  }
}

}  // namespace
}  // namespace loom::compiler::testing
