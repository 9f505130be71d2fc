// Plans compiled for GPUs: every kernel they name exists for the device it runs on, and token
// batches are read on the GPUs' host CPU devices and copied over. No GPU needed: this checks the
// compiler's output against the kernel registry.
#include <algorithm>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/compiler.h"
#include "compiler/op_definition.h"
#include "core/device_name.h"
#include "core/shared_kernels.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/kernel_registry.h"
#include "node/device_backends.h"
#include "tools/loom-gpt/gpt_model.h"

namespace loom {
namespace {

using gpt::BuildGptJob;
using gpt::GptConfig;
using gpt::GptDeviceCount;

compiler::DeviceSet Gpus(int count) {
  compiler::DeviceSet set;
  for (int index = 0; index < count; ++index) {
    plan::Device& device = set.devices.emplace_back();
    device.set_type(plan::CUDA);
    device.set_index(index);
  }
  return set;
}

struct PlanCase {
  std::string name;
  GptConfig config;
};

void PrintTo(const PlanCase& plan_case, std::ostream* out) { *out << plan_case.name; }

std::vector<PlanCase> Cases() {
  GptConfig base;
  base.device_type = "cuda";
  base.batch = 8;
  base.steps = 2;
  std::vector<PlanCase> cases;
  {
    PlanCase& c = cases.emplace_back(PlanCase{"dp2", base});
    c.config.data_parallel = 2;
  }
  {
    PlanCase& c = cases.emplace_back(PlanCase{"tp2", base});
    c.config.tensor_parallel = 2;
  }
  {
    PlanCase& c = cases.emplace_back(PlanCase{"pp2_dp2_m2_clipped", base});
    c.config.pipeline_stages = 2;
    c.config.data_parallel = 2;
    c.config.micro_batches = 2;
    c.config.max_grad_norm = 1.0;
  }
  {
    PlanCase& c = cases.emplace_back(PlanCase{"moe_dp2_ep2", base});
    c.config.experts = 4;
    c.config.data_parallel = 2;
    c.config.expert_parallel = 2;
  }
  return cases;
}

absl::StatusOr<compiler::CompileResult> CompileGpt(const GptConfig& config,
                                                   const std::string& initial_state) {
  absl::StatusOr<job::Job> job = BuildGptJob(config);
  if (!job.ok()) return job.status();
  if (!initial_state.empty()) job->mutable_initial_state()->set_path(initial_state);
  compiler::OpRegistry ops;
  if (absl::Status status = compiler::RegisterStandardOps(&ops); !status.ok()) return status;
  return compiler::Compile(*job, ops, Gpus(static_cast<int>(GptDeviceCount(config))));
}

class CudaPlansTest : public ::testing::TestWithParam<PlanCase> {};

TEST_P(CudaPlansTest, EveryKernelExistsForItsDevice) {
  if (!HasCudaBackend()) GTEST_SKIP() << "this build has no CUDA backend";
  KernelRegistry kernels;
  ASSERT_TRUE(RegisterAllKernels(&kernels).ok());
  for (const std::string& initial_state :
       {std::string(), std::string("/nonexistent.safetensors")}) {
    absl::StatusOr<compiler::CompileResult> result = CompileGpt(GetParam().config, initial_state);
    ASSERT_TRUE(result.ok()) << result.status();
    std::set<std::string> missing;
    for (const plan::Task& task : result->plan.tasks()) {
      const plan::DeviceType type = task.stream().device().type();
      std::vector<const plan::KernelConf*> confs = {&KernelOf(result->plan, task),
                                                    &InitializerOf(result->plan, task)};
      for (int state = 0; state < StateInitializerCount(task); ++state) {
        confs.push_back(&StateInitializerOf(result->plan, task, state));
      }
      for (const plan::KernelConf* conf : confs) {
        if (conf->op_type().empty() || kernels.Contains(conf->op_type(), type)) continue;
        missing.insert(absl::StrCat(conf->op_type(), " on ", DeviceTypeName(type)));
      }
      EXPECT_NE(task.kind(), plan::SEND) << task.name();
      EXPECT_NE(task.kind(), plan::RECEIVE) << task.name();
    }
    EXPECT_THAT(missing, ::testing::IsEmpty()) << "initial state '" << initial_state << "'";
  }
}

TEST_P(CudaPlansTest, TokenBatchesAreReadOnTheHostAndCopiedToTheGpu) {
  absl::StatusOr<compiler::CompileResult> result = CompileGpt(GetParam().config, "");
  ASSERT_TRUE(result.ok()) << result.status();
  int sources = 0;
  int copies_to_gpu = 0;
  for (const plan::Task& task : result->plan.tasks()) {
    const plan::Device& device = task.stream().device();
    if (task.kind() == plan::SOURCE) {
      ++sources;
      EXPECT_EQ(KernelOf(result->plan, task).op_type(), "token_dataset") << task.name();
      EXPECT_EQ(device.type(), plan::CPU) << task.name();
    } else if (device.type() == plan::CPU) {
      // Only the host side of the input: unpacking a step's batch into micro-batches.
      EXPECT_EQ(task.kind(), plan::UNPACK) << task.name();
    }
    if (task.kind() == plan::COPY && device.type() == plan::CUDA) ++copies_to_gpu;
  }
  EXPECT_GT(sources, 0);
  EXPECT_GE(copies_to_gpu, sources);
  // Every device a task uses is described (with its budget), and every host device is the host
  // of a GPU of the plan: the same node and index.
  std::set<std::string> described;
  for (const plan::DeviceDesc& desc : result->plan.devices()) {
    described.insert(DeviceName(desc.device()));
  }
  for (const plan::Task& task : result->plan.tasks()) {
    EXPECT_TRUE(described.contains(DeviceName(task.stream().device()))) << task.name();
  }
  EXPECT_GT(
      std::count_if(result->plan.devices().begin(), result->plan.devices().end(),
                    [](const plan::DeviceDesc& desc) { return desc.device().type() == plan::CPU; }),
      0);
  std::set<std::string> gpus;
  for (const plan::DeviceDesc& desc : result->plan.devices()) {
    if (desc.device().type() == plan::CUDA) gpus.insert(absl::StrCat(desc.device().index()));
  }
  for (const plan::DeviceDesc& desc : result->plan.devices()) {
    if (desc.device().type() == plan::CPU) {
      EXPECT_TRUE(gpus.contains(absl::StrCat(desc.device().index()))) << DeviceName(desc.device());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Gpt, CudaPlansTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<PlanCase>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace loom
