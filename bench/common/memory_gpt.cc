#include "bench/common/memory_gpt.h"

#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "bench/common/bench_util.h"
#include "core/tensor.h"

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

int64_t ParameterElements(const gpt::GptParameter& parameter) {
  const Shape shape(parameter.shape);
  const std::optional<int64_t> elements = shape.CheckedNumElements();
  if (!elements.has_value()) {
    ExitIfError(
        absl::InvalidArgumentError(absl::StrCat("parameter '", parameter.name, "' of shape ",
                                                shape.ToString(), " has no element count")),
        "counting the parameters");
  }
  return *elements;
}

int64_t ParameterCount(const gpt::GptConfig& config) {
  int64_t count = 0;
  for (const gpt::GptParameter& parameter : gpt::GptParameters(config)) {
    count += ParameterElements(parameter);
  }
  return count;
}

}  // namespace loom::bench
