// bench_schedules: pipeline schedules as they emerge from slots and priorities, against their
// published idle fractions.
//
// A training job of P = 4 stages on cpu:0..3 compiled by Loom's compiler
// (bench/common/sleep_pipeline.h): stage s reads its weight through a sleep of 2 ms in its
// backward (the weight gradient "W"), multiplies its input by it, and sleeps 2 ms forward ("F")
// and 2 ms in its input's backward (the input gradient "B"); sleeping stages use no
// core, so four fit on two. One step of M micro-batches, M in {8, 16, 32}, per schedule:
//  - ONE_F_ONE_B, GPIPE: (P - 1)(F + B + W) of idle time per stage, an idle fraction of
//    (P - 1) / (M + P - 1);
//  - ZERO_BUBBLE (ZB-H1, Qi et al. 2024): (P - 1)(F + B - W), an idle fraction of
//    (P - 1)(F + B - W) / (M (F + B + W) + (P - 1)(F + B - W));
//  - INTERLEAVED with V = 2 stages per device (8 stages, each sleeping half the times): 1F1B's
//    idle time divided by V (Narayanan et al. 2021);
//  - ZERO_BUBBLE_H2 (ZB-H2): its paper's (P - 1)(F + B - 2W) is zero when F = B = W; the line
//    takes the warm-up no schedule avoids, the last stage's wait for P - 1 forwards: (P - 1) F;
//  - ZERO_BUBBLE_V (ZB-V, 8 stages V-shaped, each sleeping half the times): no bubble but the
//    warm-up no schedule avoids, the last device waiting for P - 1 forwards of half a stage:
//    (P - 1) F / 2 (ZB-V's paper counts its bubble as zero when F = B = W).
// Measured from the runtime's event record (testing/pipeline_analysis.h): over the step's span,
// the mean over stages of 1 - busy / span. Each (schedule, M) runs kRepetitions times; medians.
// One RESULT line per schedule (its M furthest above its formula), and zero-bubble-vs-1f1b: the
// step span of ZERO_BUBBLE over ONE_F_ONE_B's at M = 8 (the formulas give 54 / 66 = 0.82).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "bench/common/bench_util.h"
#include "bench/common/sleep_pipeline.h"
#include "compiler/compiler.h"
#include "glog/logging.h"
#include "kernels/cpu/cpu_kernels.h"

namespace loom::bench {
namespace {

constexpr int kStages = 4;
constexpr SleepPipeline kPipeline{.stages = kStages,
                                  .forward_microseconds = 2000,
                                  .input_microseconds = 2000,
                                  .weight_microseconds = 2000};
constexpr int kRepetitions = 5;
constexpr double kGoalRatio = 1.05;
constexpr double kGoalZeroBubbleSpeedup = 0.9;

struct Schedule {
  const char* name;  // in the RESULT line
  job::PipelineSchedule schedule;
  int virtual_stages = 1;
};

constexpr Schedule kSchedules[] = {
    {"1f1b", job::ONE_F_ONE_B},           {"gpipe", job::GPIPE},
    {"zb-h1", job::ZERO_BUBBLE},          {"zb-h2", job::ZERO_BUBBLE_H2},
    {"interleaved", job::INTERLEAVED, 2}, {"zb-v", job::ZERO_BUBBLE_V, 2}};

// The published idle fraction of `schedule` with equal F, B and W.
double FormulaIdleFraction(const Schedule& schedule, int m) {
  const double f = kPipeline.forward_microseconds;
  const double b = kPipeline.input_microseconds;
  const double w = kPipeline.weight_microseconds;
  double bubble = (kStages - 1) * (f + b + w) / schedule.virtual_stages;
  if (schedule.schedule == job::ZERO_BUBBLE) bubble = (kStages - 1) * (f + b - w);
  if (schedule.schedule == job::ZERO_BUBBLE_H2) bubble = (kStages - 1) * f;
  if (schedule.schedule == job::ZERO_BUBBLE_V) bubble = (kStages - 1) * f / 2;
  return bubble / (m * (f + b + w) + bubble);
}

void WriteFileOrExit(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.close();
  if (!out) ExitIfError(absl::UnavailableError(absl::StrCat("cannot write ", path)), "--svg");
}

// --svg=DIR: also writes DIR/schedule-<name>.svg, the first run of M = 8 of each schedule.
int Main(const std::string& svg_directory) {
  KernelRegistry kernels;
  ExitIfError(RegisterCpuKernels(&kernels), "registering the CPU kernels");
  compiler::OpRegistry ops;
  ExitIfError(compiler::RegisterStandardOps(&ops), "registering the ops");
  std::printf(
      "schedules: %d stages on cpu:0..%d, sleeps F %lld us, B %lld us, W %lld us, %d runs per "
      "point (medians)\n",
      kStages, kStages - 1, static_cast<long long>(kPipeline.forward_microseconds),
      static_cast<long long>(kPipeline.input_microseconds),
      static_cast<long long>(kPipeline.weight_microseconds), kRepetitions);
  std::printf("%-11s %4s  %8s  %8s  %6s  %9s  %-10s  %s\n", "", "M", "idle", "formula", "ratio",
              "span ms", "peak", "runs (idle)");
  std::map<std::string, double> span_at_8;
  for (const Schedule& schedule : kSchedules) {
    double worst_ratio = 0;
    double worst_idle = 0;
    double worst_formula = 0;
    int worst_m = 0;
    for (int m : {8, 16, 32}) {
      SleepPipeline pipeline = kPipeline;
      pipeline.virtual_stages = schedule.virtual_stages;
      absl::StatusOr<compiler::CompileResult> compiled =
          compiler::Compile(SleepPipelineJob(pipeline, m, schedule.schedule), ops,
                            compiler::DeviceSet::Cpus(kStages, 1));
      ExitIfError(compiled.status(), "compiling the schedules job");
      std::vector<double> idle;
      std::vector<double> spans;
      std::vector<int64_t> peaks(kStages, 0);
      for (int repetition = 0; repetition < kRepetitions; ++repetition) {
        const bool first_of_8 = m == 8 && repetition == 0;
        const PipelineRun measurement = RunPipeline(
            compiled->plan, kernels, pipeline, schedule.schedule,
            first_of_8 && !svg_directory.empty()
                ? absl::StrCat(schedule.name, ": ", kStages,
                               " devices, M = 8, F = B = W = 2 ms a device",
                               schedule.virtual_stages > 1
                                   ? absl::StrCat(" (", schedule.virtual_stages, " stages each)")
                                   : "",
                               " (bench_schedules)")
                : "");
        if (first_of_8) {
          for (int s = 0; s < kStages; ++s) {
            std::printf("  %s M = 8, device %d: %s\n", schedule.name, s,
                        measurement.orders[s].c_str());
          }
          if (!svg_directory.empty()) {
            WriteFileOrExit(absl::StrCat(svg_directory, "/schedule-", schedule.name, ".svg"),
                            measurement.svg);
          }
        }
        idle.push_back(measurement.idle_fraction);
        spans.push_back(measurement.span_milliseconds);
        for (int s = 0; s < kStages; ++s) peaks[s] = std::max(peaks[s], measurement.peaks[s]);
      }
      const double median = Median(idle);
      const double formula = FormulaIdleFraction(schedule, m);
      std::string peak_text;
      for (int s = 0; s < kStages; ++s) peak_text += absl::StrCat(s == 0 ? "" : " ", peaks[s]);
      std::printf("%-11s %4d  %8.4f  %8.4f  %6.3f  %9.2f  %-10s  %s\n", schedule.name, m, median,
                  formula, median / formula, Median(spans), peak_text.c_str(),
                  JoinValues(idle, 4).c_str());
      if (m == 8) span_at_8[schedule.name] = Median(spans);
      if (median / formula > worst_ratio) {
        worst_ratio = median / formula;
        worst_idle = median;
        worst_formula = formula;
        worst_m = m;
      }
    }
    PrintResult(absl::StrCat("schedules-", schedule.name), absl::StrCat("idle_fraction_M", worst_m),
                worst_idle, "formula", worst_formula);
  }
  const double pass =
      kPipeline.forward_microseconds + kPipeline.input_microseconds + kPipeline.weight_microseconds;
  const double zero_bubble_formula =
      (8 * pass + (kStages - 1) * (pass - 2 * kPipeline.weight_microseconds)) /
      ((8 + kStages - 1) * pass);
  std::printf(
      "goal: idle within %.0f%% of each formula at every M; ZB-H1's step at most %.2f of "
      "1F1B's at M = 8 (formulas: %.3f)\n",
      (kGoalRatio - 1) * 100, kGoalZeroBubbleSpeedup, zero_bubble_formula);
  PrintResult("zero-bubble-vs-1f1b", "zb_h1_span_ms_M8", span_at_8["zb-h1"], "one_f_one_b",
              span_at_8["1f1b"]);
  return 0;
}

}  // namespace
}  // namespace loom::bench

int main(int argc, char** argv) {
  loom::bench::InitLogging(argv[0]);
  std::string svg_directory;
  for (int i = 1; i < argc; ++i) {
    const std::string argument = argv[i];
    if (argument.rfind("--svg=", 0) != 0) {
      std::fprintf(stderr, "usage: %s [--svg=DIR]\n", argv[0]);
      return 2;
    }
    svg_directory = argument.substr(6);
  }
  return loom::bench::Main(svg_directory);
}
