// Jobs split over nodes, each node a NodeJob with its own UCX network in this process: the
// fetched losses equal the one-node run's bit for bit, and every device allocates what the
// compiler estimated. The connect phase's probes: every peer is
// heard from when all connect; a silent peer and a dead one fail the wait naming them.
#include "daemon/node_job.h"

#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "compiler/memory_plan.h"
#include "core/device_name.h"
#include "core/file_roots.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_kernels.h"
#include "tests/cluster/multi_node_run.h"
#include "tools/loom-gpt/gpt_model.h"

namespace loom::testing {
namespace {

gpt::GptConfig SmallGpt() {
  gpt::GptConfig config;
  config.context = 16;
  config.width = 32;
  config.layers = 2;
  config.heads = 2;
  config.mlp_width = 64;
  config.batch = 12;
  config.steps = 3;
  return config;
}

void ExpectBitIdentical(const Fetched& expected, const Fetched& actual) {
  ASSERT_EQ(expected.size(), actual.size());
  for (const auto& [name, steps] : expected) {
    ASSERT_TRUE(actual.contains(name)) << name;
    const std::vector<HostTensor>& got = actual.at(name);
    ASSERT_EQ(steps.size(), got.size()) << name;
    for (size_t step = 0; step < steps.size(); ++step) {
      EXPECT_EQ(steps[step].shape, got[step].shape) << name << " step " << step;
      EXPECT_EQ(steps[step].bytes, got[step].bytes) << name << " step " << step;
    }
  }
}

struct Layout {
  std::string name;
  int64_t data_parallel, tensor_parallel, pipeline_stages, micro_batches;
  int nodes, devices_per_node;
  // An MoE MLP in block 1 with this many experts over groups of expert_parallel devices.
  int64_t experts = 0, expert_parallel = 1;
  // Activation recomputation (its gates and barriers between the node plans too).
  job::Recompute recompute = job::RECOMPUTE_NONE;
  // ZeRO (stage 3: gathers ordered into the chains and registers of network collectives shared).
  int zero_stage = 0;
};

class NodeJobTest : public ::testing::TestWithParam<Layout> {};

TEST_P(NodeJobTest, LossesEqualTheOneNodeRun) {
  const Layout& layout = GetParam();
  gpt::GptConfig config = SmallGpt();
  config.data_parallel = layout.data_parallel;
  config.tensor_parallel = layout.tensor_parallel;
  config.pipeline_stages = layout.pipeline_stages;
  config.micro_batches = layout.micro_batches;
  config.experts = layout.experts;
  config.moe_layers = {1};
  config.expert_parallel = layout.expert_parallel;
  config.recompute = layout.recompute;
  config.zero_stage = layout.zero_stage;
  absl::StatusOr<job::Job> single = gpt::BuildGptJob(config);
  ASSERT_TRUE(single.ok()) << single.status();
  const int devices = layout.nodes * layout.devices_per_node;
  absl::StatusOr<Fetched> expected = RunOnOneNode(*single, devices);
  ASSERT_TRUE(expected.ok()) << expected.status();

  config.devices_per_node = layout.devices_per_node;
  absl::StatusOr<job::Job> spread = gpt::BuildGptJob(config);
  ASSERT_TRUE(spread.ok()) << spread.status();
  plan::Plan whole;
  absl::StatusOr<std::vector<plan::Plan>> plans =
      CompileForNodes(*spread, layout.nodes, layout.devices_per_node, &whole);
  ASSERT_TRUE(plans.ok()) << plans.status();
  ASSERT_EQ(plans->size(), static_cast<size_t>(layout.nodes));
  // Every device allocated what the compiler estimated when it admitted the job: its registers
  // (the node split's copies included), optimizer states, accumulators and its network
  // collectives' staging buffers; nothing was freed on the way, so that is also its peak but for
  // the fetched copies its sinks keep.
  std::map<std::string, int64_t> allocated_bytes;
  NodeRunOptions run_options;
  run_options.inspect = [&](const JobRuntime& runtime) {
    for (const auto& memory : runtime.device_memories()) {
      allocated_bytes[memory->device_name()] = memory->allocated_bytes();
      EXPECT_EQ(memory->peak_bytes(), memory->used_bytes()) << memory->device_name();
    }
  };
  absl::StatusOr<Fetched> actual = RunNodePlans(*plans, whole, run_options);
  ASSERT_TRUE(actual.ok()) << actual.status();
  ExpectBitIdentical(*expected, *actual);
  std::map<std::string, int64_t> estimated_bytes;
  for (const compiler::DeviceMemoryEstimate& estimate : compiler::EstimateMemory(*plans)) {
    estimated_bytes[DeviceName(estimate.device)] = estimate.total_bytes();
  }
  EXPECT_EQ(allocated_bytes, estimated_bytes);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, NodeJobTest,
    ::testing::Values(
        Layout{"pp2_on_2_nodes", 1, 1, 2, 2, 2, 1},
        Layout{"pp2_one_micro_batch_on_2_nodes", 1, 1, 2, 1, 2, 1},
        Layout{"dp2_pp2_stages_on_2_nodes", 2, 1, 2, 2, 2, 2},
        Layout{"dp3_on_3_nodes", 3, 1, 1, 1, 3, 1}, Layout{"tp2_on_2_nodes", 1, 2, 1, 1, 2, 1},
        Layout{"dp2_tp2_on_2_nodes", 2, 2, 1, 1, 2, 2},
        Layout{"dp2_pp2_across_nodes", 2, 1, 2, 2, 4, 1},
        Layout{"dp2_ep2_on_2_nodes", 2, 1, 1, 1, 2, 1, 4, 2},
        Layout{"dp4_ep2_on_2_nodes", 4, 1, 1, 1, 2, 2, 4, 2},
        Layout{"pp2_recompute_full_on_2_nodes", 1, 1, 2, 2, 2, 1, 0, 1, job::RECOMPUTE_FULL},
        Layout{"dp2_tp2_recompute_selective_on_2_nodes", 2, 2, 1, 1, 2, 2, 0, 1,
               job::RECOMPUTE_SELECTIVE},
        Layout{"dp2_zero3_on_2_nodes", 2, 1, 1, 1, 2, 1, 0, 1, job::RECOMPUTE_NONE, 3},
        Layout{"dp4_zero3_recompute_full_on_2_nodes", 4, 1, 1, 1, 2, 2, 0, 1, job::RECOMPUTE_FULL,
               3}),
    [](const ::testing::TestParamInfo<Layout>& info) { return info.param.name; });

// Three NodeJobs of a three-stage pipeline, created (networks open) but not connected.
class PeerProbeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(RegisterCpuKernels(&kernels_).ok());
    gpt::GptConfig config = SmallGpt();
    config.layers = 3;
    config.pipeline_stages = 3;
    config.devices_per_node = 1;
    absl::StatusOr<job::Job> job = gpt::BuildGptJob(config);
    ASSERT_TRUE(job.ok()) << job.status();
    plan::Plan whole;
    absl::StatusOr<std::vector<plan::Plan>> plans = CompileForNodes(*job, 3, 1, &whole);
    ASSERT_TRUE(plans.ok()) << plans.status();
    for (const plan::Plan& node_plan : *plans) {
      absl::StatusOr<std::unique_ptr<daemon::NodeJob>> node_job =
          daemon::NodeJob::Create(node_plan, &kernels_, JobOptions{.files = &files_});
      ASSERT_TRUE(node_job.ok()) << node_job.status();
      addresses_[node_plan.node()] = (*node_job)->address();
      jobs_.push_back(*std::move(node_job));
    }
  }

  // Each node's WaitForPeers, in parallel (as on separate machines).
  std::vector<absl::Status> WaitForPeers(const std::vector<int>& nodes, absl::Duration timeout) {
    std::vector<absl::Status> statuses(nodes.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < nodes.size(); ++i) {
      threads.emplace_back([&, i] { statuses[i] = jobs_[nodes[i]]->WaitForPeers(timeout); });
    }
    for (std::thread& thread : threads) thread.join();
    return statuses;
  }

  KernelRegistry kernels_;
  // The GPT's plans read its token file (declared before the jobs, which use it).
  const FileRoots files_ = FileRoots::Unrestricted();
  std::map<int, std::string> addresses_;
  std::vector<std::unique_ptr<daemon::NodeJob>> jobs_;
};

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Key;

TEST_F(PeerProbeTest, EveryPeerIsHeardFromWhenAllConnect) {
  for (auto& job : jobs_) ASSERT_TRUE(job->Connect(addresses_).ok());
  const absl::Time start = absl::Now();
  for (const absl::Status& status : WaitForPeers({0, 1, 2}, absl::Seconds(20))) {
    EXPECT_TRUE(status.ok()) << status;
  }
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  for (auto& job : jobs_) EXPECT_TRUE(job->unreachable_peers().empty());
}

TEST_F(PeerProbeTest, APeerThatNeverConnectsFailsTheWaitNamingIt) {
  // Node 2 never connects back (as when its traffic to the others is dropped): nodes 0 and 1 reach
  // it, but never hear from it.
  ASSERT_TRUE(jobs_[0]->Connect(addresses_).ok());
  ASSERT_TRUE(jobs_[1]->Connect(addresses_).ok());
  const absl::Time start = absl::Now();
  std::vector<absl::Status> statuses = WaitForPeers({0, 1}, absl::Seconds(1));
  const absl::Duration waited = absl::Now() - start;
  for (int node : {0, 1}) {
    EXPECT_EQ(statuses[node].code(), absl::StatusCode::kUnavailable) << statuses[node];
    EXPECT_THAT(statuses[node].message(),
                HasSubstr(absl::StrCat("node ", node,
                                       " cannot reach node 2: no probe from node 2 "
                                       "within 1s")));
    EXPECT_THAT(jobs_[node]->unreachable_peers(), ElementsAre(Key(2)));
  }
  EXPECT_GE(waited, absl::Seconds(1));
  EXPECT_LT(waited, absl::Seconds(4));
}

TEST_F(PeerProbeTest, ADeadPeerFailsTheWaitWithUcxsReasonBeforeTheTimeout) {
  jobs_[2].reset();  // its network closed: connecting to its address is refused
  ASSERT_TRUE(jobs_[0]->Connect(addresses_).ok());  // connects do not wait
  ASSERT_TRUE(jobs_[1]->Connect(addresses_).ok());
  const absl::Time start = absl::Now();
  std::vector<absl::Status> statuses = WaitForPeers({0, 1}, absl::Seconds(20));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  for (int node : {0, 1}) {
    EXPECT_EQ(statuses[node].code(), absl::StatusCode::kUnavailable) << statuses[node];
    EXPECT_THAT(statuses[node].message(),
                HasSubstr(absl::StrCat("node ", node, " cannot reach node 2: node ", node,
                                       ": the connection to peer 2 failed")));
    EXPECT_THAT(jobs_[node]->unreachable_peers(), ElementsAre(Key(2)));
  }
}

TEST_F(PeerProbeTest, AnAbortEndsTheWaitAtOnce) {
  // Nodes 1 and 2 never connect back; the job is cancelled while node 0 waits for their probes.
  ASSERT_TRUE(jobs_[0]->Connect(addresses_).ok());
  const absl::Time start = absl::Now();
  absl::Status status;
  std::thread waiter([&] { status = jobs_[0]->WaitForPeers(absl::Seconds(30)); });
  absl::SleepFor(absl::Milliseconds(100));
  jobs_[0]->Abort(absl::AbortedError("job 7 was cancelled"));
  waiter.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(status.code(), absl::StatusCode::kAborted) << status;
  EXPECT_THAT(status.message(), HasSubstr("job 7 was cancelled"));
  EXPECT_TRUE(jobs_[0]->unreachable_peers().empty());
  // A later wait ends at once too.
  EXPECT_EQ(jobs_[0]->WaitForPeers(absl::Seconds(30)).code(), absl::StatusCode::kAborted);
}

}  // namespace
}  // namespace loom::testing
