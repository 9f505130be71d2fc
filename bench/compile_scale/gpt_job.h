#ifndef LOOM_BENCH_COMPILE_SCALE_GPT_JOB_H_
#define LOOM_BENCH_COMPILE_SCALE_GPT_JOB_H_

#include <cstdint>

#include "proto/job.pb.h"

namespace loom::bench {

struct GptShape {
  int layers = 96;
  int64_t batch = 64;
  int64_t sequence = 128;
  int64_t width = 1024;
  int64_t heads = 16;
};

// A GPT-like forward graph (pre-LayerNorm blocks: attention with heads split by tensor
// parallelism, MLP, residuals; 26 ops a layer) laid out as data x tensor x pipeline parallel:
// stage s of `pipeline` runs layers [s*L/P, (s+1)*L/P) on a [data, tensor] hierarchy of CPU
// devices spread over nodes of `devices_per_node`.
job::Job MakeGptJob(const GptShape& shape, int data, int tensor, int pipeline,
                    int devices_per_node);

}  // namespace loom::bench

#endif  // LOOM_BENCH_COMPILE_SCALE_GPT_JOB_H_
