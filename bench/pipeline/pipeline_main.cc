// bench_pipeline: how close a P-stage pipeline comes to the ideal makespan (M + P - 1) x t.
//
// P = 4 COMPUTE stages, stage k on cpu:k's compute stream, each running op "sleep" with
// microseconds = 1000 (so four stages fit on two cores: a sleeping stage uses no core). A SOURCE
// on cpu:0 running "bench_noop" (a kernel that does nothing) emits M = 32 pieces into stage 0;
// every boundary register has 2 slots; the last stage's output is read by nobody. The measured
// makespan is JobRuntime::makespan_nanoseconds(): from Start to the end of the last act.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "actors/actor_factory.h"
#include "bench/common/bench_util.h"
#include "glog/logging.h"
#include "kernels/cpu/cpu_kernels.h"
#include "runtime/job_runtime.h"
#include "testing/plan_builder.h"

namespace loom::bench {
namespace {

constexpr int kStages = 4;
constexpr int kPieces = 32;
constexpr int kSlotsPerBoundary = 2;
constexpr int64_t kStageMicroseconds = 1000;
constexpr int kRepetitions = 9;
constexpr double kGoalRatio = 1.05;

std::string BoundaryName(int index) { return absl::StrCat("boundary", index); }

// Register boundary0 goes from the source to stage 0, boundary k from stage k - 1 to stage k;
// boundary P is stage P - 1's output, which nobody reads.
plan::Plan PipelinePlan() {
  PlanBuilder builder("pipeline");
  builder.AddCpuDevices(kStages);
  for (int boundary = 0; boundary <= kStages; ++boundary) {
    builder.AddRegister(BoundaryName(boundary), {1}, plan::FLOAT32, kSlotsPerBoundary);
  }
  builder.AddTask("source", plan::SOURCE, 0, {}, {BoundaryName(0)}, "bench_noop")
      .set_num_pieces(kPieces);
  for (int stage = 0; stage < kStages; ++stage) {
    plan::Task& task = builder.AddTask(absl::StrCat("stage", stage), plan::COMPUTE, stage,
                                       {BoundaryName(stage)}, {BoundaryName(stage + 1)}, "sleep");
    PlanBuilder::SetAttribute(task, "microseconds", kStageMicroseconds);
  }
  return builder.plan();
}

struct PipelineRun {
  double makespan_milliseconds = 0;
  std::vector<ActorSummary> summaries;
};

absl::StatusOr<PipelineRun> RunPipeline(const KernelRegistry& kernels) {
  absl::StatusOr<std::unique_ptr<JobRuntime>> job =
      JobRuntime::Create(PipelinePlan(), &kernels, MakeActorFactory());
  if (!job.ok()) return job.status();
  if (absl::Status status = (*job)->Run(); !status.ok()) return status;
  PipelineRun run;
  run.makespan_milliseconds = (*job)->makespan_nanoseconds() / 1e6;
  run.summaries = (*job)->Summaries();
  for (const ActorSummary& summary : run.summaries) {
    if (summary.acts != kPieces) {
      return absl::InternalError(
          absl::StrCat(summary.name, " acted ", summary.acts, " times, not ", kPieces));
    }
  }
  return run;
}

void PrintSummaries(const std::vector<ActorSummary>& summaries) {
  std::printf("  %-8s %-20s %5s %9s %12s %13s %12s\n", "actor", "stream", "acts", "busy_ms",
              "blocked_in_ms", "blocked_out_ms", "wait_thr_ms");
  for (const ActorSummary& summary : summaries) {
    std::printf("  %-8s %-20s %5lld %9.3f %12.3f %13.3f %12.3f\n", summary.name.c_str(),
                summary.stream.c_str(), static_cast<long long>(summary.acts),
                summary.busy_nanoseconds / 1e6, summary.blocked_on_input_nanoseconds / 1e6,
                summary.blocked_on_output_nanoseconds / 1e6,
                summary.waiting_for_thread_nanoseconds / 1e6);
  }
}

int Main() {
  KernelRegistry kernels;
  ExitIfError(RegisterCpuKernels(&kernels), "registering the CPU kernels");
  ExitIfError(RegisterNoopKernel(&kernels), "registering bench_noop");
  const double ideal_milliseconds = (kPieces + kStages - 1) * kStageMicroseconds / 1e3;
  std::printf(
      "pipeline: P=%d stages (sleep %lld us each, stage k on cpu:k), M=%d pieces, %d "
      "slots per boundary; ideal (M+P-1) x t = %.1f ms\n",
      kStages, static_cast<long long>(kStageMicroseconds), kPieces, kSlotsPerBoundary,
      ideal_milliseconds);

  ExitIfError(RunPipeline(kernels).status(), "warm-up run");
  std::vector<PipelineRun> runs;
  std::vector<double> makespans;
  for (int repetition = 0; repetition < kRepetitions; ++repetition) {
    absl::StatusOr<PipelineRun> run = RunPipeline(kernels);
    ExitIfError(run.status(), "pipeline run");
    std::printf("rep %d: makespan %.3f ms (ratio %.3f)\n", repetition, run->makespan_milliseconds,
                run->makespan_milliseconds / ideal_milliseconds);
    makespans.push_back(run->makespan_milliseconds);
    runs.push_back(std::move(*run));
  }
  const double median = Median(makespans);
  // The summaries of the repetition whose makespan is closest to the median.
  const PipelineRun& typical = *std::min_element(
      runs.begin(), runs.end(), [median](const PipelineRun& a, const PipelineRun& b) {
        return std::abs(a.makespan_milliseconds - median) <
               std::abs(b.makespan_milliseconds - median);
      });
  std::printf("\nper actor, repetition with makespan %.3f ms (closest to the median):\n",
              typical.makespan_milliseconds);
  PrintSummaries(typical.summaries);
  // What the stages' acts really took: a 1 ms sleep ends when the OS wakes the thread, later on a
  // busy machine. (M + P - 1) x that is the best this machine allows.
  int64_t stage_busy_nanoseconds = 0;
  int64_t stage_acts = 0;
  for (const ActorSummary& summary : typical.summaries) {
    if (summary.kind != plan::COMPUTE) continue;
    stage_busy_nanoseconds += summary.busy_nanoseconds;
    stage_acts += summary.acts;
  }
  const double mean_act_milliseconds = stage_busy_nanoseconds / 1e6 / stage_acts;
  std::printf("mean stage act %.4f ms (sleep overshoot %.1f us); (M+P-1) x mean act = %.3f ms\n",
              mean_act_milliseconds, (mean_act_milliseconds - kStageMicroseconds / 1e3) * 1e3,
              (kPieces + kStages - 1) * mean_act_milliseconds);
  std::printf("median makespan over %d repetitions: %.3f ms; goal ratio <= %.2f (%s)\n",
              kRepetitions, median, kGoalRatio,
              median / ideal_milliseconds <= kGoalRatio ? "met" : "NOT met");
  PrintResult("pipeline", "makespan_ms", median, "ideal_ms", ideal_milliseconds);
  return 0;
}

}  // namespace
}  // namespace loom::bench

int main(int argc, char** argv) {
  loom::bench::InitLogging(argv[0]);
  return loom::bench::Main();
}
