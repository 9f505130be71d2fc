#ifndef LOOM_TESTS_COMPILER_PLACED_SLEEP_PIPELINE_H_
#define LOOM_TESTS_COMPILER_PLACED_SLEEP_PIPELINE_H_

// A sleeping pipeline whose stages are placed by the test (several on one device, as interleaved
// and V-shaped schedules place them), for the schedule tests: stage k multiplies its input by its
// weight and sleeps; what each pass costs is known, and sleeps use no core.

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/job_builder.h"
#include "proto/job.pb.h"

namespace loom::compiler::testing {

struct PlacedSleepPipeline {
  std::vector<std::vector<std::string>> placements;  // stage k's devices
  job::PipelineSchedule schedule = job::ONE_F_ONE_B;
  int micro_batches = 8;
  int forward_us = 0;   // each stage's forward
  int backward_us = 0;  // the backward of its input (B)
  int weight_us = 0;    // > 0: the weight read through a sleep this long in its backward (W)
};

// One training step of `pipeline`: input x [2M, 8] on stage 0's devices, SGD, a mean as the loss.
inline job::Job PlacedSleepPipelineJob(const PlacedSleepPipeline& pipeline) {
  JobBuilder builder("placed_sleep_pipeline");
  std::vector<std::string> all;
  for (const std::vector<std::string>& devices : pipeline.placements) {
    for (const std::string& device : devices) {
      if (std::find(all.begin(), all.end(), device) == all.end()) all.push_back(device);
    }
  }
  builder.SetPlacement(all);
  job::Input source;
  source.mutable_random_normal()->set_std(1.0);
  source.mutable_random_normal()->set_seed(1);
  std::string activation =
      builder.Input("x", {2 * pipeline.micro_batches, 8}, source, {}, pipeline.placements[0]);
  for (size_t k = 0; k < pipeline.placements.size(); ++k) {
    builder.AddStagePlacement(pipeline.placements[k]);
    job::Initializer initializer;
    initializer.mutable_normal()->set_std(0.3);
    initializer.mutable_normal()->set_seed(10 + k);
    JobBuilder::OpOptions on_stage;
    on_stage.stage = static_cast<int>(k);
    std::string weight =
        builder.Variable(absl::StrCat("w", k), {8, 8}, initializer, {}, pipeline.placements[k]);
    if (pipeline.weight_us > 0) {
      weight = builder.Op("sleep", absl::StrCat("weight", k), {weight},
                          {{"microseconds", IntAttribute(0)},
                           {"backward_microseconds", IntAttribute(pipeline.weight_us)}},
                          on_stage);
    }
    activation = builder.Matmul(absl::StrCat("mm", k), activation, weight, false, false, on_stage);
    activation = builder.Op("sleep", absl::StrCat("slow", k), {activation},
                            {{"microseconds", IntAttribute(pipeline.forward_us)},
                             {"backward_microseconds", IntAttribute(pipeline.backward_us)}},
                            on_stage);
  }
  JobBuilder::OpOptions last;
  last.stage = static_cast<int>(pipeline.placements.size()) - 1;
  builder.Op("reduce_mean", "loss", {activation}, {}, last);
  job::Job job = builder.Build();
  job.set_loss("loss");
  job.mutable_optimizer()->mutable_sgd()->set_learning_rate(0.01);
  job.set_num_micro_batches(pipeline.micro_batches);
  job.set_pipeline_schedule(pipeline.schedule);
  job.set_num_steps(1);
  return job;
}

}  // namespace loom::compiler::testing

#endif  // LOOM_TESTS_COMPILER_PLACED_SLEEP_PIPELINE_H_
