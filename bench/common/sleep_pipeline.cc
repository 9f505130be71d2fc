#include "bench/common/sleep_pipeline.h"

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
  std::vector<std::string> all;
  for (int s = 0; s < pipeline.stages; ++s) all.push_back(absl::StrCat("cpu:", s));
  builder.SetPlacement(all);
  for (int s = 0; s < pipeline.stages; ++s) builder.AddStagePlacement({absl::StrCat("cpu:", s)});
  job::Input source;
  source.mutable_random_normal()->set_std(1.0);
  source.mutable_random_normal()->set_seed(1);
  std::string activation = builder.Input("x", {2 * micro_batches, 8}, source, {}, {"cpu:0"});
  for (int s = 0; s < pipeline.stages; ++s) {
    job::Initializer initializer;
    initializer.mutable_normal()->set_std(0.3);
    initializer.mutable_normal()->set_seed(10 + s);
    JobBuilder::OpOptions on_stage;
    on_stage.stage = s;
    std::string weight =
        builder.Variable(absl::StrCat("w", s), {8, 8}, initializer, {}, {absl::StrCat("cpu:", s)});
    if (pipeline.weight_microseconds > 0) {
      weight = builder.Op("sleep", absl::StrCat("weight", s), {weight},
                          {{"microseconds", IntAttribute(0)},
                           {"backward_microseconds", IntAttribute(pipeline.weight_microseconds)}},
                          on_stage);
    }
    activation = builder.Matmul(absl::StrCat("mm", s), activation, weight, false, false, on_stage);
    activation = builder.Op("sleep", absl::StrCat("slow", s), {activation},
                            {{"microseconds", IntAttribute(pipeline.forward_microseconds)},
                             {"backward_microseconds", IntAttribute(pipeline.input_microseconds)}},
                            on_stage);
  }
  JobBuilder::OpOptions last;
  last.stage = pipeline.stages - 1;
  builder.Op("reduce_mean", "loss", {activation}, {}, last);
  job::Job job = builder.Build();
  job.set_loss("loss");
  job.mutable_optimizer()->mutable_sgd()->set_learning_rate(0.01);
  job.set_num_micro_batches(micro_batches);
  job.set_pipeline_schedule(schedule);
  job.set_num_steps(1);
  return job;
}

PipelineRun RunPipeline(const plan::Plan& plan, const KernelRegistry& kernels, int stages,
                        const std::string& svg_title) {
  absl::StatusOr<LocalRunResult> run = RunPlanLocally(plan, kernels, JobOptions{});
  ExitIfError(run.status(), "running the pipeline job");
  const std::vector<PipelineRole> roles = PipelineRolesByDevice(plan);
  const std::vector<StageSchedule> schedules =
      AnalyzePipeline(run->runtime->events(), roles, stages);
  PipelineRun result;
  result.idle_fraction = IdleFraction(schedules);
  result.span_milliseconds = static_cast<double>(SpanNanoseconds(schedules)) / 1e6;
  for (const StageSchedule& stage : schedules) {
    result.peaks.push_back(stage.peak_in_flight);
    result.orders.push_back(stage.order);
  }
  if (!svg_title.empty()) {
    result.svg = PipelineSvg(run->runtime->events(), roles, stages, svg_title);
  }
  return result;
}

}  // namespace loom::bench
