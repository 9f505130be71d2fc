#ifndef LOOM_TESTS_COMPILER_TEST_JOBS_H_
#define LOOM_TESTS_COMPILER_TEST_JOBS_H_

#include <string>

namespace loom::compiler::testing {

// The golden jobs, in text format, on the devices cpu:0..n-1 (placements are filled by the caller
// through `placement`, e.g. R"(devices: ["cpu:0", "cpu:1"])").

// The placement body `devices: ["cpu:0", ..., "cpu:<count - 1>"]`.
std::string CpuDevices(int count);

// Data-parallel MLP: input S(0), weights B.
std::string DataParallelMlp(const std::string& placement);
// Megatron MLP: input B, first weight S(1) (bias S(0)), second weight S(0) (bias B), output B.
std::string MegatronMlp(const std::string& placement);
// A 2-D hierarchy [2, 2]: x (S(0), B), w (B, S(1)) -> y (S(0), S(1)).
std::string TwoDimensionalMatmul();
// Two stages on [cpu:0, cpu:1] and [cpu:2, cpu:3], data parallel in each.
std::string TwoStageMlp();
// A pre-LayerNorm transformer block forward (attention + MLP), tensor parallel over `placement`
// when `tensor_parallel`, else data parallel.
std::string TransformerBlock(const std::string& placement, bool tensor_parallel);
// A training job on `placement`: an MLP regression x [12, 4] -> matmul w1 [4, 16] -> gelu ->
// matmul w2 [16, 2] -> mean squared error against a random target ("loss", fetched), 8 steps,
// data parallel (inputs S(0)), with the optimizer given in text format (e.g. "sgd { ... }").
std::string MlpRegression(const std::string& placement, const std::string& optimizer);

}  // namespace loom::compiler::testing

#endif  // LOOM_TESTS_COMPILER_TEST_JOBS_H_
