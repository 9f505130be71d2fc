// Training plumbing: a variable's gradient tensor "grad/<variable>", boxed to the variable's own
// SBP, feeds its VARIABLE task, whose optimizer updates the value between steps. The gradient is
// written by hand here (loss = 0.5 * sum(y^2), so dloss/dw = x^T y); autodiff writes it otherwise.
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "compiler/memory_plan.h"
#include "core/shared_kernels.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "runtime/plan_validation.h"
#include "tests/compiler/compiler_test_util.h"
#include "tests/compiler/run_util.h"
#include "tests/compiler/test_jobs.h"

namespace loom::compiler::testing {
namespace {

// `layout`: "dp" (x split by rows, w replicated: the gradient is partial and must be all-reduced)
// or "tp" (x replicated, w split by columns: the gradient is already split like w).
std::string LinearRegression(int devices, const std::string& layout, const std::string& optimizer,
                             bool frozen = false) {
  const bool data_parallel = layout == "dp";
  return absl::StrCat(
      "name: \"training\" placement { ", CpuDevices(devices), " } num_steps: 4\n", "optimizer { ",
      optimizer, " }\n", "inputs { name: \"x\" shape: [8, 4] sbp: \"", data_parallel ? "S(0)" : "B",
      "\" random_normal { std: 1 seed: 1 } }\n", "variables { name: \"w\" shape: [4, 6] sbp: \"",
      data_parallel ? "B" : "S(1)", "\"", frozen ? " frozen: true" : "",
      " initializer { normal { std: 0.5 seed: 2 } } }\n",
      "ops { name: \"y\" type: \"matmul\" inputs: [\"x\", \"w\"] outputs: \"y\" }\n",
      "ops { name: \"grad/w\" type: \"matmul\" inputs: [\"x\", \"y\"] outputs: \"grad/w\" ",
      "attributes { key: \"transpose_a\" value { bool_value: true } } }\n", "fetch: \"y\"\n");
}

constexpr char kSgd[] = "sgd { learning_rate: 0.05 momentum: 0.9 weight_decay: 0.01 }";
constexpr char kAdamW[] = "adamw { learning_rate: 0.01 weight_decay: 0.1 }";

TEST(TrainingTest, DataParallelGradientIsAllReducedByBoxing) {
  job::Job job = ParseJob(LinearRegression(4, "dp", kSgd));
  auto compiled = CompileOn(job, 4);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  std::vector<const plan::Task*> all_reduces = Collectives(compiled->plan, plan::ALL_REDUCE);
  ASSERT_EQ(all_reduces.size(), 4u);
  for (const plan::Task* task : all_reduces) EXPECT_EQ(task->inputs(0).substr(0, 7), "grad/w@");
  for (const plan::Task* task : TasksOfKind(compiled->plan, plan::VARIABLE)) {
    ASSERT_EQ(task->inputs_size(), 1);
    EXPECT_EQ(KernelOf(compiled->plan, *task).op_type(), "sgd");
    EXPECT_EQ(task->num_optimizer_states(), 1);
  }
}

TEST(TrainingTest, AnOpsRanksShareItsKernelAndEachNodeCarriesOnlyItsOwn) {
  job::Job job = ParseJob(LinearRegression(4, "dp", kSgd));
  job.mutable_placement()->clear_devices();
  for (const char* device : {"cpu:0", "cpu:1", "node1/cpu:0", "node1/cpu:1"}) {
    job.mutable_placement()->add_devices(device);
  }
  auto compiled = CompileOn(job, 4, /*nodes=*/2);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  const plan::Plan& whole = compiled->plan;
  // w is replicated: its four ranks share one initializer and one optimizer configuration.
  std::vector<const plan::Task*> variables = TasksOfKind(whole, plan::VARIABLE);
  ASSERT_EQ(variables.size(), 4u);
  for (const plan::Task* task : variables) {
    EXPECT_FALSE(task->has_kernel());
    EXPECT_FALSE(task->has_initializer());
    EXPECT_EQ(task->kernel_index(), variables[0]->kernel_index());
    EXPECT_EQ(task->initializer_index(), variables[0]->initializer_index());
  }
  // So do the ranks of each matmul.
  absl::flat_hash_map<std::string, const plan::Task*> by_name;
  for (const plan::Task& task : whole.tasks()) by_name[task.name()] = &task;
  for (const char* op : {"y", "grad/w"}) {
    for (int rank = 0; rank < 4; ++rank) {
      const plan::Task* task = by_name[absl::StrCat(op, "@", rank)];
      ASSERT_NE(task, nullptr) << op << "@" << rank;
      EXPECT_EQ(task->kernel_index(), by_name[absl::StrCat(op, "@0")]->kernel_index());
    }
  }
  ASSERT_EQ(compiled->node_plans.size(), 2u);
  for (const plan::Plan& node_plan : compiled->node_plans) {
    ASSERT_TRUE(ValidatePlan(node_plan).ok()) << ValidatePlan(node_plan);
    EXPECT_LT(node_plan.kernels_size(), whole.kernels_size());
    std::vector<bool> used(node_plan.kernels_size(), false);
    for (const plan::Task& task : node_plan.tasks()) {
      if (task.has_kernel_index()) used[task.kernel_index()] = true;
      if (task.has_initializer_index()) used[task.initializer_index()] = true;
      auto original = by_name.find(task.name());
      if (original == by_name.end()) continue;  // a SEND or RECEIVE the split added
      EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(
          KernelOf(node_plan, task), KernelOf(whole, *original->second)))
          << task.name();
      EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(
          InitializerOf(node_plan, task), InitializerOf(whole, *original->second)))
          << task.name();
    }
    EXPECT_THAT(used, ::testing::Each(true)) << "a node plan carries a kernel no task names";
  }
}

TEST(TrainingTest, TensorParallelGradientNeedsNoCommunication) {
  job::Job job = ParseJob(LinearRegression(2, "tp", kAdamW));
  auto compiled = CompileOn(job, 2);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  EXPECT_TRUE(TasksOfKind(compiled->plan, plan::COLLECTIVE).empty());
  for (const plan::Task* task : TasksOfKind(compiled->plan, plan::VARIABLE)) {
    EXPECT_EQ(KernelOf(compiled->plan, *task).op_type(), "adamw");
    EXPECT_EQ(task->num_optimizer_states(), 2);
  }
}

// The split builds the node plans on several threads: they are the same on any number. The
// variable layouts (for the coordinator's checkpoints) stay in the whole plan.
TEST(TrainingTest, NodePlansAreTheSameOnAnyNumberOfThreadsAndHoldNoVariableLayouts) {
  const job::Job job = ParseJob(absl::StrReplaceAll(
      TwoStageMlp(), {{"\"cpu:2\"", "\"node1/cpu:0\""}, {"\"cpu:3\"", "\"node1/cpu:1\""}}));
  CompileOptions one_thread;
  one_thread.threads = 1;
  CompileOptions four_threads;
  four_threads.threads = 4;
  absl::StatusOr<CompileResult> sequential =
      Compile(job, StandardOps(), DeviceSet::Cpus(4, 2), one_thread);
  ASSERT_TRUE(sequential.ok()) << sequential.status();
  absl::StatusOr<CompileResult> parallel =
      Compile(job, StandardOps(), DeviceSet::Cpus(4, 2), four_threads);
  ASSERT_TRUE(parallel.ok()) << parallel.status();
  EXPECT_EQ(sequential->plan.variables_size(), 2);
  ASSERT_EQ(sequential->node_plans.size(), 2u);
  ASSERT_EQ(parallel->node_plans.size(), 2u);
  for (int node = 0; node < 2; ++node) {
    const plan::Plan& node_plan = sequential->node_plans[node];
    EXPECT_TRUE(
        google::protobuf::util::MessageDifferencer::Equals(parallel->node_plans[node], node_plan))
        << "node " << node;
    EXPECT_EQ(node_plan.variables_size(), 0) << "node " << node;
    // The stage boundary crosses the nodes.
    EXPECT_FALSE(TasksOfKind(node_plan, node == 0 ? plan::SEND : plan::RECEIVE).empty());
    EXPECT_TRUE(ValidatePlan(node_plan).ok()) << ValidatePlan(node_plan);
  }
}

TEST(TrainingTest, TheMemoryEstimateCountsTheOptimizerStates) {
  // w [4, 6] float32 (96 bytes): AdamW keeps two states of its shape, SGD with momentum one.
  for (const auto& [optimizer, states] :
       {std::pair<std::string, int64_t>{kAdamW, 2}, std::pair<std::string, int64_t>{kSgd, 1}}) {
    job::Job job = ParseJob(LinearRegression(1, "tp", optimizer));
    auto compiled = CompileOn(job, 1);
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    const std::vector<DeviceMemoryEstimate> estimates = EstimateMemory(compiled->node_plans);
    ASSERT_EQ(estimates.size(), 1u);
    EXPECT_EQ(estimates[0].state_bytes, states * 96) << optimizer;

    // A budget that holds the registers but not the states is refused at compile time.
    job.set_device_memory_budget_bytes(estimates[0].total_bytes() - 1);
    compiled = CompileOn(job, 1);
    ASSERT_FALSE(compiled.ok()) << optimizer;
    EXPECT_EQ(compiled.status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_THAT(std::string(compiled.status().message()),
                ::testing::HasSubstr(absl::StrCat(states * 96,
                                                  " B for its optimizer states and "
                                                  "accumulators)")));
  }
}

class TrainingEquivalenceTest
    : public ::testing::TestWithParam<std::tuple<std::string, std::string, int>> {};

TEST_P(TrainingEquivalenceTest, StepsMatchOneDevice) {
  const auto& [layout, optimizer, devices] = GetParam();
  const std::string what = absl::StrCat(layout, " ", optimizer.substr(0, 5), " on ", devices);
  auto expected = CompileAndRun(ParseJob(LinearRegression(1, layout, optimizer)), 1);
  ASSERT_TRUE(expected.ok()) << what << ": " << expected.status();
  auto actual = CompileAndRun(ParseJob(LinearRegression(devices, layout, optimizer)), devices);
  ASSERT_TRUE(actual.ok()) << what << ": " << actual.status();
  ExpectSameFetches(*expected, *actual, 1e-5, what);
  // The variable really changed: a frozen copy of the job computes something else by step 2.
  auto frozen = CompileAndRun(ParseJob(LinearRegression(1, layout, optimizer, true)), 1);
  ASSERT_TRUE(frozen.ok()) << frozen.status();
  const std::vector<HostTensor>& trained = expected->at("y");
  const std::vector<HostTensor>& fixed = frozen->at("y");
  ASSERT_EQ(trained.size(), 4u);
  EXPECT_EQ(trained[0].Values<float>()[0], fixed[0].Values<float>()[0])
      << "step 0 precedes updates";
  EXPECT_NE(trained[2].Values<float>()[0], fixed[2].Values<float>()[0]) << "w was not updated";
}

INSTANTIATE_TEST_SUITE_P(Layouts, TrainingEquivalenceTest,
                         ::testing::Combine(::testing::Values("dp", "tp"),
                                            ::testing::Values(kSgd, kAdamW),
                                            ::testing::Values(2, 3)));

class AutodiffTrainingTest : public ::testing::TestWithParam<int> {};

TEST_P(AutodiffTrainingTest, DataParallelLossesMatchOneDeviceAndFall) {
  const int devices = GetParam();
  auto expected = CompileAndRun(ParseJob(MlpRegression(CpuDevices(1), kSgd)), 1);
  ASSERT_TRUE(expected.ok()) << expected.status();
  auto actual = CompileAndRun(ParseJob(MlpRegression(CpuDevices(devices), kSgd)), devices);
  ASSERT_TRUE(actual.ok()) << actual.status();
  ExpectSameFetches(*expected, *actual, 1e-5, absl::StrCat("MLP regression on ", devices));
  const std::vector<HostTensor>& losses = expected->at("loss");
  ASSERT_EQ(losses.size(), 8u);
  // The inputs are a fresh random batch every step, so compare the first and last steps' trend
  // loosely: training on the same distribution must bring the loss down.
  EXPECT_LT(losses.back().Values<float>()[0], losses.front().Values<float>()[0]);
}

INSTANTIATE_TEST_SUITE_P(Devices, AutodiffTrainingTest, ::testing::Values(2, 4));

// All-reduces per input-name prefix ("grad/w", "gradient_bucket.").
int AllReducesOf(const plan::Plan& plan, const std::string& prefix) {
  int count = 0;
  for (const plan::Task* task : Collectives(plan, plan::ALL_REDUCE)) {
    if (task->inputs(0).rfind(prefix, 0) == 0) ++count;
  }
  return count;
}

TEST(AutodiffTrainingTest, TheGradientsAreAllReducedInOneBucket) {
  job::Job job = ParseJob(MlpRegression(CpuDevices(4), kAdamW));
  auto compiled = CompileOn(job, 4);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  ASSERT_NE(compiled->transformed_job, nullptr);
  // w1's and w2's gradients packed into one flat buffer per rank: one all-reduce each.
  EXPECT_EQ(AllReducesOf(compiled->plan, "gradient_bucket."), 4);
  EXPECT_EQ(AllReducesOf(compiled->plan, "grad/w"), 0);
  int packs = 0;
  for (const plan::Task& task : compiled->plan.tasks()) {
    if (KernelOf(compiled->plan, task).op_type() != "pack_flat") continue;
    ++packs;
    // In the order the backward pass makes them: w2's gradient first (then the ordering inputs
    // of compiler/act_order.h).
    ASSERT_EQ(task.inputs_size() - task.ordering_inputs(), 2);
    EXPECT_EQ(task.inputs(0).rfind("grad/w2", 0), 0u) << task.inputs(0);
    EXPECT_EQ(task.inputs(1).rfind("grad/w1", 0), 0u) << task.inputs(1);
  }
  EXPECT_EQ(packs, 4);
}

TEST(AutodiffTrainingTest, WithoutBucketsEveryGradientHasItsOwnAllReduce) {
  for (int64_t bucket_bytes : {int64_t{-1}, int64_t{300}}) {
    // 300 bytes: w2's gradient (128 B) and w1's (256 B) do not fit together.
    job::Job job = ParseJob(MlpRegression(CpuDevices(4), kAdamW));
    job.set_gradient_bucket_bytes(bucket_bytes);
    auto compiled = CompileOn(job, 4);
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    EXPECT_EQ(AllReducesOf(compiled->plan, "grad/w"), 2 * 4) << bucket_bytes;
    EXPECT_EQ(AllReducesOf(compiled->plan, "gradient_bucket."), 0) << bucket_bytes;
  }
}

TEST(AutodiffTrainingTest, BucketedAndUnbucketedGradientsTrainAlike) {
  job::Job bucketed = ParseJob(MlpRegression(CpuDevices(4), kAdamW));
  job::Job unbucketed = bucketed;
  unbucketed.set_gradient_bucket_bytes(-1);
  auto with_buckets = CompileAndRun(bucketed, 4);
  ASSERT_TRUE(with_buckets.ok()) << with_buckets.status();
  auto without_buckets = CompileAndRun(unbucketed, 4);
  ASSERT_TRUE(without_buckets.ok()) << without_buckets.status();
  ExpectSameFetches(*without_buckets, *with_buckets, 1e-6, "buckets");
}

}  // namespace
}  // namespace loom::compiler::testing
