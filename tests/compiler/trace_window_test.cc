// Which step an act belongs to (Task.pieces_per_step, set by the compiler) and the recording of a
// window of steps (JobOptions::recorded_steps), on the node plans of a training job with
// micro-batches, data parallelism and two pipeline stages on two nodes, run over the in-memory
// network (so SEND / RECEIVE pairs carry micro-batches and collectives the step's gradients).
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/plan_steps.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_kernels.h"
#include "tests/compiler/compiler_test_util.h"
#include "tests/runtime/node_runtimes.h"

namespace loom::compiler {
namespace {

constexpr int kSteps = 4;
constexpr int kMicroBatches = 4;

// h = gelu(x w1) on stage 0 (node 0), loss = mean((h w2 - t)^2) on stage 1 (node 1), each stage
// data parallel over its node's two devices.
job::Job PipelinedMlp() {
  return testing::ParseJob(R"pb(
    name: "pipelined_mlp"
    num_steps: 4
    num_micro_batches: 4
    optimizer { adamw { learning_rate: 0.01 } }
    loss: "loss"
    placement { devices: [ "node0/cpu:0", "node0/cpu:1" ] }
    stage_placements { devices: [ "node0/cpu:0", "node0/cpu:1" ] }
    stage_placements { devices: [ "node1/cpu:0", "node1/cpu:1" ] }
    inputs {
      name: "x"
      shape: [ 16, 4 ]
      random_normal { std: 1 seed: 1 }
    }
    inputs {
      name: "target"
      shape: [ 16, 2 ]
      random_normal { std: 1 seed: 3 }
      placement { devices: [ "node1/cpu:0", "node1/cpu:1" ] }
    }
    variables {
      name: "w1"
      shape: [ 4, 16 ]
      initializer { normal { std: 0.5 seed: 2 } }
    }
    variables {
      name: "w2"
      shape: [ 16, 2 ]
      initializer { normal { std: 0.5 seed: 4 } }
      placement { devices: [ "node1/cpu:0", "node1/cpu:1" ] }
    }
    ops {
      name: "h"
      type: "matmul"
      inputs: [ "x", "w1" ]
      outputs: "h"
      stage: 0
    }
    ops { name: "a" type: "gelu" inputs: "h" outputs: "a" stage: 0 }
    ops {
      name: "y"
      type: "matmul"
      inputs: [ "a", "w2" ]
      outputs: "y"
      stage: 1
    }
    ops {
      name: "error"
      type: "subtract"
      inputs: [ "y", "target" ]
      outputs: "error"
      stage: 1
    }
    ops {
      name: "squared"
      type: "multiply"
      inputs: [ "error", "error" ]
      outputs: "squared"
      stage: 1
    }
    ops { name: "loss" type: "reduce_mean" inputs: "squared" outputs: "loss" stage: 1 }
    # The loss broadcast: an all-reduce per micro-batch.
    ops {
      name: "loss_everywhere"
      type: "identity"
      inputs: "loss"
      outputs: "loss_everywhere"
      stage: 1
      output_sbp { sbp: "B" }
    }
    fetch: "loss"
    fetch: "loss_everywhere"
  )pb");
}

std::vector<plan::Plan> NodePlans() {
  absl::StatusOr<CompileResult> compiled = testing::CompileOn(PipelinedMlp(), 4, 2);
  EXPECT_TRUE(compiled.ok()) << compiled.status();
  if (!compiled.ok()) return {};
  EXPECT_EQ(compiled->node_plans.size(), 2u);
  return compiled->node_plans;
}

// Acts per (task name, step), over every node.
using ActCounts = std::map<std::pair<std::string, int64_t>, int>;

// How many acts a SEND or RECEIVE takes per piece depends on timing (a SEND may end one transfer
// and start the next in one act or in two); every other task's acts are the same in every run.
bool ActsPerPieceVary(const std::string& task_name) {
  return task_name.rfind("send:", 0) == 0 || task_name.rfind("receive:", 0) == 0;
}

// Fails unless `window` has acts of exactly the tasks and steps of `every` within steps
// [first, last], as many for the tasks whose acts per piece do not vary.
void ExpectWindowOf(const ActCounts& every, int64_t first, int64_t last, const ActCounts& window) {
  ActCounts expected;
  for (const auto& [key, acts] : every) {
    if (key.second >= first && key.second <= last) expected[key] = acts;
  }
  ASSERT_FALSE(expected.empty());
  ASSERT_EQ(window.size(), expected.size());
  for (const auto& [key, acts] : expected) {
    auto found = window.find(key);
    ASSERT_NE(found, window.end()) << key.first << " in step " << key.second;
    if (!ActsPerPieceVary(key.first)) {
      EXPECT_EQ(found->second, acts) << key.first << " in step " << key.second;
    }
  }
}

ActCounts RunAndCount(const std::vector<plan::Plan>& plans, RecordedSteps steps) {
  KernelRegistry kernels;
  EXPECT_TRUE(RegisterCpuKernels(&kernels).ok());
  JobOptions options;
  options.stall_timeout = absl::Seconds(30);
  options.record_events = true;
  options.recorded_steps = steps;
  loom::testing::NodeRuntimes nodes(plans, options, &kernels);
  EXPECT_TRUE(nodes.created().ok()) << nodes.created();
  EXPECT_TRUE(nodes.Start().ok());
  absl::Status finished = nodes.Wait();
  EXPECT_TRUE(finished.ok()) << finished;
  ActCounts counts;
  for (size_t node = 0; node < plans.size(); ++node) {
    absl::flat_hash_map<uint32_t, const plan::Task*> task_of_index;
    for (const plan::Task& task : plans[node].tasks()) task_of_index[task.index()] = &task;
    for (const ActEvent& event : nodes.job(node).events()) {
      const plan::Task& task = *task_of_index.at(event.task_index);
      ++counts[{task.name(), StepOfPiece(task, event.piece)}];
    }
  }
  return counts;
}

TEST(TraceWindowTest, TheCompilerMarksTheTasksOfEveryMicroBatch) {
  std::vector<plan::Plan> plans = NodePlans();
  ASSERT_EQ(plans.size(), 2u);
  std::map<plan::TaskKind, std::set<int64_t>> pieces_by_kind;
  for (const plan::Plan& node_plan : plans) {
    for (const plan::Task& task : node_plan.tasks()) {
      pieces_by_kind[task.kind()].insert(PiecesPerStep(task));
    }
  }
  // Micro-batches begin at UNPACK / REPEAT and end at ACCUMULATE (which acts on each); the
  // variables act once per step; both kinds of register cross the nodes.
  EXPECT_EQ(pieces_by_kind[plan::UNPACK], std::set<int64_t>{kMicroBatches});
  EXPECT_EQ(pieces_by_kind[plan::REPEAT], std::set<int64_t>{kMicroBatches});
  EXPECT_EQ(pieces_by_kind[plan::ACCUMULATE], std::set<int64_t>{kMicroBatches});
  EXPECT_EQ(pieces_by_kind[plan::VARIABLE], std::set<int64_t>{1});
  EXPECT_EQ(pieces_by_kind[plan::SINK], std::set<int64_t>{kMicroBatches});
  EXPECT_EQ(pieces_by_kind[plan::SEND], std::set<int64_t>{kMicroBatches});
  EXPECT_EQ(pieces_by_kind[plan::RECEIVE], std::set<int64_t>{kMicroBatches});
  // The gradients' all-reduces once per step, the loss's all-reduce per micro-batch.
  EXPECT_EQ(pieces_by_kind[plan::COLLECTIVE], (std::set<int64_t>{1, kMicroBatches}));
  // (Once a step: each stage's step barrier, compiler/act_order.h.)
  EXPECT_EQ(pieces_by_kind[plan::COMPUTE], (std::set<int64_t>{1, kMicroBatches}));
}

TEST(TraceWindowTest, EveryTaskActsInEachOfTheJobsStepsAndNoOther) {
  std::vector<plan::Plan> plans = NodePlans();
  ASSERT_EQ(plans.size(), 2u);
  ActCounts counts = RunAndCount(plans, RecordedSteps{});
  std::map<std::string, std::set<int64_t>> steps_of_task;
  for (const auto& [key, acts] : counts) steps_of_task[key.first].insert(key.second);
  const std::set<int64_t> every_step = {0, 1, 2, 3};
  int tasks = 0;
  for (const plan::Plan& node_plan : plans) {
    for (const plan::Task& task : node_plan.tasks()) {
      ++tasks;
      EXPECT_EQ(steps_of_task[task.name()], every_step) << task.name();
      // The same number of acts in every step (a variable's first also writes its initial value).
      const int first = task.kind() == plan::VARIABLE ? 1 : 0;
      for (int64_t step = first + 1; step < kSteps && !ActsPerPieceVary(task.name()); ++step) {
        const int acts = counts[{task.name(), step}];
        EXPECT_EQ(acts, (counts[{task.name(), first}])) << task.name() << " in step " << step;
      }
    }
  }
  EXPECT_EQ(steps_of_task.size(), static_cast<size_t>(tasks));
}

TEST(TraceWindowTest, AWindowRecordsTheActsOfItsStepsAndNoOthers) {
  std::vector<plan::Plan> plans = NodePlans();
  ASSERT_EQ(plans.size(), 2u);
  ActCounts every = RunAndCount(plans, RecordedSteps{});
  ExpectWindowOf(every, 1, 2, RunAndCount(plans, RecordedSteps{1, 2}));
  ExpectWindowOf(every, kSteps - 1, kSteps - 1,
                 RunAndCount(plans, RecordedSteps{kSteps - 1, kSteps - 1}));
  ExpectWindowOf(every, 0, 0, RunAndCount(plans, RecordedSteps{0, 0}));
}

}  // namespace
}  // namespace loom::compiler
