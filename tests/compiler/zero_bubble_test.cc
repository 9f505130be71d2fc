// Zero-bubble pipelines (PipelineSchedule ZERO_BUBBLE, ZERO_BUBBLE_H2): autodiff marks the weight
// gradients, the compiler defers them (priority) and stashes what they read deeper (slots), the
// schedule that emerges defers W acts past later forwards, and the GPT trains bit for bit as under
// 1F1B.
#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/autodiff.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_kernels.h"
#include "node/local_run.h"
#include "testing/pipeline_analysis.h"
#include "tests/compiler/compiler_test_util.h"
#include "tests/compiler/gpt_layouts.h"
#include "tests/compiler/placed_sleep_pipeline.h"
#include "tests/compiler/run_util.h"

namespace loom::compiler::testing {
namespace {

// ---- Autodiff marks the weight gradients ----

TEST(WeightGradientTest, AutodiffMarksWhatOnlyVariablesGradientsNeed) {
  // x -> h = x w1 -> a = gelu(h) -> y = a w2 -> loss: the gradient of a (y's input gradient) and
  // of h (gelu's) are input gradients; those of w1 and w2 are weight gradients.
  const job::Job job = ParseJob(R"pb(
    name: "mlp"
    placement { devices: "cpu:0" }
    loss: "loss"
    optimizer { sgd { learning_rate: 0.1 } }
    inputs {
      name: "x"
      shape: [ 4, 3 ]
      random_normal { std: 1 }
    }
    variables {
      name: "w1"
      shape: [ 3, 5 ]
      initializer { normal { std: 1 } }
    }
    variables {
      name: "w2"
      shape: [ 5, 2 ]
      initializer { normal { std: 1 } }
    }
    ops {
      name: "h"
      type: "matmul"
      inputs: [ "x", "w1" ]
      outputs: "h"
    }
    ops { name: "a" type: "gelu" inputs: "h" outputs: "a" }
    ops {
      name: "y"
      type: "matmul"
      inputs: [ "a", "w2" ]
      outputs: "y"
    }
    ops { name: "loss" type: "reduce_mean" inputs: "y" outputs: "loss" }
  )pb");
  absl::StatusOr<job::Job> trained =
      AddBackward(job, StandardOps(), DeviceSet::Cpus(1, 1), job.loss());
  ASSERT_TRUE(trained.ok()) << trained.status();
  std::map<std::string, bool> weight_gradient;  // backward op -> marked
  std::map<std::string, std::string> producer;  // tensor -> backward op
  for (const job::Op& op : trained->ops()) {
    EXPECT_TRUE(op.backward() || !op.weight_gradient()) << op.name();
    if (!op.backward()) continue;
    weight_gradient[op.name()] = op.weight_gradient();
    for (const std::string& output : op.outputs()) producer[output] = op.name();
  }
  // The variables' gradients and the matmuls writing them.
  for (const char* variable : {"grad/w1", "grad/w2"}) {
    ASSERT_TRUE(weight_gradient.contains(variable));
    EXPECT_TRUE(weight_gradient[variable]) << variable;
    const job::Op* identity = nullptr;
    for (const job::Op& op : trained->ops()) {
      if (op.name() == variable) identity = &op;
    }
    ASSERT_NE(identity, nullptr);
    EXPECT_TRUE(weight_gradient[producer.at(identity->inputs(0))]) << identity->inputs(0);
  }
  // Everything else (the seed, reduce_mean's, the gradient of a, gelu's) is an input gradient.
  int input_gradients = 0;
  for (const auto& [name, marked] : weight_gradient) input_gradients += marked ? 0 : 1;
  EXPECT_GE(input_gradients, 4);
  int gelu_gradients = 0;
  for (const job::Op& op : trained->ops()) {
    if (op.backward() && op.type() == "gelu_grad") {
      ++gelu_gradients;
      EXPECT_FALSE(op.weight_gradient()) << op.name();
    }
  }
  EXPECT_EQ(gelu_gradients, 1);
}

TEST(WeightGradientTest, AForwardOpMarkedAsWeightGradientIsRefused) {
  job::Job job = ParseJob(R"pb(
    name: "marked"
    placement { devices: "cpu:0" }
    inputs {
      name: "x"
      shape: [ 2 ]
      random_normal { std: 1 }
    }
    ops { name: "y" type: "relu" inputs: "x" outputs: "y" weight_gradient: true }
    fetch: "y"
  )pb");
  absl::StatusOr<CompileResult> compiled = CompileOn(job, 1);
  ASSERT_FALSE(compiled.ok());
  EXPECT_EQ(compiled.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(compiled.status().message().find("op 'y'"), std::string::npos) << compiled.status();
  EXPECT_NE(compiled.status().message().find("weight_gradient"), std::string::npos);
}

// ---- Priorities and slots on a sleeping pipeline ----

constexpr int kStages = 4;
constexpr int kMicroBatches = 8;

// Stage s on cpu:s reads its weight through a sleep (0 forward, `weight_us` backward: W), then a
// tiny matmul and a sleep of `forward_us` forward and `input_us` backward (B).
job::Job SleepPipeline(job::PipelineSchedule schedule, int forward_us, int input_us,
                       int weight_us) {
  std::string devices;
  for (int s = 0; s < kStages; ++s) devices += absl::StrCat(s == 0 ? "" : ", ", "\"cpu:", s, "\"");
  std::string text =
      absl::StrCat("name: \"zb\" placement { devices: [", devices, "] } num_steps: 1\n",
                   "optimizer { sgd { learning_rate: 0.01 } }\nloss: \"loss\"\nnum_micro_batches: ",
                   kMicroBatches, "\npipeline_schedule: ", job::PipelineSchedule_Name(schedule),
                   "\n", "inputs { name: \"x\" shape: [", 2 * kMicroBatches,
                   ", 8] random_normal { std: 1 seed: 1 } placement { devices: \"cpu:0\" } }\n");
  std::string input = "x";
  for (int s = 0; s < kStages; ++s) {
    text += absl::StrCat(
        "stage_placements { devices: \"cpu:", s, "\" }\n", "variables { name: \"w", s,
        "\" shape: [8, 8] initializer { normal { std: 0.3 seed: ", 10 + s,
        "} } placement { devices: \"cpu:", s, "\" } }\n", "ops { name: \"weight", s,
        "\" type: \"sleep\" inputs: \"w", s, "\" outputs: \"weight", s, "\" stage: ", s,
        " attributes { key: \"microseconds\" value { int_value: 0 } }",
        " attributes { key: \"backward_microseconds\" value { int_value: ", weight_us, " } } }\n",
        "ops { name: \"mm", s, "\" type: \"matmul\" inputs: [\"", input, "\", \"weight", s,
        "\"] outputs: \"mm", s, "\" stage: ", s, " }\n", "ops { name: \"slow", s,
        "\" type: \"sleep\" inputs: \"mm", s, "\" outputs: \"slow", s, "\" stage: ", s,
        " attributes { key: \"microseconds\" value { int_value: ", forward_us, " } }",
        " attributes { key: \"backward_microseconds\" value { int_value: ", input_us, " } } }\n");
    input = absl::StrCat("slow", s);
  }
  text += absl::StrCat("ops { name: \"loss\" type: \"reduce_mean\" inputs: \"", input,
                       "\" outputs: \"loss\" stage: ", kStages - 1, " }\n");
  return ParseJob(text);
}

TEST(ZeroBubbleTest, PrioritiesSlotsAndLookahead) {
  absl::StatusOr<CompileResult> compiled =
      CompileOn(SleepPipeline(job::ZERO_BUBBLE, 0, 0, 0), kStages);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  const plan::Plan& plan = compiled->plan;
  const std::map<std::string, int> slots = SlotsOf(plan);
  for (int s = 0; s < kStages; ++s) {
    SCOPED_TRACE(absl::StrCat("stage ", s));
    const plan::Task* forward = TaskNamed(plan, absl::StrCat("mm", s, "@0"));
    // The matmul's gradients: of its input (B, the stage's input gradient; stage 0's input is
    // data and has none) and of its weight (W; the weight's sleep copy depends on no data).
    const plan::Task* input_gradient =
        s == 0 ? nullptr : TaskNamed(plan, absl::StrCat("grad/mm", s, "/matmul@0"));
    const plan::Task* weight_gradient = TaskNamed(plan, MatmulWeightGradientTask(s));
    const plan::Task* sleep_b = TaskNamed(plan, absl::StrCat("grad/slow", s, "/sleep@0"));
    const plan::Task* sleep_w = TaskNamed(plan, absl::StrCat("grad/weight", s, "/sleep@0"));
    ASSERT_NE(forward, nullptr);
    ASSERT_NE(weight_gradient, nullptr);
    ASSERT_NE(sleep_b, nullptr);
    ASSERT_NE(sleep_w, nullptr);
    // Forward first, then input gradients, then weight gradients.
    EXPECT_EQ(forward->priority(), 0);
    EXPECT_EQ(sleep_b->priority(), -1);
    EXPECT_EQ(weight_gradient->priority(), -2);
    EXPECT_EQ(sleep_w->priority(), -2);
    if (s > 0) {
      ASSERT_NE(input_gradient, nullptr);
      EXPECT_EQ(input_gradient->priority(), -1);
      // The weight copy the input gradient reads: 1F1B's p - s.
      EXPECT_EQ(slots.at(input_gradient->inputs(1)), kStages - s);
    }
    // What W reads, the matmul's input and the output gradient: p + 1.
    EXPECT_EQ(weight_gradient->inputs(0), forward->inputs(0));
    EXPECT_EQ(slots.at(weight_gradient->inputs(0)), kStages + 1);
    EXPECT_EQ(slots.at(weight_gradient->inputs(1)), kStages + 1);
    // W of micro-batch j waits for the output gradient of j + s (B's), not for more forward data;
    // the W after it follows it.
    if (s == 0) {
      EXPECT_TRUE(weight_gradient->input_lookahead().empty());
    } else {
      ASSERT_EQ(weight_gradient->input_lookahead_size(), 2);
      EXPECT_EQ(weight_gradient->input_lookahead(0), 0);
      EXPECT_EQ(weight_gradient->input_lookahead(1), s);
    }
    EXPECT_TRUE(sleep_w->input_lookahead().empty());
  }
  // Under 1F1B the same tasks all act as backward, looking at one piece.
  absl::StatusOr<CompileResult> one_f_one_b =
      CompileOn(SleepPipeline(job::ONE_F_ONE_B, 0, 0, 0), kStages);
  ASSERT_TRUE(one_f_one_b.ok()) << one_f_one_b.status();
  const plan::Task* weight_gradient = TaskNamed(one_f_one_b->plan, "grad/mm1/matmul_1@0");
  ASSERT_NE(weight_gradient, nullptr);
  EXPECT_EQ(weight_gradient->priority(), 1);
  EXPECT_TRUE(weight_gradient->input_lookahead().empty());
}

// The act of `task` on `piece` in `events`.
const ActEvent* ActOf(const plan::Plan& plan, const std::vector<ActEvent>& events,
                      const std::string& task, int64_t piece) {
  for (const ActEvent& event : events) {
    if (event.piece == piece && plan.tasks(static_cast<int>(event.task_index)).name() == task) {
      return &event;
    }
  }
  return nullptr;
}

TEST(ZeroBubbleTest, WeightGradientsFillTheBubbles) {
  // F, B and W of 5 ms each.
  absl::StatusOr<CompileResult> compiled =
      CompileOn(SleepPipeline(job::ZERO_BUBBLE, 5000, 5000, 5000), kStages);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  KernelRegistry kernels;
  ASSERT_TRUE(RegisterCpuKernels(&kernels).ok());
  absl::StatusOr<LocalRunResult> run = RunPlanLocally(compiled->plan, kernels, JobOptions{});
  ASSERT_TRUE(run.ok()) << run.status();
  const std::vector<ActEvent>& events = run->runtime->events();
  const std::vector<StageSchedule> stages =
      AnalyzePipeline(events, PipelineRolesByDevice(compiled->plan), kStages);
  ASSERT_EQ(stages.size(), static_cast<size_t>(kStages));
  const std::vector<int64_t> stashed =
      PeakStashedPerDevice(compiled->plan, events, kStages, kStages);
  for (int s = 0; s < kStages; ++s) {
    SCOPED_TRACE(absl::StrCat("stage ", s, ": ", stages[s].order));
    // The credits bound what is stashed for W; the first stage, whose forwards wait for nothing
    // else, fills them.
    EXPECT_LE(stashed[s], kStages + 1);
    EXPECT_EQ(stages[s].order.size(), 3u * kMicroBatches);
    // W of micro-batch j starts after B of j + s (or of the step's last) ended.
    const std::string weight_gradient = MatmulWeightGradientTask(s);
    for (int j = 0; j < kMicroBatches; ++j) {
      const ActEvent* w = ActOf(compiled->plan, events, weight_gradient, j);
      const ActEvent* b = ActOf(compiled->plan, events, absl::StrCat("grad/slow", s, "/sleep@0"),
                                std::min(j + s, kMicroBatches - 1));
      ASSERT_NE(w, nullptr);
      ASSERT_NE(b, nullptr);
      EXPECT_GE(w->start_nanoseconds, b->end_nanoseconds) << "micro-batch " << j;
    }
  }
  EXPECT_EQ(stashed[0], kStages + 1);
  // So the last stage runs B of micro-batches 0..p - 1 before its first W.
  EXPECT_EQ(stages[kStages - 1].order.substr(0, 8), "FBFBFBFB");
}

// ---- ZB-H2: p - 1 more warm-up forwards, W without lookahead ----

TEST(ZeroBubbleH2Test, SlotsAndPriorities) {
  absl::StatusOr<CompileResult> compiled =
      CompileOn(SleepPipeline(job::ZERO_BUBBLE_H2, 0, 0, 0), kStages);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  const plan::Plan& plan = compiled->plan;
  const std::map<std::string, int> slots = SlotsOf(plan);
  for (int s = 0; s < kStages; ++s) {
    SCOPED_TRACE(absl::StrCat("stage ", s));
    const plan::Task* forward = TaskNamed(plan, absl::StrCat("mm", s, "@0"));
    const plan::Task* weight_gradient = TaskNamed(plan, MatmulWeightGradientTask(s));
    ASSERT_NE(forward, nullptr);
    ASSERT_NE(weight_gradient, nullptr);
    EXPECT_EQ(forward->priority(), 0);
    EXPECT_EQ(weight_gradient->priority(), -2);
    // What W reads: 2p - 1; no lookahead.
    EXPECT_EQ(slots.at(weight_gradient->inputs(0)), 2 * kStages - 1);
    EXPECT_EQ(slots.at(weight_gradient->inputs(1)), 2 * kStages - 1);
    EXPECT_TRUE(weight_gradient->input_lookahead().empty());
    if (s > 0) {
      // The weight copy the input gradient reads: 2(p - s) - 1.
      const plan::Task* input_gradient = TaskNamed(plan, absl::StrCat("grad/mm", s, "/matmul@0"));
      ASSERT_NE(input_gradient, nullptr);
      EXPECT_EQ(input_gradient->priority(), -1);
      EXPECT_EQ(slots.at(input_gradient->inputs(1)), 2 * (kStages - s) - 1);
    }
  }
}

TEST(ZeroBubbleH2Test, StashesStayWithinTheirSlots) {
  absl::StatusOr<CompileResult> compiled =
      CompileOn(SleepPipeline(job::ZERO_BUBBLE_H2, 2000, 2000, 2000), kStages);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  KernelRegistry kernels;
  ASSERT_TRUE(RegisterCpuKernels(&kernels).ok());
  absl::StatusOr<LocalRunResult> run = RunPlanLocally(compiled->plan, kernels, JobOptions{});
  ASSERT_TRUE(run.ok()) << run.status();
  const std::vector<int64_t> stashed =
      PeakStashedPerDevice(compiled->plan, run->runtime->events(), kStages, kStages);
  for (int s = 0; s < kStages; ++s) EXPECT_LE(stashed[s], 2 * kStages - 1) << "stage " << s;
  // The first stage, whose forwards wait for nothing, runs more than 1F1B's p ahead.
  EXPECT_GT(stashed[0], kStages);
}

// ---- The GPT trains bit for bit as under 1F1B ----

class ZeroBubbleGptTest
    : public ::testing::TestWithParam<std::tuple<GptLayout, job::PipelineSchedule>> {};

TEST_P(ZeroBubbleGptTest, LossesEqualOneForwardOneBackwardBitForBit) {
  GptLayout reference = std::get<0>(GetParam());
  reference.schedule = job::ONE_F_ONE_B;
  GptLayout zero_bubble = reference;
  zero_bubble.schedule = std::get<1>(GetParam());
  ExpectTrainsBitForBitAs(reference, zero_bubble);
}

INSTANTIATE_TEST_SUITE_P(Layouts, ZeroBubbleGptTest,
                         ::testing::Combine(::testing::ValuesIn(PipelineScheduleLayouts()),
                                            ::testing::Values(job::ZERO_BUBBLE,
                                                              job::ZERO_BUBBLE_H2)),
                         [](const auto& info) {
                           return absl::StrCat(
                               std::get<0>(info.param).name,
                               std::get<1>(info.param) == job::ZERO_BUBBLE ? "_zb_h1" : "_zb_h2");
                         });

}  // namespace
}  // namespace loom::compiler::testing
