#ifndef LOOM_BENCH_COMMON_SLEEP_PIPELINE_H_
#define LOOM_BENCH_COMMON_SLEEP_PIPELINE_H_

// The sleeping pipeline of the schedule benchmarks (bench/bubble, bench/schedules): a training
// job whose stages cost known times, compiled by Loom's compiler, and what its run shows.

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/kernel_registry.h"
#include "proto/job.pb.h"
#include "proto/plan.pb.h"

namespace loom::bench {

// Stage s of `stages` on cpu:s (with `data_parallel` d > 1: on cpu:s*d .. cpu:s*d+d-1, the
// batch split over them, Job.zero_stage `zero_stage`): a tiny matmul of its input by its own
// weight, then op "sleep" taking `forward_microseconds` forward and `input_microseconds` in the
// backward of its input. With `weight_microseconds` > 0 the stage reads its weight through
// another sleep (nothing forward, that long in its backward: a weight gradient apart from the
// input gradient). Sleeping stages use no core, so four fit on two. One step of
// `micro_batches`, SGD, a mean as the loss. With `virtual_stages` v > 1 there are stages * v
// stages, each sleeping 1 / v of the times, on the device groups as the schedule places them
// (job.INTERLEAVED: stage k on group k % stages; job.ZERO_BUBBLE_V, v = 2: V-shaped).
struct SleepPipeline {
  int stages = 4;
  int virtual_stages = 1;
  int64_t forward_microseconds = 1000;
  int64_t input_microseconds = 2000;
  int64_t weight_microseconds = 0;
  int data_parallel = 1;
  int zero_stage = 0;
  // > 1 (with data_parallel 1): stage s on cpu:s*t .. cpu:s*t+t-1, its weight split by columns
  // (the next stage gathers the activation, the backward sums the input's gradient: a collective
  // of each pass per micro-batch).
  int tensor_parallel = 1;

  int DevicesPerStage() const { return data_parallel * tensor_parallel; }
};

job::Job SleepPipelineJob(const SleepPipeline& pipeline, int micro_batches,
                          job::PipelineSchedule schedule);

// One run of a compiled sleeping pipeline, from the runtime's event record
// (testing/pipeline_analysis.h).
struct PipelineRun {
  double idle_fraction = 0;         // over the step's span, the mean over stages
  double span_milliseconds = 0;     // first act of any stage to the last act of any stage
  std::vector<int64_t> peaks;       // per stage: micro-batches held at once
  std::vector<std::string> orders;  // per stage: "FFBFB...", as StageSchedule::order
  std::string svg;                  // the acts as a picture (testing/pipeline_svg.h), if asked
};

// Runs `plan`, compiled from SleepPipelineJob(pipeline, ..., schedule), in this process; exits the
// process on an error. A non-empty `svg_title` asks for the picture. Group s runs on the
// DevicesPerStage() devices from cpu:s*DevicesPerStage(): the idle fraction is the mean over
// devices, a group's peak its devices' largest (counting the micro-batches of all its stages), its
// order its first's.
PipelineRun RunPipeline(const plan::Plan& plan, const KernelRegistry& kernels,
                        const SleepPipeline& pipeline, job::PipelineSchedule schedule,
                        const std::string& svg_title = "");

}  // namespace loom::bench

#endif  // LOOM_BENCH_COMMON_SLEEP_PIPELINE_H_
