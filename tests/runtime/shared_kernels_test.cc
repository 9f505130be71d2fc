// Kernel configurations held once in Plan.kernels and named by position from the tasks: the
// writer's deduplication, the readers, the checks, and a job that runs from the shared form.
#include "core/shared_kernels.h"

#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "runtime/plan_validation.h"
#include "tests/runtime/runtime_test_util.h"

namespace loom::testing {
namespace {

using ::testing::HasSubstr;

plan::KernelConf Conf(const std::string& op_type, std::vector<std::pair<std::string, int>> ints) {
  plan::KernelConf conf;
  conf.set_op_type(op_type);
  for (const auto& [name, value] : ints) (*conf.mutable_attributes())[name].set_int_value(value);
  return conf;
}

// w (variable, fill 1.0, optimizer test_descend) -> g = w + x + 1 -> w; x a source; w observed.
PlanBuilder TrainingLoop() {
  PlanBuilder builder("training_loop");
  builder.AddCpuDevices(2);
  builder.AddRegister("w", {3}, plan::FLOAT32, 1).AddRegister("x", {3}).AddRegister("g", {3});
  plan::Task& variable = builder.AddTask("w", plan::VARIABLE, 0, {"g"}, {"w"}, "test_descend");
  variable.set_num_pieces(4);
  variable.set_num_optimizer_states(1);
  variable.mutable_initializer()->set_op_type("fill");
  (*variable.mutable_initializer()->mutable_attributes())["value"].set_float_value(1.0);
  builder.AddTask("x", plan::SOURCE, 1, {}, {"x"}, "test_piece").set_num_pieces(4);
  builder.AddTask("gradient", plan::COMPUTE, 1, {"w", "x"}, {"g"}, "test_sum_plus_one");
  builder.AddTask("observe", plan::SINK, 1, {"w"}, {});
  return builder;
}

// The same plan with every kernel moved into Plan.kernels.
plan::Plan Shared(plan::Plan plan) {
  SharedKernels kernels(&plan);
  for (plan::Task& task : *plan.mutable_tasks()) {
    if (task.has_kernel()) {
      task.set_kernel_index(kernels.Add(std::move(*task.mutable_kernel())));
      task.clear_kernel();
    }
    if (task.has_initializer()) {
      task.set_initializer_index(kernels.Add(std::move(*task.mutable_initializer())));
      task.clear_initializer();
    }
  }
  return plan;
}

TEST(SharedKernelsTest, EqualConfigurationsAreHeldOnce) {
  plan::Plan plan;
  SharedKernels kernels(&plan);
  // The same attributes inserted in another order are the same configuration.
  plan::KernelConf reordered;
  reordered.set_op_type("slice");
  (*reordered.mutable_attributes())["end"].set_int_value(4);
  (*reordered.mutable_attributes())["begin"].set_int_value(2);
  EXPECT_EQ(kernels.Add(Conf("slice", {{"begin", 2}, {"end", 4}})), 0);
  EXPECT_EQ(kernels.Add(reordered), 0);
  EXPECT_EQ(kernels.Add(Conf("slice", {{"begin", 0}, {"end", 4}})), 1);
  EXPECT_EQ(kernels.Add(Conf("pad", {{"begin", 2}, {"end", 4}})), 2);
  EXPECT_EQ(kernels.Add(Conf("slice", {{"begin", 2}, {"end", 4}})), 0);
  ASSERT_EQ(plan.kernels_size(), 3);
  EXPECT_EQ(plan.kernels(1).attributes().at("begin").int_value(), 0);
  EXPECT_EQ(plan.kernels(2).op_type(), "pad");
}

TEST(SharedKernelsTest, ReadersSeeEitherForm) {
  plan::Plan plan;
  *plan.add_kernels() = Conf("fill", {{"value", 3}});
  *plan.add_kernels() = Conf("sgd", {});
  plan::Task& shared = *plan.add_tasks();
  shared.set_kernel_index(1);
  shared.set_initializer_index(0);
  shared.add_state_initializer_indices(0);
  shared.add_state_initializer_indices(1);
  plan::Task& inline_task = *plan.add_tasks();
  *inline_task.mutable_kernel() = Conf("adamw", {});
  *inline_task.mutable_initializer() = Conf("random", {});
  *inline_task.add_state_initializers() = Conf("checkpoint_slice", {});
  ASSERT_TRUE(CheckSharedKernels(plan).ok());

  EXPECT_EQ(KernelOf(plan, shared).op_type(), "sgd");
  EXPECT_EQ(InitializerOf(plan, shared).op_type(), "fill");
  ASSERT_EQ(StateInitializerCount(shared), 2);
  EXPECT_EQ(StateInitializerOf(plan, shared, 1).op_type(), "sgd");
  EXPECT_EQ(KernelOf(plan, inline_task).op_type(), "adamw");
  EXPECT_EQ(InitializerOf(plan, inline_task).op_type(), "random");
  ASSERT_EQ(StateInitializerCount(inline_task), 1);
  EXPECT_EQ(StateInitializerOf(plan, inline_task, 0).op_type(), "checkpoint_slice");

  plan::Plan inlined = plan;
  InlineSharedKernels(&inlined);
  EXPECT_EQ(inlined.kernels_size(), 0);
  const plan::Task& expanded = inlined.tasks(0);
  EXPECT_FALSE(expanded.has_kernel_index());
  EXPECT_FALSE(expanded.has_initializer_index());
  EXPECT_EQ(expanded.state_initializer_indices_size(), 0);
  EXPECT_EQ(expanded.kernel().op_type(), "sgd");
  EXPECT_EQ(expanded.initializer().attributes().at("value").int_value(), 3);
  ASSERT_EQ(expanded.state_initializers_size(), 2);
  EXPECT_EQ(expanded.state_initializers(0).op_type(), "fill");
  EXPECT_EQ(expanded.state_initializers(1).op_type(), "sgd");
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(inlined.tasks(1), plan.tasks(1)));
}

TEST(SharedKernelsTest, BadPositionsAndBothFormsAreRejectedNamingTheTask) {
  plan::Plan plan = Shared(TrainingLoop().plan());
  ASSERT_TRUE(ValidatePlan(plan).ok()) << ValidatePlan(plan);
  const int kernels = plan.kernels_size();

  plan::Plan outside = plan;
  outside.mutable_tasks(2)->set_kernel_index(kernels);
  absl::Status status = ValidatePlan(outside);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("task 'gradient': kernel_index 4 is outside the plan's "
                                          "4 kernels"));

  plan::Plan negative = plan;
  negative.mutable_tasks(0)->set_initializer_index(-1);
  EXPECT_THAT(ValidatePlan(negative).message(), HasSubstr("task 'w': initializer_index -1"));

  plan::Plan state = plan;
  state.mutable_tasks(0)->add_state_initializer_indices(7);
  EXPECT_THAT(ValidatePlan(state).message(),
              HasSubstr("task 'w': a state_initializer_indices entry 7 is outside"));

  plan::Plan both = plan;
  both.mutable_tasks(1)->mutable_kernel()->set_op_type("test_piece");
  status = ValidatePlan(both);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("task 'x' writes its kernel both in the task and as a "
                                          "position in the plan's kernels"));
}

TEST(SharedKernelsTest, AJobRunsTheSameFromSharedKernels) {
  const plan::Plan written = TrainingLoop().plan();
  const plan::Plan shared = Shared(written);
  ASSERT_EQ(shared.kernels_size(), 4);  // test_descend, fill, test_piece, test_sum_plus_one
  auto inline_job = MakeJob(written);
  auto shared_job = MakeJob(shared);
  ASSERT_TRUE(inline_job.ok()) << inline_job.status();
  ASSERT_TRUE(shared_job.ok()) << shared_job.status();
  ASSERT_TRUE((*inline_job)->Run().ok());
  ASSERT_TRUE((*shared_job)->Run().ok());
  const std::vector<float> observed = SinkValues(**shared_job, "observe");
  EXPECT_EQ(observed.size(), 4u);  // w[0] at each step
  EXPECT_EQ(observed, SinkValues(**inline_job, "observe"));
}

TEST(SharedKernelsTest, ACopierCopiesOnlyTheKernelsItsTasksName) {
  plan::Plan whole;
  for (int i = 0; i < 4; ++i) *whole.add_kernels() = Conf("k", {{"i", i}});
  plan::Task first;
  first.set_kernel_index(3);
  first.set_initializer_index(1);
  plan::Task second;
  second.set_kernel_index(3);
  second.add_state_initializer_indices(1);
  second.add_state_initializer_indices(3);

  plan::Plan node;
  SharedKernelCopier copier(whole, &node);
  copier.Renumber(&first);
  copier.Renumber(&second);
  ASSERT_EQ(node.kernels_size(), 2);
  EXPECT_EQ(node.kernels(0).attributes().at("i").int_value(), 3);
  EXPECT_EQ(node.kernels(1).attributes().at("i").int_value(), 1);
  EXPECT_EQ(first.kernel_index(), 0);
  EXPECT_EQ(first.initializer_index(), 1);
  EXPECT_EQ(second.kernel_index(), 0);
  EXPECT_THAT(second.state_initializer_indices(), ::testing::ElementsAre(1, 0));
}

}  // namespace
}  // namespace loom::testing
