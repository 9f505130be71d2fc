// bench_bubble: the pipeline bubble of one-forward-one-backward as it emerges from credits.
//
// A training job of P = 4 stages on cpu:0..3, compiled by Loom's compiler: stage s is a tiny
// matmul with its own weight, then op "sleep" taking 1 ms forward and 2 ms backward (sleeping
// stages use no core, so four stages fit on two). One step of M micro-batches, M in
// {4, 8, 16, 32}. From the runtime's event record:
//  - idle fraction: over the step's span (first act of any stage to the last act of any stage),
//    the mean over stages of 1 - busy / span, against 1F1B's (P - 1) / (M + P - 1);
//  - peak stashed activations per stage (micro-batches between their first forward act and
//    their last backward act there) against 1F1B's bound P - s.
// Each M runs kRepetitions times; medians are reported. The RESULT line is the M whose median
// idle fraction is furthest above the formula.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/common/bench_util.h"
#include "client/job_builder.h"
#include "compiler/compiler.h"
#include "glog/logging.h"
#include "kernels/cpu/cpu_kernels.h"
#include "node/local_run.h"
#include "testing/pipeline_analysis.h"

namespace loom::bench {
namespace {

constexpr int kStages = 4;
constexpr int64_t kForwardMicroseconds = 1000;
constexpr int64_t kBackwardMicroseconds = 2000;
constexpr int kRepetitions = 5;
constexpr double kGoalRatio = 1.05;

job::Job BubbleJob(int micro_batches) {
  JobBuilder builder("bubble");
  std::vector<std::string> all;
  for (int s = 0; s < kStages; ++s) all.push_back(absl::StrCat("cpu:", s));
  builder.SetPlacement(all);
  for (int s = 0; s < kStages; ++s) builder.AddStagePlacement({absl::StrCat("cpu:", s)});
  job::Input source;
  source.mutable_random_normal()->set_std(1.0);
  source.mutable_random_normal()->set_seed(1);
  std::string activation = builder.Input("x", {2 * micro_batches, 8}, source, {}, {"cpu:0"});
  for (int s = 0; s < kStages; ++s) {
    job::Initializer initializer;
    initializer.mutable_normal()->set_std(0.3);
    initializer.mutable_normal()->set_seed(10 + s);
    std::string weight =
        builder.Variable(absl::StrCat("w", s), {8, 8}, initializer, {}, {absl::StrCat("cpu:", s)});
    JobBuilder::OpOptions on_stage;
    on_stage.stage = s;
    activation = builder.Matmul(absl::StrCat("mm", s), activation, weight, false, false, on_stage);
    activation = builder.Op("sleep", absl::StrCat("slow", s), {activation},
                            {{"microseconds", IntAttribute(kForwardMicroseconds)},
                             {"backward_microseconds", IntAttribute(kBackwardMicroseconds)}},
                            on_stage);
  }
  JobBuilder::OpOptions last;
  last.stage = kStages - 1;
  builder.Op("reduce_mean", "loss", {activation}, {}, last);
  job::Job job = builder.Build();
  job.set_loss("loss");
  job.mutable_optimizer()->mutable_sgd()->set_learning_rate(0.01);
  job.set_num_micro_batches(micro_batches);
  job.set_num_steps(1);
  return job;
}

struct Measurement {
  double idle_fraction = 0;
  std::vector<int64_t> peaks;  // per stage
};

Measurement RunOnce(const plan::Plan& plan, const KernelRegistry& kernels) {
  absl::StatusOr<LocalRunResult> run = RunPlanLocally(plan, kernels, JobOptions{});
  ExitIfError(run.status(), "running the bubble job");
  std::vector<PipelineRole> roles(plan.tasks_size());
  for (const plan::Task& task : plan.tasks()) {
    if (task.kind() != plan::COMPUTE) continue;
    roles[task.index()] = PipelineRole{task.stream().device().index(), task.priority() > 0};
  }
  const std::vector<StageSchedule> stages = AnalyzePipeline(run->runtime->events(), roles, kStages);
  int64_t begin = stages[0].first_start_nanoseconds;
  int64_t end = stages[0].last_end_nanoseconds;
  for (const StageSchedule& stage : stages) {
    begin = std::min(begin, stage.first_start_nanoseconds);
    end = std::max(end, stage.last_end_nanoseconds);
  }
  Measurement measurement;
  for (const StageSchedule& stage : stages) {
    measurement.idle_fraction +=
        (1.0 - static_cast<double>(stage.busy_nanoseconds) / static_cast<double>(end - begin)) /
        kStages;
    measurement.peaks.push_back(stage.peak_in_flight);
  }
  return measurement;
}

int Main() {
  KernelRegistry kernels;
  ExitIfError(RegisterCpuKernels(&kernels), "registering the CPU kernels");
  compiler::OpRegistry ops;
  ExitIfError(compiler::RegisterStandardOps(&ops), "registering the ops");
  std::printf(
      "bubble: %d stages on cpu:0..%d, sleep %lld us forward / %lld us backward, "
      "%d runs per M (medians)\n",
      kStages, kStages - 1, static_cast<long long>(kForwardMicroseconds),
      static_cast<long long>(kBackwardMicroseconds), kRepetitions);
  std::printf("%4s  %10s  %10s  %6s  %-16s  %-16s\n", "M", "idle", "formula", "ratio", "peak stash",
              "bound (P - s)");
  double worst_ratio = 0;
  double worst_idle = 0;
  double worst_formula = 0;
  int worst_m = 0;
  bool peaks_within_bound = true;
  for (int m : {4, 8, 16, 32}) {
    absl::StatusOr<compiler::CompileResult> compiled =
        compiler::Compile(BubbleJob(m), ops, compiler::DeviceSet::Cpus(kStages, 1));
    ExitIfError(compiled.status(), "compiling the bubble job");
    std::vector<double> idle;
    std::vector<int64_t> peaks(kStages, 0);
    for (int repetition = 0; repetition < kRepetitions; ++repetition) {
      Measurement measurement = RunOnce(compiled->plan, kernels);
      idle.push_back(measurement.idle_fraction);
      for (int s = 0; s < kStages; ++s) peaks[s] = std::max(peaks[s], measurement.peaks[s]);
    }
    const double median = Median(idle);
    const double formula = static_cast<double>(kStages - 1) / (m + kStages - 1);
    std::string peak_text;
    std::string bound_text;
    for (int s = 0; s < kStages; ++s) {
      peak_text += absl::StrCat(s == 0 ? "" : " ", peaks[s]);
      bound_text += absl::StrCat(s == 0 ? "" : " ", std::min(kStages - s, m));
      peaks_within_bound = peaks_within_bound && peaks[s] == std::min(kStages - s, m);
    }
    std::printf("%4d  %10.4f  %10.4f  %6.3f  %-16s  %-16s   runs: %s\n", m, median, formula,
                median / formula, peak_text.c_str(), bound_text.c_str(),
                JoinValues(idle, 4).c_str());
    if (median / formula > worst_ratio) {
      worst_ratio = median / formula;
      worst_idle = median;
      worst_formula = formula;
      worst_m = m;
    }
  }
  std::printf("peak stashed activations %s the 1F1B bound on every stage (worst over runs)\n",
              peaks_within_bound ? "equal" : "DIFFER FROM");
  std::printf(
      "goal: idle fraction within %.0f%% of (P - 1) / (M + P - 1) for every M; worst M = %d\n",
      (kGoalRatio - 1) * 100, worst_m);
  PrintResult("bubble", absl::StrCat("idle_fraction_M", worst_m), worst_idle, "formula",
              worst_formula);
  return 0;
}

}  // namespace
}  // namespace loom::bench

int main(int argc, char** argv) {
  loom::bench::InitLogging(argv[0]);
  return loom::bench::Main();
}
