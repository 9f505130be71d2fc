// Variables: a value that persists across steps, updated in place by an optimizer when its
// (loop-carried) gradient arrives.
#include <mutex>
#include <string>
#include <vector>

#include "actors/variable_actor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/runtime/runtime_test_util.h"

namespace loom::testing {
namespace {

using ::testing::HasSubstr;

// w (variable, init 1.0) -> g = w + x + 1 (x = piece index) -> w's optimizer: w -= 0.5 g + ...
PlanBuilder TrainingLoop(int steps) {
  PlanBuilder builder("training_loop");
  builder.AddCpuDevices(2);
  builder.AddRegister("w", {3}, plan::FLOAT32, 1).AddRegister("x", {3}).AddRegister("g", {3});
  plan::Task& variable = builder.AddTask("w", plan::VARIABLE, 0, {"g"}, {"w"}, "test_descend");
  variable.set_num_pieces(steps);
  variable.set_num_optimizer_states(1);
  variable.mutable_initializer()->set_op_type("fill");
  (*variable.mutable_initializer()->mutable_attributes())["value"].set_float_value(1.0);
  builder.AddTask("x", plan::SOURCE, 1, {}, {"x"}, "test_piece").set_num_pieces(steps);
  builder.AddTask("gradient", plan::COMPUTE, 1, {"w", "x"}, {"g"}, "test_sum_plus_one");
  builder.AddTask("observe", plan::SINK, 1, {"w"}, {});
  return builder;
}

TEST(VariableTest, OptimizerUpdatesTheValueBetweenSteps) {
  const int steps = 6;
  auto job = MakeJob(TrainingLoop(steps).plan());
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Run().ok());
  // Simulate: every step reads w, then w -= 0.5 (w + x + 1) + 0.001 (step + 1).
  std::vector<float> expected;
  float w = 1.0f;
  float state = 0.0f;
  for (int step = 0; step < steps; ++step) {
    expected.push_back(w);
    float gradient = w + static_cast<float>(step) + 1.0f;
    state += gradient;
    w -= 0.5f * gradient + 0.001f * static_cast<float>(step + 1);
  }
  EXPECT_THAT(SinkValues(**job, "observe"), ::testing::Pointwise(::testing::FloatEq(), expected));
  // After the job the actor holds the value after the last step's update, and its state.
  const auto* variable = dynamic_cast<const VariableActor*>((*job)->FindActor("w"));
  ASSERT_NE(variable, nullptr);
  EXPECT_FLOAT_EQ(variable->value().Data<float>()[0], w);
  ASSERT_EQ(variable->states().size(), 1u);
  EXPECT_FLOAT_EQ(variable->states()[0].Data<float>()[2], state);
  // Acts: initialisation, then one update per step.
  EXPECT_EQ(variable->summary().acts, steps + 1);
}

// Snapshots taken while the job runs, as a periodic checkpoint asks for them.
struct Snapshot {
  std::string task;
  int64_t step;
  std::vector<float> value;
  std::vector<std::vector<float>> states;
};

std::vector<float> Floats(const HostTensor& tensor) {
  absl::Span<const float> values = tensor.Values<float>();
  return std::vector<float>(values.begin(), values.end());
}

TEST(VariableTest, SnapshotsHoldTheStateAfterEveryKthStepButTheLast) {
  const int steps = 6;
  PlanBuilder builder = TrainingLoop(steps);
  // A frozen variable is saved too (a checkpoint holds every variable).
  builder.AddRegister("frozen", {2}, plan::FLOAT32, 1);
  plan::Task& frozen = builder.AddTask("frozen", plan::VARIABLE, 0, {}, {"frozen"});
  frozen.set_num_pieces(steps);
  frozen.mutable_initializer()->set_op_type("fill");
  (*frozen.mutable_initializer()->mutable_attributes())["value"].set_float_value(2.5);
  builder.AddTask("observe_frozen", plan::SINK, 1, {"frozen"}, {});

  std::mutex mutex;
  std::vector<Snapshot> snapshots;
  JobOptions options;
  options.snapshot_every_steps = 2;
  options.variable_snapshot_callback = [&](VariableSnapshot snapshot) {
    std::lock_guard<std::mutex> lock(mutex);
    Snapshot kept{snapshot.task, snapshot.step, Floats(snapshot.variable.value), {}};
    for (const HostTensor& state : snapshot.variable.states) kept.states.push_back(Floats(state));
    snapshots.push_back(std::move(kept));
    return absl::OkStatus();
  };
  auto job = MakeJob(builder.plan(), std::move(options));
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Run().ok());

  // The value and state after every step, simulated as in OptimizerUpdatesTheValueBetweenSteps.
  std::vector<float> w_after = {1.0f};
  std::vector<float> state_after = {0.0f};
  for (int step = 0; step < steps; ++step) {
    float gradient = w_after.back() + static_cast<float>(step) + 1.0f;
    state_after.push_back(state_after.back() + gradient);
    w_after.push_back(w_after.back() - (0.5f * gradient + 0.001f * static_cast<float>(step + 1)));
  }
  std::vector<int64_t> w_steps;
  std::vector<int64_t> frozen_steps;
  for (const Snapshot& snapshot : snapshots) {
    if (snapshot.task == "w") {
      w_steps.push_back(snapshot.step);
      ASSERT_EQ(snapshot.value.size(), 3u);
      EXPECT_FLOAT_EQ(snapshot.value[0], w_after[snapshot.step]) << "step " << snapshot.step;
      ASSERT_EQ(snapshot.states.size(), 1u);
      EXPECT_FLOAT_EQ(snapshot.states[0][1], state_after[snapshot.step])
          << "step " << snapshot.step;
    } else {
      ASSERT_EQ(snapshot.task, "frozen");
      frozen_steps.push_back(snapshot.step);
      EXPECT_THAT(snapshot.value, ::testing::ElementsAre(2.5f, 2.5f));
      EXPECT_TRUE(snapshot.states.empty());
    }
  }
  // Not after the last step: the job's end state is read from the actors.
  EXPECT_THAT(w_steps, ::testing::ElementsAre(2, 4));
  EXPECT_THAT(frozen_steps, ::testing::ElementsAre(2, 4));
}

TEST(VariableTest, ASnapshotThatCannotBeKeptFailsTheJobNamingTheVariable) {
  JobOptions options;
  options.snapshot_every_steps = 1;
  options.variable_snapshot_callback = [](VariableSnapshot snapshot) {
    return absl::ResourceExhaustedError("no room for it");
  };
  auto job = MakeJob(TrainingLoop(4).plan(), std::move(options));
  ASSERT_TRUE(job.ok()) << job.status();
  absl::Status status = (*job)->Run();
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(status.message(), HasSubstr("'w'"));
  EXPECT_THAT(status.message(), HasSubstr("the snapshot after step 1: no room for it"));
}

TEST(VariableTest, ANegativeSnapshotIntervalIsRefused) {
  JobOptions options;
  options.snapshot_every_steps = -1;
  options.variable_snapshot_callback = [](VariableSnapshot) { return absl::OkStatus(); };
  auto job = MakeJob(TrainingLoop(2).plan(), std::move(options));
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(job.status().message(), HasSubstr("snapshot_every_steps"));
}

TEST(VariableTest, WithoutAGradientItPublishesTheSameValueEveryStep) {
  PlanBuilder builder("constant");
  builder.AddCpuDevices(1);
  builder.AddRegister("w", {2}, plan::FLOAT32, 1);
  plan::Task& variable = builder.AddTask("w", plan::VARIABLE, 0, {}, {"w"});
  variable.set_num_pieces(5);
  variable.mutable_initializer()->set_op_type("fill");
  (*variable.mutable_initializer()->mutable_attributes())["value"].set_float_value(2.5);
  builder.AddTask("observe", plan::SINK, 0, {"w"}, {});
  auto job = MakeJob(builder.plan());
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Run().ok());
  EXPECT_THAT(SinkValues(**job, "observe"), ::testing::ElementsAre(2.5f, 2.5f, 2.5f, 2.5f, 2.5f));
}

TEST(VariableTest, ZeroStepsEndsAtOnce) {
  auto job = MakeJob(TrainingLoop(0).plan());
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Run().ok());
  EXPECT_TRUE(SinkValues(**job, "observe").empty());
}

TEST(VariableTest, ValueRegisterMustHaveOneSlot) {
  PlanBuilder builder = TrainingLoop(3);
  builder.mutable_plan().mutable_registers(0)->set_num_slots(2);
  auto job = MakeJob(builder.plan());
  ASSERT_FALSE(job.ok());
  EXPECT_THAT(job.status().message(),
              HasSubstr("task 'w': its value register 'w' must have exactly 1 slot"));
}

TEST(VariableTest, GradientInputNeedsAnOptimizer) {
  PlanBuilder builder = TrainingLoop(3);
  builder.mutable_plan().mutable_tasks(0)->mutable_kernel()->clear_op_type();
  auto job = MakeJob(builder.plan());
  ASSERT_FALSE(job.ok());
  EXPECT_THAT(job.status().message(), HasSubstr("needs kernel.op_type (its optimizer)"));
}

TEST(VariableTest, OnlyTheGradientEdgeIsLoopCarried) {
  // The same loop through a compute task instead of the variable is a cycle that can never act.
  PlanBuilder builder = TrainingLoop(3);
  plan::Task* variable = builder.mutable_plan().mutable_tasks(0);
  variable->set_kind(plan::COMPUTE);
  variable->mutable_kernel()->set_op_type("test_sum_plus_one");
  auto job = MakeJob(builder.plan());
  ASSERT_FALSE(job.ok());
  EXPECT_THAT(job.status().message(), HasSubstr("cycle that can never act"));
}

}  // namespace
}  // namespace loom::testing
