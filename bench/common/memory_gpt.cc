#include "bench/common/memory_gpt.h"

namespace loom::bench {

gpt::GptConfig MemoryGpt(int64_t batch, int64_t steps) {
  gpt::GptConfig config;
  config.vocab = 8192;
  config.context = 512;
  config.width = 512;
  config.layers = 8;
  config.heads = 8;
  config.mlp_width = 2048;
  config.batch = batch;
  config.steps = steps;
  return config;
}

int64_t ParameterCount(const gpt::GptConfig& config) {
  int64_t count = 0;
  for (const gpt::GptParameter& parameter : gpt::GptParameters(config)) {
    int64_t elements = 1;
    for (int64_t extent : parameter.shape) elements *= extent;
    count += elements;
  }
  return count;
}

}  // namespace loom::bench
