// Parameter groups and the learning-rate schedule in the compiler (compiler/optimizer_settings.h):
// patterns, the errors a job gets, and what every VARIABLE's optimizer kernel is told.

#include "compiler/optimizer_settings.h"

#include <cmath>
#include <string>
#include <vector>

#include "compiler/compiler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/compiler/compiler_test_util.h"
#include "tools/loom-gpt/gpt_model.h"

namespace loom::compiler::testing {
namespace {

using ::testing::HasSubstr;

TEST(VariablePatternTest, StarsMatchAnyRun) {
  EXPECT_TRUE(MatchesVariablePattern("wte", "wte"));
  EXPECT_FALSE(MatchesVariablePattern("wte", "wte2"));
  EXPECT_FALSE(MatchesVariablePattern("wte", "wt"));
  EXPECT_TRUE(MatchesVariablePattern("*.bias", "h.0.attn.q.bias"));
  EXPECT_FALSE(MatchesVariablePattern("*.bias", "h.0.attn.q.bias2"));
  EXPECT_TRUE(MatchesVariablePattern("*ln_*", "h.3.ln_2.weight"));
  EXPECT_TRUE(MatchesVariablePattern("*ln_*", "ln_f.bias"));
  EXPECT_FALSE(MatchesVariablePattern("*ln_*", "lm_head.weight"));
  EXPECT_TRUE(MatchesVariablePattern("h.*.mlp.*", "h.12.mlp.c_fc.weight"));
  EXPECT_TRUE(MatchesVariablePattern("*", ""));
  EXPECT_TRUE(MatchesVariablePattern("a*a*a", "aaaa"));
  EXPECT_FALSE(MatchesVariablePattern("a*a*a", "aa"));
  EXPECT_TRUE(MatchesVariablePattern("**x", "abx"));
}

job::Optimizer AdamW(double lr = 1e-3, double weight_decay = 0.1) {
  job::Optimizer optimizer;
  optimizer.mutable_adamw()->set_learning_rate(lr);
  optimizer.mutable_adamw()->set_weight_decay(weight_decay);
  return optimizer;
}

TEST(ParameterGroupsTest, EachVariableGetsItsGroup) {
  job::Optimizer optimizer = AdamW();
  job::ParameterGroup* first = optimizer.add_parameter_groups();
  first->add_variables("*.bias");
  job::ParameterGroup* second = optimizer.add_parameter_groups();
  second->add_variables("wte");
  absl::StatusOr<std::vector<int>> groups =
      AssignParameterGroups(optimizer, {"wte", "h.0.bias", "h.0.weight"});
  ASSERT_TRUE(groups.ok()) << groups.status();
  EXPECT_EQ(*groups, (std::vector<int>{1, 0, -1}));
}

TEST(ParameterGroupsTest, MistakesNameTheCulprit) {
  job::Optimizer optimizer = AdamW();
  job::ParameterGroup* first = optimizer.add_parameter_groups();
  first->set_name("no_decay");
  first->add_variables("*.bias");
  job::ParameterGroup* second = optimizer.add_parameter_groups();
  second->add_variables("h.*");
  absl::Status status = AssignParameterGroups(optimizer, {"h.0.bias"}).status();
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("variable 'h.0.bias' is in parameter group 'no_decay' and in parameter "
                        "group 1 (pattern 'h.*')"));
  second->set_variables(0, "typo");
  status = AssignParameterGroups(optimizer, {"h.0.bias"}).status();
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("parameter group 1: pattern 'typo' names no variable of the job"));
  second->set_variables(0, "h.*");
  optimizer.mutable_parameter_groups()->RemoveLast();
  first->set_learning_rate_scale(-1);
  status = AssignParameterGroups(optimizer, {"h.0.bias"}).status();
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("parameter group 'no_decay': learning_rate_scale -1 must be finite"));
  first->clear_learning_rate_scale();
  first->set_weight_decay(std::nan(""));
  status = AssignParameterGroups(optimizer, {"h.0.bias"}).status();
  EXPECT_THAT(std::string(status.message()), HasSubstr("weight_decay nan must be finite"));
}

TEST(LearningRateScheduleOfJobTest, TheFloorIsAFractionOfThePeak) {
  job::Optimizer optimizer = AdamW(2e-3);
  job::LearningRateSchedule* settings = optimizer.mutable_learning_rate_schedule();
  settings->set_warmup_steps(3);
  settings->set_decay(job::LearningRateSchedule::DECAY_COSINE);
  settings->set_decay_steps(10);
  settings->set_min_learning_rate(5e-4);
  absl::StatusOr<LearningRateSchedule> schedule = ScheduleOf(optimizer);
  ASSERT_TRUE(schedule.ok()) << schedule.status();
  EXPECT_EQ(schedule->min_ratio, 5e-4 / 2e-3);
  EXPECT_EQ(schedule->decay, LearningRateDecay::kCosine);
  settings->set_min_learning_rate(3e-3);
  EXPECT_THAT(std::string(ScheduleOf(optimizer).status().message()),
              HasSubstr("min_learning_rate 0.003 must be between 0 and the learning rate 0.002"));
  settings->set_min_learning_rate(0);
  settings->set_decay_steps(0);
  EXPECT_THAT(std::string(ScheduleOf(optimizer).status().message()),
              HasSubstr("cosine decay ends at step 0, not after the warmup's 3 steps"));
}

double FloatAttributeOf(const plan::KernelConf& kernel, const std::string& name) {
  return kernel.attributes().at(name).float_value();
}

// The GPT with the anchors' groups and a schedule: every VARIABLE's kernel carries its group's
// rate and weight decay and the job's schedule.
TEST(OptimizerKernelTest, TheGptsGroupsReachEveryVariable) {
  gpt::GptConfig config;
  config.vocab = 256;
  config.context = 16;
  config.width = 32;
  config.layers = 2;
  config.heads = 2;
  config.mlp_width = 64;
  config.batch = 4;
  config.steps = 6;
  config.learning_rate = 2e-3;
  config.weight_decay = 0.1;
  config.weight_decay_on = "matrices";
  config.no_decay_lr_scale = 0.5;
  config.lr_warmup_steps = 2;
  config.lr_decay = "cosine";
  config.min_learning_rate = 2e-4;
  absl::StatusOr<job::Job> job = gpt::BuildGptJob(config);
  ASSERT_TRUE(job.ok()) << job.status();
  absl::StatusOr<CompileResult> compiled = CompileOn(*job, 1);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  int no_decay = 0;
  int decayed = 0;
  for (const plan::Task& task : compiled->plan.tasks()) {
    if (task.kind() != plan::VARIABLE) continue;
    const plan::KernelConf& kernel = compiled->plan.kernels(task.kernel_index());
    const std::string variable = task.name().substr(0, task.name().find('@'));
    const bool in_group = variable == "wte" || variable == "wpe" ||
                          MatchesVariablePattern("*.bias", variable) ||
                          MatchesVariablePattern("*ln_*", variable);
    EXPECT_EQ(FloatAttributeOf(kernel, "weight_decay"), in_group ? 0.0 : 0.1) << variable;
    EXPECT_EQ(FloatAttributeOf(kernel, "lr"), in_group ? 2e-3 * 0.5 : 2e-3) << variable;
    EXPECT_EQ(kernel.attributes().at("lr_warmup_steps").int_value(), 2);
    EXPECT_EQ(kernel.attributes().at("lr_decay").string_value(), "cosine");
    EXPECT_EQ(kernel.attributes().at("lr_decay_steps").int_value(), 6);
    EXPECT_EQ(FloatAttributeOf(kernel, "lr_min_ratio"), 2e-4 / 2e-3);
    (in_group ? no_decay : decayed) += 1;
  }
  EXPECT_GT(no_decay, 0);
  EXPECT_GT(decayed, 0);
}

}  // namespace
}  // namespace loom::compiler::testing
