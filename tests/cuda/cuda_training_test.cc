// Training on a GPU: the GPT and the MoE GPT compiled for cuda:0 train as the same job on cpu:0
// does, step for step (float32: cuBLAS without TF32, so only summation orders differ).
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/compiler.h"
#include "compiler/op_definition.h"
#include "gtest/gtest.h"
#include "node/device_backends.h"
#include "node/local_run.h"
#include "tests/compiler/run_util.h"
#include "tests/cuda/cuda_test_util.h"
#include "tools/loom-gpt/gpt_model.h"

namespace loom {
namespace {

using gpt::GptConfig;

using Fetched = std::map<std::string, std::vector<HostTensor>>;

compiler::DeviceSet OneDevice(plan::DeviceType type) {
  compiler::DeviceSet set;
  plan::Device& device = set.devices.emplace_back();
  device.set_type(type);
  return set;
}

absl::StatusOr<Fetched> Train(GptConfig config, plan::DeviceType type,
                              const std::string& initial_state) {
  config.device_type = type == plan::CUDA ? "cuda" : "cpu";
  absl::StatusOr<job::Job> job = gpt::BuildGptJob(config);
  if (!job.ok()) return job.status();
  if (!initial_state.empty()) job->mutable_initial_state()->set_path(initial_state);
  compiler::OpRegistry ops;
  if (absl::Status status = compiler::RegisterStandardOps(&ops); !status.ok()) return status;
  absl::StatusOr<compiler::CompileResult> compiled = compiler::Compile(*job, ops, OneDevice(type));
  if (!compiled.ok()) return compiled.status();
  KernelRegistry kernels;
  if (absl::Status status = RegisterAllKernels(&kernels); !status.ok()) return status;
  JobOptions options;
  options.stall_timeout = absl::Seconds(60);
  if (absl::Status status = SetUpDevices(compiled->plan, &options); !status.ok()) return status;
  absl::StatusOr<LocalRunResult> run = RunPlanLocally(compiled->plan, kernels, options);
  if (!run.ok()) return run.status();
  return std::move(run->fetched);
}

struct TrainingCase {
  std::string name;
  GptConfig config;
  bool from_checkpoint = false;
};

void PrintTo(const TrainingCase& training_case, std::ostream* out) { *out << training_case.name; }

std::vector<TrainingCase> Cases() {
  GptConfig base;
  base.batch = 4;
  base.steps = 5;
  std::vector<TrainingCase> cases;
  cases.push_back({"gpt", base});
  cases.push_back({"gpt_from_checkpoint", base, /*from_checkpoint=*/true});
  {
    TrainingCase& c = cases.emplace_back(TrainingCase{"gpt_two_micro_batches_clipped", base});
    c.config.micro_batches = 2;
    c.config.max_grad_norm = 0.5;
  }
  {
    TrainingCase& c = cases.emplace_back(TrainingCase{"moe_gpt", base});
    c.config.experts = 4;
  }
  {
    // Activation offload: stashes to pinned host memory on the copy-out stream, back on copy-in.
    TrainingCase& c = cases.emplace_back(TrainingCase{"gpt_offloaded_two_micro_batches", base});
    c.config.micro_batches = 2;
    c.config.offload_activations = job::OFFLOAD_ALL;
  }
  return cases;
}

class CudaTrainingTest : public ::testing::TestWithParam<TrainingCase> {};

TEST_P(CudaTrainingTest, LossesMatchTheCpuStepForStep) {
  LOOM_SKIP_WITHOUT_GPU();
  const TrainingCase& training_case = GetParam();
  std::string initial_state;
  if (training_case.from_checkpoint) {
    initial_state = (std::filesystem::path(::testing::TempDir()) /
                     absl::StrCat("cuda_training_", training_case.name, ".safetensors"))
                        .string();
    ASSERT_TRUE(gpt::WriteGptInitialWeights(training_case.config, initial_state).ok());
  }
  absl::StatusOr<Fetched> cpu = Train(training_case.config, plan::CPU, initial_state);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  absl::StatusOr<Fetched> gpu = Train(training_case.config, plan::CUDA, initial_state);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  compiler::testing::ExpectSameFetches(*cpu, *gpu, 1e-4, training_case.name);
}

INSTANTIATE_TEST_SUITE_P(Gpt, CudaTrainingTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<TrainingCase>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace loom
