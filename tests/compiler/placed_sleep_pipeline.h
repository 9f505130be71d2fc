#ifndef LOOM_TESTS_COMPILER_PLACED_SLEEP_PIPELINE_H_
#define LOOM_TESTS_COMPILER_PLACED_SLEEP_PIPELINE_H_

// A sleeping pipeline whose stages are placed by the test (several on one device, as interleaved
// and V-shaped schedules place them), for the schedule tests: stage k multiplies its input by its
// weight and sleeps; what each pass costs is known, and sleeps use no core. And the stash such a
// pipeline holds per device in a run.

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/job_builder.h"
#include "proto/job.pb.h"
#include "proto/plan.pb.h"
#include "runtime/event_record.h"
#include "testing/pipeline_analysis.h"

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

// The task of stage k's matmul weight gradient (x^T dy: stage 0's input has no gradient, so its
// only matmul gradient is this one), which reads the stage's stashed input last.
inline std::string MatmulWeightGradientTask(int k) {
  return absl::StrCat("grad/mm", k, k == 0 ? "/matmul@0" : "/matmul_1@0");
}

// Per device (by index, 0 .. num_devices - 1), the most micro-batches whose matmul input was
// stashed at once over the device's stages, in a run of a sleeping pipeline of `num_stages` stages
// whose stage k multiplies by op "mm<k>" on one device: from the start of "mm<k>@0"'s act to the
// end of its weight gradient's. This is the stash the schedules' slots bound.
inline std::vector<int64_t> PeakStashedPerDevice(const plan::Plan& plan,
                                                 const std::vector<ActEvent>& events,
                                                 int num_stages, int num_devices) {
  std::vector<int> change_of_task(plan.tasks_size(), 0);  // +1, -1 or 0, by task index
  for (int k = 0; k < num_stages; ++k) {
    for (int i = 0; i < plan.tasks_size(); ++i) {
      if (plan.tasks(i).name() == absl::StrCat("mm", k, "@0")) change_of_task[i] = +1;
      if (plan.tasks(i).name() == MatmulWeightGradientTask(k)) change_of_task[i] = -1;
    }
  }
  std::vector<std::vector<std::pair<int64_t, int>>> changes(num_devices);
  for (const ActEvent& event : events) {
    const int change = change_of_task[event.task_index];
    if (change == 0) continue;
    const int device = plan.tasks(static_cast<int>(event.task_index)).stream().device().index();
    changes[device].emplace_back(change > 0 ? event.start_nanoseconds : event.end_nanoseconds,
                                 change);
  }
  std::vector<int64_t> peaks;
  for (auto& device_changes : changes) peaks.push_back(PeakHeld(std::move(device_changes)));
  return peaks;
}

}  // namespace loom::compiler::testing

#endif  // LOOM_TESTS_COMPILER_PLACED_SLEEP_PIPELINE_H_
