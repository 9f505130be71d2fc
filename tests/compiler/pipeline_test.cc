// Micro-batches, pipeline stages and gradient clipping: each must leave the training math of a
// whole-batch, single-device run unchanged, and pipelines must schedule one-forward-one-backward
// (or GPipe) from credits alone.
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_kernels.h"
#include "node/local_run.h"
#include "testing/pipeline_analysis.h"
#include "tests/compiler/compiler_test_util.h"
#include "tests/compiler/gpt_layouts.h"
#include "tests/compiler/run_util.h"

namespace loom::compiler::testing {
namespace {

std::string DeviceList(int first, int count) {
  std::string list;
  for (int i = first; i < first + count; ++i) {
    list += absl::StrCat(i == first ? "" : ", ", "\"cpu:", i, "\"");
  }
  return absl::StrCat("devices: [", list, "]");
}

struct Layout {
  int data_parallel = 1;
  int stages = 1;
  int micro_batches = 1;
  double max_grad_norm = 0;
};

// An MLP regression on a batch of 16 rows: h = gelu(x w1), y = h w2, loss = mean((y - t)^2).
// With two stages, w1 and its ops are on stage 0, the rest on stage 1.
job::Job Mlp(const Layout& layout) {
  const int per_stage = layout.data_parallel;
  auto stage_attribute = [&](int stage) {
    return layout.stages > 1 ? absl::StrCat(" stage: ", stage) : std::string();
  };
  auto placement_of = [&](int stage) {
    return absl::StrCat("placement { ",
                        DeviceList(layout.stages > 1 ? stage * per_stage : 0, per_stage), " }");
  };
  std::string text = absl::StrCat(
      "name: \"mlp\" ", placement_of(0), " num_steps: 5\n",
      "optimizer { adamw { learning_rate: 0.01 weight_decay: 0.1 } }\nloss: \"loss\"\n",
      "num_micro_batches: ", layout.micro_batches, "\n", "max_grad_norm: ", layout.max_grad_norm,
      "\n", "inputs { name: \"x\" shape: [16, 4] random_normal { std: 1 seed: 1 } ",
      placement_of(0), " }\n",
      "inputs { name: \"target\" shape: [16, 2] random_normal { std: 1 seed: 3 } ",
      placement_of(layout.stages - 1), " }\n",
      "variables { name: \"w1\" shape: [4, 16] initializer { normal { std: 0.5 seed: 2 } } ",
      placement_of(0), " }\n",
      "variables { name: \"w2\" shape: [16, 2] initializer { normal { std: 0.5 seed: 4 } } ",
      placement_of(layout.stages - 1), " }\n",
      "ops { name: \"h\" type: \"matmul\" inputs: [\"x\", \"w1\"] outputs: \"h\"",
      stage_attribute(0), " }\n", "ops { name: \"a\" type: \"gelu\" inputs: \"h\" outputs: \"a\"",
      stage_attribute(0), " }\n",
      "ops { name: \"y\" type: \"matmul\" inputs: [\"a\", \"w2\"] outputs: \"y\"",
      stage_attribute(layout.stages - 1), " }\n",
      "ops { name: \"error\" type: \"subtract\" inputs: [\"y\", \"target\"] outputs: \"error\"",
      stage_attribute(layout.stages - 1), " }\n",
      "ops { name: \"squared\" type: \"multiply\" inputs: [\"error\", \"error\"] outputs: "
      "\"squared\"",
      stage_attribute(layout.stages - 1), " }\n",
      "ops { name: \"loss\" type: \"reduce_mean\" inputs: \"squared\" outputs: \"loss\"",
      stage_attribute(layout.stages - 1), " }\n", "fetch: [\"loss\", \"w1\", \"w2\"]\n");
  for (int stage = 0; stage < layout.stages && layout.stages > 1; ++stage) {
    text += absl::StrCat("stage_placements { ", DeviceList(stage * per_stage, per_stage), " }\n");
  }
  return ParseJob(text);
}

// Per step: the mean of the step's micro-batch losses, and w1 and w2 as the step read them.
struct Trajectory {
  std::vector<double> losses;
  std::vector<HostTensor> w1;
  std::vector<HostTensor> w2;
};

Trajectory Train(const Layout& layout) {
  const int devices = layout.data_parallel * layout.stages;
  auto fetched = CompileAndRun(Mlp(layout), devices);
  EXPECT_TRUE(fetched.ok()) << fetched.status();
  Trajectory trajectory;
  if (!fetched.ok()) return trajectory;
  const int m = layout.micro_batches;
  const std::vector<HostTensor>& losses = fetched->at("loss");
  EXPECT_EQ(losses.size(), 5u * m);
  for (size_t step = 0; step * m < losses.size(); ++step) {
    double sum = 0;
    for (int j = 0; j < m; ++j) sum += losses[step * m + j].Values<float>()[0];
    trajectory.losses.push_back(sum / m);
    trajectory.w1.push_back(fetched->at("w1")[step * m]);
    trajectory.w2.push_back(fetched->at("w2")[step * m]);
    // A per-step tensor is the same in every micro-batch piece of its step.
    for (int j = 1; j < m; ++j) {
      EXPECT_EQ(fetched->at("w1")[step * m + j].bytes, trajectory.w1.back().bytes);
    }
  }
  return trajectory;
}

void ExpectSameTrajectory(const Trajectory& expected, const Trajectory& actual,
                          const std::string& what) {
  ASSERT_EQ(expected.losses.size(), actual.losses.size()) << what;
  for (size_t step = 0; step < expected.losses.size(); ++step) {
    EXPECT_NEAR(actual.losses[step], expected.losses[step], 1e-5 * std::fabs(expected.losses[step]))
        << what << ": loss of step " << step;
    for (const auto& [want, got] :
         {std::pair{&expected.w1, &actual.w1}, std::pair{&expected.w2, &actual.w2}}) {
      absl::Span<const float> a = (*want)[step].Values<float>();
      absl::Span<const float> b = (*got)[step].Values<float>();
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); ++i) {
        ASSERT_NEAR(b[i], a[i], 1e-5) << what << ": weight element " << i << " at step " << step;
      }
    }
  }
}

TEST(MicroBatchTest, MicroBatchesComputeTheWholeBatchStep) {
  const Trajectory whole = Train({});
  ASSERT_EQ(whole.losses.size(), 5u);
  ExpectSameTrajectory(whole, Train({.micro_batches = 4}), "M=4");
  ExpectSameTrajectory(whole, Train({.data_parallel = 2, .micro_batches = 4}), "DP=2, M=4");
}

TEST(MicroBatchTest, PipelineStagesComputeTheSameSteps) {
  const Trajectory whole = Train({});
  ExpectSameTrajectory(whole, Train({.stages = 2, .micro_batches = 4}), "PP=2, M=4");
  ExpectSameTrajectory(whole, Train({.data_parallel = 2, .stages = 2, .micro_batches = 4}),
                       "DP=2 x PP=2, M=4");
}

TEST(MicroBatchTest, ClippingUsesTheWholeStepsGradientNorm) {
  const Trajectory unclipped = Train({});
  const Trajectory clipped = Train({.max_grad_norm = 0.05});
  ASSERT_EQ(clipped.losses.size(), 5u);
  // Clipping this hard changes the updates (AdamW is scale-invariant but for epsilon, so compare
  // the weights, which move differently from the second step on).
  double difference = 0;
  for (size_t i = 0; i < clipped.w1[2].Values<float>().size(); ++i) {
    difference =
        std::max(difference, std::fabs(static_cast<double>(clipped.w1[2].Values<float>()[i]) -
                                       unclipped.w1[2].Values<float>()[i]));
  }
  EXPECT_GT(difference, 1e-6);
  ExpectSameTrajectory(clipped, Train({.micro_batches = 4, .max_grad_norm = 0.05}), "clipped, M=4");
  ExpectSameTrajectory(
      clipped, Train({.data_parallel = 2, .stages = 2, .micro_batches = 2, .max_grad_norm = 0.05}),
      "clipped, DP=2 x PP=2, M=2");
}

// --- Schedules ---------------------------------------------------------------------------------

// p stages of equal cost: stage s is matmul then sleep (forward 5 ms, backward 10 ms), on cpu:s,
// or with `tensor_parallel` t > 1 on cpu:s t .. s t + t - 1 with its weight split by columns
// (column-parallel: the next stage gathers the activation, the backward sums the input's
// gradient over the stage's devices, a collective of each pass per micro-batch).
// In 1F1B's steady state a stage's next forward input arrives just as it needs it, and its next
// backward input a forward and a backward later, so only a thread starved for longer than that
// (15 ms) could reorder its passes: long enough for a busy 2-core machine running tests in
// parallel.
job::Job SleepPipeline(int stages, int micro_batches, job::PipelineSchedule schedule,
                       int tensor_parallel = 1) {
  const int t = tensor_parallel;
  const std::string split = t > 1 ? " sbp: \"S(1)\"" : "";
  std::string text = absl::StrCat(
      "name: \"pipeline\" placement { ", DeviceList(0, stages * t), " } num_steps: 1\n",
      "optimizer { sgd { learning_rate: 0.01 } }\nloss: \"loss\"\nnum_micro_batches: ",
      micro_batches, "\npipeline_schedule: ", job::PipelineSchedule_Name(schedule), "\n",
      "inputs { name: \"x\" shape: [", 2 * micro_batches,
      ", 8] random_normal { std: 1 seed: 1 } placement { ", DeviceList(0, t), " } }\n");
  std::string input = "x";
  for (int s = 0; s < stages; ++s) {
    const std::string devices = DeviceList(s * t, t);
    text += absl::StrCat(
        "stage_placements { ", devices, " }\n", "variables { name: \"w", s,
        "\" shape: [8, 8] initializer { normal { std: 0.3 seed: ", 10 + s, "} } placement { ",
        devices, " }", split, " }\n", "ops { name: \"mm", s, "\" type: \"matmul\" inputs: [\"",
        input, "\", \"w", s, "\"] outputs: \"mm", s, "\" stage: ", s, " }\n", "ops { name: \"slow",
        s, "\" type: \"sleep\" inputs: \"mm", s, "\" outputs: \"slow", s, "\" stage: ", s,
        " attributes { key: \"microseconds\" value { int_value: 5000 } }",
        " attributes { key: \"backward_microseconds\" value { int_value: 10000 } } }\n");
    input = absl::StrCat("slow", s);
  }
  text += absl::StrCat("ops { name: \"loss\" type: \"reduce_mean\" inputs: \"", input,
                       "\" outputs: \"loss\" stage: ", stages - 1, " }\n");
  return ParseJob(text);
}

// Per device (stage s's devices are s t .. s t + t - 1).
std::vector<StageSchedule> RunSchedule(int stages, int micro_batches,
                                       job::PipelineSchedule schedule, int tensor_parallel = 1) {
  const int devices = stages * tensor_parallel;
  absl::StatusOr<CompileResult> compiled =
      CompileOn(SleepPipeline(stages, micro_batches, schedule, tensor_parallel), devices);
  EXPECT_TRUE(compiled.ok()) << compiled.status();
  if (!compiled.ok()) return {};
  KernelRegistry kernels;
  EXPECT_TRUE(RegisterCpuKernels(&kernels).ok());
  absl::StatusOr<LocalRunResult> run = RunPlanLocally(compiled->plan, kernels, JobOptions{});
  EXPECT_TRUE(run.ok()) << run.status();
  if (!run.ok()) return {};
  // The compute tasks of cpu:d that act once per micro-batch are its passes.
  return AnalyzePipeline(run->runtime->events(), PipelineRolesByDevice(compiled->plan), devices);
}

TEST(PipelineScheduleTest, OneForwardOneBackwardEmergesFromCredits) {
  const int p = 4;
  const int m = 8;
  // The credit bound holds in every run. The exact 1F1B order needs every stage's thread to run
  // when its input arrives (see SleepPipeline): a thread starved for 15 ms by a machine running
  // other tests may reorder a stage's passes, so the order gets up to three runs, and must show
  // on every stage of one of them.
  std::string last_orders;
  for (int attempt = 1; attempt <= 3; ++attempt) {
    const std::vector<StageSchedule> schedules = RunSchedule(p, m, job::ONE_F_ONE_B);
    ASSERT_EQ(schedules.size(), static_cast<size_t>(p));
    bool in_order = true;
    last_orders.clear();
    for (int s = 0; s < p; ++s) {
      ASSERT_LE(schedules[s].peak_in_flight, p - s) << "stage " << s << ", run " << attempt;
      in_order = in_order && schedules[s].order == OneForwardOneBackwardOrder(p - s, m);
      absl::StrAppend(&last_orders, "\n  stage ", s, ": ", schedules[s].order,
                      " (1F1B: ", OneForwardOneBackwardOrder(p - s, m), ")");
    }
    // The first stage does fill its p slots.
    ASSERT_EQ(schedules[0].peak_in_flight, p) << "run " << attempt;
    if (in_order) return;
  }
  ADD_FAILURE() << "no run of three showed the 1F1B order; the last one:" << last_orders;
}

// With tensor parallelism on the stages each micro-batch's forward and backward pass has its own
// collectives; the two passes keep separate collective orders (and streams), or the first stage's
// second forward would wait in its all-gather for the first micro-batch's backward all-reduce,
// and the pipeline would run one micro-batch at a time (the first stage's order FBFBFBFB).
TEST(PipelineScheduleTest, TensorParallelStagesKeepOneForwardOneBackward) {
  const int p = 2;
  const int t = 2;
  const int m = 4;
  std::string last_orders;
  for (int attempt = 1; attempt <= 3; ++attempt) {
    const std::vector<StageSchedule> schedules = RunSchedule(p, m, job::ONE_F_ONE_B, t);
    ASSERT_EQ(schedules.size(), static_cast<size_t>(p * t));
    bool in_order = true;
    last_orders.clear();
    for (int d = 0; d < p * t; ++d) {
      const int s = d / t;
      ASSERT_LE(schedules[d].peak_in_flight, p - s) << "cpu:" << d << ", run " << attempt;
      in_order = in_order && schedules[d].order == OneForwardOneBackwardOrder(p - s, m);
      absl::StrAppend(&last_orders, "\n  cpu:", d, " (stage ", s, "): ", schedules[d].order,
                      " (1F1B: ", OneForwardOneBackwardOrder(p - s, m), ")");
    }
    if (in_order) return;
  }
  ADD_FAILURE() << "no run of three showed the 1F1B order; the last one:" << last_orders;
}

// A stage whose devices exchange tokens (expert parallelism) stashes one micro-batch more than
// 1F1B's p - s, so that one micro-batch's forward can compute while another waits for its
// exchange; the same model without experts keeps p - s, with tensor parallelism too (whose
// plans have all-to-alls of their own, but no experts). Read off a forward activation that its
// backward reads: the first layer norm's output of each stage's first block, rank 0.
TEST(PipelineScheduleTest, StagesThatExchangeTokensStashOneMicroBatchMore) {
  const GptLayout dense{
      .name = "dp2_pp2_m4", .data_parallel = 2, .pipeline_stages = 2, .micro_batches = 4};
  GptLayout experts = dense;
  experts.name = "dp2_ep2_pp2_m4_moe";
  experts.experts = 4;
  experts.expert_parallel = 2;
  const GptLayout tensor_parallel{
      .name = "tp2_pp2_m4", .tensor_parallel = 2, .pipeline_stages = 2, .micro_batches = 4};
  for (const auto& [layout, extra] :
       {std::pair{dense, 0}, std::pair{experts, 1}, std::pair{tensor_parallel, 0}}) {
    absl::StatusOr<CompileResult> compiled = CompileGpt(layout, job::REGISTER_MEMORY_SHARED);
    ASSERT_TRUE(compiled.ok()) << layout.name << ": " << compiled.status();
    std::map<std::string, int> slots;
    for (const plan::RegisterDesc& reg : compiled->plan.registers()) {
      slots[reg.name()] = reg.num_slots();
    }
    EXPECT_EQ(slots["h.0.ln_1@0"], 2 + extra) << layout.name << ", stage 0";
    EXPECT_EQ(slots["h.2.ln_1@0"], 1 + extra) << layout.name << ", stage 1";
  }
}

TEST(PipelineScheduleTest, GPipeStashesEveryMicroBatch) {
  const int p = 4;
  const int m = 8;
  const std::vector<StageSchedule> schedules = RunSchedule(p, m, job::GPIPE);
  ASSERT_EQ(schedules.size(), static_cast<size_t>(p));
  for (int s = 0; s < p; ++s) {
    EXPECT_LE(schedules[s].peak_in_flight, m) << "stage " << s;
  }
  EXPECT_EQ(schedules[0].peak_in_flight, m);
  EXPECT_EQ(schedules[0].order, std::string(m, 'F') + std::string(m, 'B'));
}

const plan::Task& FindTask(const plan::Plan& plan, const std::string& name) {
  for (const plan::Task& task : plan.tasks()) {
    if (task.name() == name) return task;
  }
  ADD_FAILURE() << "no task " << name;
  return plan.tasks(0);
}

TEST(PipelineScheduleTest, StashedActivationsGetTheirSlots) {
  for (job::PipelineSchedule schedule : {job::ONE_F_ONE_B, job::GPIPE}) {
    absl::StatusOr<CompileResult> compiled = CompileOn(SleepPipeline(4, 8, schedule), 4);
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    // Stage s's matmul input is stashed there for the gradient of w_s: p - s slots (GPipe: M).
    // (Forward and backward read the same register: no second copy across stages.)
    const std::map<std::string, int> slots = SlotsOf(compiled->plan);
    std::map<int, int> stash_slots;
    for (const plan::Task& task : compiled->plan.tasks()) {
      for (int s = 0; s < 4; ++s) {
        if (task.name() == absl::StrCat("mm", s, "@0")) stash_slots[s] = slots.at(task.inputs(0));
        if (task.name() == absl::StrCat("grad/mm", s, "/matmul_1@0")) {
          EXPECT_EQ(task.inputs(0),
                    FindTask(compiled->plan, absl::StrCat("mm", s, "@0")).inputs(0));
        }
      }
    }
    ASSERT_EQ(stash_slots.size(), 4u);
    for (int s = 0; s < 4; ++s) {
      EXPECT_EQ(stash_slots[s], schedule == job::GPIPE ? 8 : 4 - s) << "stage " << s;
    }
  }
}

// Two stages of a matmul each (stage 0: x -> mm0 -> r0 on cpu:0; stage 1: mm1 -> loss on cpu:1),
// two micro-batches.
job::Job TwoStageJob(const std::string& extra) {
  return ParseJob(absl::StrCat(
      R"pb(name: "slots"
           placement { devices: [ "cpu:0", "cpu:1" ] }
           optimizer { sgd { learning_rate: 0.01 } }
           loss: "loss"
           num_micro_batches: 2
           inputs {
             name: "x"
             shape: [ 4, 8 ]
             random_normal { std: 1 }
             placement { devices: "cpu:0" }
           }
           stage_placements { devices: "cpu:0" }
           stage_placements { devices: "cpu:1" }
           variables {
             name: "w0"
             shape: [ 8, 8 ]
             initializer { normal { std: 0.3 } }
             placement { devices: "cpu:0" }
           }
           variables {
             name: "w1"
             shape: [ 8, 8 ]
             initializer { normal { std: 0.3 } }
             placement { devices: "cpu:1" }
           }
           ops {
             name: "mm0"
             type: "matmul"
             inputs: [ "x", "w0" ]
             outputs: "mm0"
             stage: 0
           }
           ops { name: "r0" type: "relu" inputs: "mm0" outputs: "r0" stage: 0 }
           ops {
             name: "mm1"
             type: "matmul"
             inputs: [ "r0", "w1" ]
             outputs: "mm1"
             stage: 1
           }
           ops { name: "loss" type: "reduce_mean" inputs: "mm1" outputs: "loss" stage: 1 })pb",
      extra));
}

TEST(RegisterSlotsTest, ReadOnItsProducersStreamOnlyOneSlotElsewhereTwo) {
  absl::StatusOr<CompileResult> compiled = CompileOn(TwoStageJob(""), 2);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  std::map<std::string, int> slots = SlotsOf(compiled->plan);
  // Read on cpu:0's compute stream only.
  EXPECT_EQ(slots.at("grad/w0@0"), 1);
  EXPECT_EQ(slots.at("grad/loss/scale@0"), 1);
  // Read by the copy to stage 1 (cpu:1's copy-in stream), and the copy back read on cpu:0's
  // compute stream.
  EXPECT_EQ(slots.at("r0@0"), 2);
  EXPECT_EQ(slots.at("grad/mm1/matmul~1@0"), 2);
  // Stashed activations: p - s.
  EXPECT_EQ(slots.at("x@0"), 2);
  EXPECT_EQ(slots.at("r0~1@0"), 1);
}

TEST(RegisterSlotsTest, TheJobsRegisterSlotsApplyToEveryRegisterButStashes) {
  absl::StatusOr<CompileResult> compiled = CompileOn(TwoStageJob("register_slots: 3"), 2);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  std::map<std::string, int> slots = SlotsOf(compiled->plan);
  EXPECT_EQ(slots.at("grad/w0@0"), 3);
  EXPECT_EQ(slots.at("r0@0"), 3);
  EXPECT_EQ(slots.at("x@0"), 2);
  EXPECT_EQ(slots.at("w0@0"), 1);
}

}  // namespace
}  // namespace loom::compiler::testing
