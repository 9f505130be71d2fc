#ifndef LOOM_BENCH_COMMON_GPT_STEP_TIMING_H_
#define LOOM_BENCH_COMMON_GPT_STEP_TIMING_H_

#include <string>
#include <vector>

#include "compiler/logical_graph.h"
#include "kernels/kernel_registry.h"
#include "tools/loom-gpt/gpt_model.h"

namespace loom::bench {

// Runs the GPT of `config` (config.steps steps, one job) in this process on `devices` (empty:
// cpu:0 ... cpu:N-1) and returns the step times after the first `warmup_steps`, in
// milliseconds: the intervals between the ends of successive acts of a loss sink (a step's last
// forward result; step t + 1 reads the weights step t updated, so nothing of step t overlaps it).
// Exits with a message on any error.
std::vector<double> GptStepMilliseconds(const gpt::GptConfig& config, int warmup_steps,
                                        const KernelRegistry& kernels,
                                        const compiler::DeviceSet& devices = {});

// Runs tests/oracle/reference.py's timing mode with `arguments` (e.g. "--model gpt --threads 1
// --steps-timing 20 --warmup 3") and returns its JSON output. Exits with a message on failure.
std::string RunReferenceTiming(const std::string& reference, const std::string& arguments);

// The number after "key": in flat JSON; exits with a message when it is missing.
double JsonNumber(const std::string& json, const std::string& key);

}  // namespace loom::bench

#endif  // LOOM_BENCH_COMMON_GPT_STEP_TIMING_H_
