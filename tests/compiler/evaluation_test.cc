// Evaluation while training (Job.evaluation): the branch the compiler adds, the tasks it marks,
// what the evaluation steps compute, and the errors naming the culprit.
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "compiler/evaluation_branch.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/compiler/compiler_test_util.h"
#include "tests/compiler/gpt_layouts.h"
#include "tests/compiler/run_util.h"

namespace loom::compiler::testing {
namespace {

using ::testing::HasSubstr;

// A linear model trained by SGD on 2 devices (data parallel) whose loss is evaluated every 2 steps
// on inputs of another seed.
std::string TrainingJob(const std::string& evaluation) {
  return absl::StrCat(R"pb(name: "evaluated"
                           placement { devices: [ "cpu:0", "cpu:1" ] }
                           inputs {
                             name: "x"
                             shape: [ 4, 6 ]
                             random_normal { std: 1 seed: 1 }
                           }
                           variables {
                             name: "w"
                             shape: [ 6, 3 ]
                             initializer { normal { std: 1 seed: 2 } }
                           }
                           ops {
                             name: "h"
                             type: "matmul"
                             inputs: [ "x", "w" ]
                             outputs: "h"
                           }
                           ops {
                             name: "sq"
                             type: "multiply"
                             inputs: [ "h", "h" ]
                             outputs: "sq"
                           }
                           ops { name: "loss" type: "reduce_mean" inputs: "sq" outputs: "loss" }
                           loss: "loss"
                           fetch: "loss"
                           optimizer { sgd { learning_rate: 0.01 } }
                           num_steps: 5
                      )pb",
                      evaluation);
}

constexpr char kEvaluation[] = R"pb(evaluation {
                                      every_steps: 2
                                      inputs {
                                        name: "x"
                                        random_normal { std: 1 seed: 7 }
                                      }
                                    })pb";

TEST(EvaluationTest, TheBranchCopiesTheForwardOpsOntoTheHeldOutInputs) {
  absl::StatusOr<std::optional<job::Job>> branch =
      AddEvaluationBranch(ParseJob(TrainingJob(kEvaluation)));
  ASSERT_TRUE(branch.ok()) << branch.status();
  ASSERT_TRUE(branch->has_value());
  const job::Job& job = **branch;
  ASSERT_EQ(job.ops_size(), 6);
  EXPECT_EQ(job.ops(3).name(), "evaluation/h");
  EXPECT_THAT(job.ops(3).inputs(), ::testing::ElementsAre("evaluation/x", "w"));
  EXPECT_TRUE(job.ops(3).evaluation());
  EXPECT_EQ(job.inputs(1).name(), "evaluation/x");
  EXPECT_EQ(job.inputs(1).random_normal().seed(), 7);
  EXPECT_TRUE(job.inputs(1).evaluation());
  EXPECT_THAT(job.fetch(), ::testing::ElementsAre("loss", "evaluation/loss"));
  // Without an evaluation there is nothing to add.
  absl::StatusOr<std::optional<job::Job>> none = AddEvaluationBranch(ParseJob(TrainingJob("")));
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->has_value());
}

TEST(EvaluationTest, OnlyTheBranchsTasksAreMarkedAndNoneIsDifferentiated) {
  absl::StatusOr<CompileResult> compiled = CompileOn(ParseJob(TrainingJob(kEvaluation)), 2);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  const plan::Plan& plan = compiled->plan;
  EXPECT_EQ(plan.evaluation_every_steps(), 2);
  int marked = 0;
  for (const plan::Task& task : plan.tasks()) {
    EXPECT_FALSE(absl::StrContains(task.name(), "grad/evaluation/")) << task.name();
    if (absl::StrContains(task.name(), "evaluation/")) {
      EXPECT_EQ(task.evaluation_every_steps(), 2) << task.name();
    }
    if (task.kind() == plan::VARIABLE || absl::StrContains(task.name(), "grad/")) {
      EXPECT_EQ(task.evaluation_every_steps(), 0) << task.name();
    }
    marked += task.evaluation_every_steps() > 0 ? 1 : 0;
  }
  // Per rank: the source, three ops and the fetch's sink.
  EXPECT_EQ(marked, 10);
  int evaluation_fetches = 0;
  for (const plan::Fetch& fetch : plan.fetches()) {
    EXPECT_EQ(fetch.evaluation(), fetch.tensor() == "evaluation/loss") << fetch.tensor();
    evaluation_fetches += fetch.evaluation() ? 1 : 0;
  }
  EXPECT_EQ(evaluation_fetches, 1);
}

TEST(EvaluationTest, EvaluationStepsComputeTheLossOnTheHeldOutDataAndChangeNothingElse) {
  auto evaluated = CompileAndRun(ParseJob(TrainingJob(kEvaluation)), 2);
  ASSERT_TRUE(evaluated.ok()) << evaluated.status();
  auto plain = CompileAndRun(ParseJob(TrainingJob("")), 2);
  ASSERT_TRUE(plain.ok()) << plain.status();
  // Training is the same with the evaluation as without it.
  ExpectSameFetches({{"loss", plain->at("loss")}}, {{"loss", evaluated->at("loss")}}, 0,
                    "training losses");
  // Steps 0, 2 and 4 evaluate.
  const std::vector<HostTensor>& losses = evaluated->at("evaluation/loss");
  ASSERT_EQ(losses.size(), 3u);
  // Step 0 evaluates the initial weights: the loss of a job without an optimizer on seed 7.
  std::string forward = TrainingJob("");
  forward = absl::StrReplaceAll(forward, {{"seed: 1 }", "seed: 7 }"},
                                          {"optimizer { sgd { learning_rate: 0.01 } }", ""},
                                          {"loss: \"loss\"", ""}});
  auto reference = CompileAndRun(ParseJob(forward), 2);
  ASSERT_TRUE(reference.ok()) << reference.status();
  EXPECT_NEAR(losses[0].Values<float>()[0], reference->at("loss")[0].Values<float>()[0], 1e-5);
  // One device evaluates what two do.
  auto one_device = CompileAndRun(
      ParseJob(absl::StrReplaceAll(TrainingJob(kEvaluation), {{R"(devices: [ "cpu:0", "cpu:1" ])",
                                                               R"(devices: [ "cpu:0" ])"}})),
      1);
  ASSERT_TRUE(one_device.ok()) << one_device.status();
  ExpectSameFetches(*one_device, *evaluated, 1e-5, "one device against two");
}

TEST(EvaluationTest, GptLayoutsCompileWithAnEvaluationAndTheirProofHolds) {
  for (const GptLayout& layout : SharingLayouts()) {
    absl::StatusOr<job::Job> job = GptJobOn(layout, job::REGISTER_MEMORY_SHARED);
    ASSERT_TRUE(job.ok()) << layout.name << ": " << job.status();
    job::Evaluation* evaluation = job->mutable_evaluation();
    evaluation->set_every_steps(2);
    if (layout.experts > 0) evaluation->set_loss("cross_entropy");
    for (const job::Input& input : job->inputs()) {
      job::Input* held_out = evaluation->add_inputs();
      held_out->set_name(input.name());
      *held_out->mutable_token_dataset() = input.token_dataset();
      held_out->mutable_token_dataset()->mutable_sources(0)->set_paths(
          0, "/usr/share/common-licenses/LGPL-2.1");
    }
    absl::StatusOr<CompileResult> compiled = CompileOn(*job, layout.devices(), layout.nodes);
    ASSERT_TRUE(compiled.ok()) << layout.name << ": " << compiled.status();
    int marked = 0;
    for (const plan::Task& task : compiled->plan.tasks()) {
      marked += task.evaluation_every_steps() > 0 ? 1 : 0;
      EXPECT_TRUE(task.kind() != plan::VARIABLE || task.evaluation_every_steps() == 0);
    }
    EXPECT_GT(marked, 0) << layout.name;
  }
}

// Under ZeRO with mixed precision and micro-batches the training branch's weight copies are cast
// once a step and gathered in buckets; the evaluation branch's, which work only in evaluation
// steps, stay out of those buckets: the run finishes and trains as it does without the
// evaluation, bit for bit.
TEST(EvaluationTest, ZeroWithMixedPrecisionEvaluatesAndTrainsAsWithout) {
  const GptLayout layout{.name = "dp2_m2_bf16_zero2",
                         .data_parallel = 2,
                         .micro_batches = 2,
                         .matmul_data_type = plan::BFLOAT16,
                         .zero_stage = 2};
  std::vector<MeasuredRun> runs;
  std::string loss;
  for (bool evaluated : {false, true}) {
    absl::StatusOr<job::Job> job = GptJobOn(layout, job::REGISTER_MEMORY_SHARED);
    ASSERT_TRUE(job.ok()) << job.status();
    loss = job->loss();
    job->set_num_steps(3);
    if (evaluated) {
      job::Evaluation* evaluation = job->mutable_evaluation();
      evaluation->set_every_steps(2);
      for (const job::Input& input : job->inputs()) {
        job::Input* held_out = evaluation->add_inputs();
        held_out->set_name(input.name());
        *held_out->mutable_token_dataset() = input.token_dataset();
      }
    }
    absl::StatusOr<CompileResult> compiled = CompileOn(*job, layout.devices(), layout.nodes);
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    std::map<std::string, const plan::Task*> writer;
    for (const plan::Task& task : compiled->plan.tasks()) {
      for (const std::string& output : task.outputs()) writer[output] = &task;
    }
    for (const plan::Task& task : compiled->plan.tasks()) {
      if (!absl::StartsWith(task.name(), "pack:")) continue;
      for (const std::string& input : task.inputs()) {
        EXPECT_EQ(writer.at(input)->evaluation_every_steps(), 0) << task.name() << " <- " << input;
      }
    }
    absl::StatusOr<MeasuredRun> run = RunMeasured(*compiled);
    ASSERT_TRUE(run.ok()) << run.status();
    runs.push_back(std::move(*run));
  }
  ASSERT_EQ(runs[1].fetched.count("evaluation/" + loss), 1u);
  EXPECT_FALSE(runs[1].fetched.at("evaluation/" + loss).empty());
  ASSERT_TRUE(runs[0].fetched.contains(loss));
  ExpectBitIdentical({{loss, runs[0].fetched.at(loss)}}, {{loss, runs[1].fetched.at(loss)}},
                     layout.name);
}

void ExpectError(const std::string& evaluation, const std::string& message) {
  absl::StatusOr<CompileResult> compiled = CompileOn(ParseJob(TrainingJob(evaluation)), 2);
  ASSERT_FALSE(compiled.ok()) << "compiled; expected: " << message;
  EXPECT_THAT(compiled.status().message(), HasSubstr(message));
}

TEST(EvaluationTest, BadEvaluationsAreRefusedNamingTheCulprit) {
  ExpectError(R"pb(evaluation { every_steps: -1 })pb", "every_steps must be > 0, got -1");
  ExpectError(R"pb(evaluation { every_steps: 2 })pb",
              "the loss 'loss' reads input 'x', which evaluation.inputs does not replace");
  ExpectError(R"pb(evaluation {
                     every_steps: 2
                     inputs {
                       name: "z"
                       random_normal { std: 1 }
                     }
                   })pb",
              "input 'z' is no input of the job");
  ExpectError(R"pb(evaluation {
                     every_steps: 2
                     inputs {
                       name: "x"
                       shape: [ 2, 6 ]
                       random_normal { std: 1 }
                     }
                   })pb",
              "input 'x' sets a shape other than the job input's");
  ExpectError(R"pb(evaluation {
                     every_steps: 2
                     inputs { name: "x" }
                   })pb",
              "input 'x' has no source");
  ExpectError(R"pb(evaluation {
                     every_steps: 2
                     loss: "nothing"
                     inputs {
                       name: "x"
                       random_normal { std: 1 }
                     }
                   })pb",
              "depends on 'nothing', which no op, input or variable of the job produces");
  ExpectError(R"pb(evaluation {
                     inputs {
                       name: "x"
                       random_normal { std: 1 }
                     }
                   })pb",
              "inputs are given, but every_steps is 0");
  ExpectError(R"pb(ops { name: "evaluation/extra" type: "relu" inputs: "h" outputs: "evaluation/e" }
                   evaluation {
                     every_steps: 2
                     inputs {
                       name: "x"
                       random_normal { std: 1 }
                     }
                   })pb",
              "op 'evaluation/extra' starts with 'evaluation/'");
  ExpectError(R"pb(ops { name: "r" type: "relu" inputs: "h" outputs: "r" evaluation: true })pb",
              "op 'r' is marked evaluation, but the job has no evaluation");
}

}  // namespace
}  // namespace loom::compiler::testing
