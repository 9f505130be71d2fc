#ifndef LOOM_BENCH_COMMON_MEMORY_GPT_H_
#define LOOM_BENCH_COMMON_MEMORY_GPT_H_

// The GPT of the memory benchmarks (bench/memory, bench/memory_zero): V=8192 T=512 D=512 L=8 H=8
// F=2048, 33.9M parameters with its untied head.

#include <cstdint>

#include "tools/loom-gpt/gpt_model.h"

namespace loom::bench {

// The model, with `batch` sequences a step and `steps` steps (the rest: loom-gpt's defaults).
gpt::GptConfig MemoryGpt(int64_t batch, int64_t steps);

// How many elements `parameter` has, overflow-checked (exits naming it where the product does
// not fit); how many parameters `config`'s model has.
int64_t ParameterElements(const gpt::GptParameter& parameter);
int64_t ParameterCount(const gpt::GptConfig& config);

}  // namespace loom::bench

#endif  // LOOM_BENCH_COMMON_MEMORY_GPT_H_
