// A GPT pipelined across two nodes' GPUs: the stage boundary crosses the network through the GPUs'
// hosts (compiler/node_split.h). Compiling needs no GPU; the run (two NodeJobs in this process,
// UCX between them, both nodes on the one GPU cuda:0) trains as the same job on one CPU does.
#include <map>
#include <string>
#include <vector>

#include "compiler/compiler.h"
#include "compiler/op_definition.h"
#include "core/device_name.h"
#include "gtest/gtest.h"
#include "node/device_backends.h"
#include "runtime/plan_validation.h"
#include "tests/cluster/multi_node_run.h"
#include "tests/compiler/run_util.h"
#include "tests/cuda/cuda_test_util.h"
#include "tools/loom-gpt/gpt_model.h"

namespace loom {
namespace {

using gpt::GptConfig;

GptConfig PipelineAcrossNodes() {
  GptConfig config;
  config.device_type = "cuda";
  config.devices_per_node = 1;
  config.pipeline_stages = 2;
  config.micro_batches = 2;
  config.batch = 4;
  config.steps = 4;
  return config;
}

// cuda:0 of nodes 0 and 1.
compiler::DeviceSet OneGpuPerNode() {
  compiler::DeviceSet set;
  for (int node : {0, 1}) {
    plan::Device& device = set.devices.emplace_back();
    device.set_node(node);
    device.set_type(plan::CUDA);
  }
  return set;
}

absl::StatusOr<compiler::CompileResult> Compile(const GptConfig& config,
                                                const compiler::DeviceSet& devices) {
  absl::StatusOr<job::Job> job = gpt::BuildGptJob(config);
  if (!job.ok()) return job.status();
  compiler::OpRegistry ops;
  if (absl::Status status = compiler::RegisterStandardOps(&ops); !status.ok()) return status;
  return compiler::Compile(*job, ops, devices);
}

TEST(CudaNodesTest, AStageBoundaryCrossesNodesThroughTheHosts) {
  absl::StatusOr<compiler::CompileResult> compiled =
      Compile(PipelineAcrossNodes(), OneGpuPerNode());
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  ASSERT_EQ(compiled->node_plans.size(), 2u);
  int sends = 0;
  int receives = 0;
  for (const plan::Plan& node_plan : compiled->node_plans) {
    EXPECT_TRUE(ValidatePlan(node_plan).ok()) << ValidatePlan(node_plan);
    for (const plan::Task& task : node_plan.tasks()) {
      if (task.kind() != plan::SEND && task.kind() != plan::RECEIVE) continue;
      (task.kind() == plan::SEND ? sends : receives) += 1;
      EXPECT_EQ(task.stream().device().type(), plan::CPU)
          << task.name() << " runs on " << DeviceName(task.stream().device());
    }
  }
  // Activations forward, their gradients back.
  EXPECT_GE(sends, 2);
  EXPECT_EQ(sends, receives);
}

TEST(CudaNodesTest, APipelineAcrossNodesTrainsAsOnTheCpu) {
  LOOM_SKIP_WITHOUT_GPU();
  GptConfig config = PipelineAcrossNodes();
  absl::StatusOr<compiler::CompileResult> compiled = Compile(config, OneGpuPerNode());
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  testing::NodeRunOptions run_options;
  run_options.kernels = &cuda_test::Kernels();
  run_options.set_up = [](const plan::Plan& node_plan, JobOptions* options) {
    return SetUpDevices(node_plan, options);
  };
  absl::StatusOr<testing::Fetched> gpu =
      testing::RunNodePlans(compiled->node_plans, compiled->plan, run_options);
  ASSERT_TRUE(gpu.ok()) << gpu.status();

  // The reference: the same job, its stages on cpu:0 and cpu:1 of one process.
  config.device_type = "cpu";
  config.devices_per_node = 0;
  compiler::DeviceSet cpus = compiler::DeviceSet::Cpus(2, /*nodes=*/1);
  absl::StatusOr<compiler::CompileResult> reference = Compile(config, cpus);
  ASSERT_TRUE(reference.ok()) << reference.status();
  absl::StatusOr<testing::Fetched> cpu =
      testing::RunNodePlans(reference->node_plans, reference->plan);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  compiler::testing::ExpectSameFetches(*cpu, *gpu, 1e-4, "gpt_pp2_across_nodes");
}

}  // namespace
}  // namespace loom
