#include "bench/common/sleep_pipeline.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "bench/common/bench_util.h"
#include "client/job_builder.h"
#include "node/local_run.h"
#include "testing/pipeline_analysis.h"
#include "testing/pipeline_svg.h"

namespace loom::bench {

job::Job SleepPipelineJob(const SleepPipeline& pipeline, int micro_batches,
                          job::PipelineSchedule schedule) {
  JobBuilder builder("sleep_pipeline");
  const int d = pipeline.data_parallel;
  const int per_stage = pipeline.DevicesPerStage();
  auto stage_devices = [per_stage](int s) {
    std::vector<std::string> devices;
    for (int i = s * per_stage; i < (s + 1) * per_stage; ++i) {
      devices.push_back(absl::StrCat("cpu:", i));
    }
    return devices;
  };
  std::vector<std::string> all;
  for (int i = 0; i < pipeline.stages * per_stage; ++i) all.push_back(absl::StrCat("cpu:", i));
  builder.SetPlacement(all);
  const int v = pipeline.virtual_stages;
  const int stages = pipeline.stages * v;
  // The device group of stage s.
  auto group = [&](int s) {
    if (schedule == job::ZERO_BUBBLE_V) return s < pipeline.stages ? s : stages - 1 - s;
    return s % pipeline.stages;
  };
  for (int s = 0; s < stages; ++s) builder.AddStagePlacement(stage_devices(group(s)));
  job::Input source;
  source.mutable_random_normal()->set_std(1.0);
  source.mutable_random_normal()->set_seed(1);
  const std::vector<std::string> split =
      d > 1 ? std::vector<std::string>{"S(0)"} : std::vector<std::string>{};
  // Data parallelism replicates the weights; tensor parallelism splits them by columns.
  const std::vector<std::string> weight_sbp = d > 1 ? std::vector<std::string>{"B"}
                                              : pipeline.tensor_parallel > 1
                                                  ? std::vector<std::string>{"S(1)"}
                                                  : std::vector<std::string>{};
  std::string activation =
      builder.Input("x", {2 * micro_batches * d, 8}, source, split, stage_devices(0));
  for (int s = 0; s < stages; ++s) {
    job::Initializer initializer;
    initializer.mutable_normal()->set_std(0.3);
    initializer.mutable_normal()->set_seed(10 + s);
    JobBuilder::OpOptions on_stage;
    on_stage.stage = s;
    std::string weight = builder.Variable(absl::StrCat("w", s), {8, 8}, initializer, weight_sbp,
                                          stage_devices(group(s)));
    if (pipeline.weight_microseconds > 0) {
      weight =
          builder.Op("sleep", absl::StrCat("weight", s), {weight},
                     {{"microseconds", IntAttribute(0)},
                      {"backward_microseconds", IntAttribute(pipeline.weight_microseconds / v)}},
                     on_stage);
    }
    activation = builder.Matmul(absl::StrCat("mm", s), activation, weight, false, false, on_stage);
    activation =
        builder.Op("sleep", absl::StrCat("slow", s), {activation},
                   {{"microseconds", IntAttribute(pipeline.forward_microseconds / v)},
                    {"backward_microseconds", IntAttribute(pipeline.input_microseconds / v)}},
                   on_stage);
  }
  JobBuilder::OpOptions last;
  last.stage = stages - 1;
  builder.Op("reduce_mean", "loss", {activation}, {}, last);
  job::Job job = builder.Build();
  job.set_loss("loss");
  job.mutable_optimizer()->mutable_sgd()->set_learning_rate(0.01);
  job.set_num_micro_batches(micro_batches);
  job.set_pipeline_schedule(schedule);
  job.set_num_steps(1);
  if (pipeline.zero_stage != 0) job.set_zero_stage(pipeline.zero_stage);
  return job;
}

PipelineRun RunPipeline(const plan::Plan& plan, const KernelRegistry& kernels,
                        const SleepPipeline& pipeline, job::PipelineSchedule schedule,
                        const std::string& svg_title) {
  const int stages = pipeline.stages;
  const int per_stage = pipeline.DevicesPerStage();
  absl::StatusOr<LocalRunResult> run = RunPlanLocally(plan, kernels, JobOptions{});
  ExitIfError(run.status(), "running the pipeline job");
  // Each device is analyzed as a stage of its own (its ranks hold their halves of a micro-batch
  // at different times); a stage's peak is its devices' largest.
  const std::vector<PipelineRole> roles =
      PipelineRolesByDevice(plan, schedule, pipeline.virtual_stages);
  const std::vector<StageSchedule> devices =
      AnalyzePipeline(run->runtime->events(), roles, stages * per_stage);
  PipelineRun result;
  result.idle_fraction = IdleFraction(devices);
  result.span_milliseconds = static_cast<double>(SpanNanoseconds(devices)) / 1e6;
  for (int s = 0; s < stages; ++s) {
    int64_t peak = 0;
    for (int d = 0; d < per_stage; ++d) {
      peak = std::max(peak, devices[s * per_stage + d].peak_in_flight);
    }
    result.peaks.push_back(peak);
    result.orders.push_back(devices[s * per_stage].order);
  }
  if (!svg_title.empty()) {
    result.svg = PipelineSvg(run->runtime->events(), roles, stages * per_stage, svg_title);
  }
  return result;
}

}  // namespace loom::bench
