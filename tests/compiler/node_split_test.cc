// The node split (compiler/node_split.h): a register read on another node moves with a SEND /
// RECEIVE pair, and a GPU's register goes through its host's memory, the only memory the network
// moves. The staged plans run on simulated GPUs (host memory behind an asynchronous stream) over
// the in-memory network, which refuses any buffer of a GPU.
#include "compiler/node_split.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "core/device_name.h"
#include "device/memory_resource.h"
#include "device/stream_context.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/plan_validation.h"
#include "tests/runtime/node_runtimes.h"
#include "tests/runtime/runtime_test_util.h"
#include "tests/runtime/test_kernels.h"

namespace loom::compiler {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;

plan::Device MakeDevice(int node, plan::DeviceType type, int index = 0) {
  plan::Device device;
  device.set_node(node);
  device.set_type(type);
  device.set_index(index);
  return device;
}

// A whole-job plan: `source` on node 0 makes x, `plus` on node 1 reads x and makes y, `sink` on
// node 0 reads y; each task on device 0 of the given type on its node (budget 1 MiB per device).
plan::Plan RoundTrip(plan::DeviceType type, int64_t pieces) {
  plan::Plan plan;
  plan.set_job_name("round_trip");
  for (int node : {0, 1}) {
    plan::DeviceDesc* desc = plan.add_devices();
    *desc->mutable_device() = MakeDevice(node, type);
    desc->set_memory_budget_bytes(1 << 20);
  }
  for (const char* name : {"x", "y"}) {
    plan::RegisterDesc* reg = plan.add_registers();
    reg->set_name(name);
    reg->mutable_tensor()->add_shape(256);
    reg->mutable_tensor()->set_data_type(plan::FLOAT32);
    reg->set_num_slots(2);
  }
  auto add_task = [&](const char* name, plan::TaskKind kind, int node, const char* input,
                      const char* output, const char* op_type) {
    plan::Task* task = plan.add_tasks();
    task->set_name(name);
    task->set_kind(kind);
    *task->mutable_stream()->mutable_device() = MakeDevice(node, type);
    task->mutable_stream()->set_kind(plan::STREAM_COMPUTE);
    if (*input != '\0') task->add_inputs(input);
    if (*output != '\0') task->add_outputs(output);
    if (*op_type != '\0') task->mutable_kernel()->set_op_type(op_type);
    return task;
  };
  add_task("source", plan::SOURCE, 0, "", "x", "test_piece")->set_num_pieces(pieces);
  add_task("plus", plan::COMPUTE, 1, "x", "y", "test_sum_plus_one");
  add_task("sink", plan::SINK, 0, "y", "", "");
  return plan;
}

const plan::Task* FindTask(const plan::Plan& plan, const std::string& name) {
  for (const plan::Task& task : plan.tasks()) {
    if (task.name() == name) return &task;
  }
  return nullptr;
}

std::vector<std::string> TaskNames(const plan::Plan& plan) {
  std::vector<std::string> names;
  for (const plan::Task& task : plan.tasks()) names.push_back(task.name());
  return names;
}

std::vector<std::string> DeviceNames(const plan::Plan& plan) {
  std::vector<std::string> names;
  for (const plan::DeviceDesc& desc : plan.devices()) names.push_back(DeviceName(desc.device()));
  return names;
}

std::string Where(const plan::Task& task) {
  return absl::StrCat(task.stream().device().type() == plan::CPU ? "cpu" : "gpu", "/",
                      task.stream().kind() == plan::STREAM_COPY_IN    ? "copy-in"
                      : task.stream().kind() == plan::STREAM_COPY_OUT ? "copy-out"
                                                                      : "compute");
}

TEST(NodeSplitTest, CpuRegistersCrossNodesWithASendAndAReceive) {
  std::vector<plan::Plan> plans = SplitByNode(RoundTrip(plan::CPU, 4));
  ASSERT_EQ(plans.size(), 2u);
  EXPECT_THAT(TaskNames(plans[0]),
              ElementsAre("source", "sink", "send:x@node1", "receive:y@node0"));
  EXPECT_THAT(TaskNames(plans[1]), ElementsAre("plus", "receive:x@node1", "send:y@node0"));
  EXPECT_THAT(DeviceNames(plans[0]), ElementsAre("node0/cpu:0"));
  EXPECT_THAT(DeviceNames(plans[1]), ElementsAre("node1/cpu:0"));
  EXPECT_EQ(FindTask(plans[0], "sink")->inputs(0), "y@node0");
  for (const plan::Plan& node_plan : plans) {
    EXPECT_TRUE(ValidatePlan(node_plan).ok()) << ValidatePlan(node_plan);
  }
}

TEST(NodeSplitTest, GpuRegistersCrossNodesThroughTheirHosts) {
  std::vector<plan::Plan> plans = SplitByNode(RoundTrip(plan::CUDA, 4));
  ASSERT_EQ(plans.size(), 2u);
  // Node 0: x goes to the host and out; y comes in on the host and goes to the GPU.
  EXPECT_THAT(TaskNames(plans[0]), ElementsAre("source", "sink", "to-host:x", "send:x@node1",
                                               "receive:y@node0", "to-device:y@node0"));
  EXPECT_THAT(TaskNames(plans[1]), ElementsAre("plus", "receive:x@node1", "to-device:x@node1",
                                               "to-host:y", "send:y@node0"));
  const absl::flat_hash_map<std::string, std::string> expected = {
      {"to-host:x", "cpu/copy-out"},      {"send:x@node1", "cpu/copy-out"},
      {"receive:y@node0", "cpu/copy-in"}, {"to-device:y@node0", "gpu/copy-in"},
      {"receive:x@node1", "cpu/copy-in"}, {"to-device:x@node1", "gpu/copy-in"},
      {"to-host:y", "cpu/copy-out"},      {"send:y@node0", "cpu/copy-out"}};
  for (const plan::Plan& node_plan : plans) {
    for (const plan::Task& task : node_plan.tasks()) {
      auto where = expected.find(task.name());
      if (where != expected.end()) {
        EXPECT_EQ(Where(task), where->second) << task.name();
      }
      EXPECT_EQ(task.stream().device().node(), node_plan.node()) << task.name();
      EXPECT_EQ(task.stream().device().index(), 0) << task.name();
    }
  }
  const plan::Task& to_host = *FindTask(plans[0], "to-host:x");
  EXPECT_THAT(to_host.inputs(), ElementsAre("x"));
  EXPECT_THAT(to_host.outputs(), ElementsAre("x@host"));
  EXPECT_THAT(FindTask(plans[0], "send:x@node1")->inputs(), ElementsAre("x@host"));
  EXPECT_THAT(FindTask(plans[1], "receive:x@node1")->outputs(), ElementsAre("x@node1@host"));
  const plan::Task& to_device = *FindTask(plans[1], "to-device:x@node1");
  EXPECT_THAT(to_device.inputs(), ElementsAre("x@node1@host"));
  EXPECT_THAT(to_device.outputs(), ElementsAre("x@node1"));
  EXPECT_THAT(FindTask(plans[1], "plus")->inputs(), ElementsAre("x@node1"));
  // The hosts join the nodes' devices with their GPU's budget.
  EXPECT_THAT(DeviceNames(plans[0]), ElementsAre("node0/cuda:0", "node0/cpu:0"));
  EXPECT_THAT(DeviceNames(plans[1]), ElementsAre("node1/cuda:0", "node1/cpu:0"));
  for (const plan::Plan& node_plan : plans) {
    for (const plan::DeviceDesc& desc : node_plan.devices()) {
      EXPECT_EQ(desc.memory_budget_bytes(), 1 << 20) << DeviceName(desc.device());
    }
    EXPECT_TRUE(ValidatePlan(node_plan).ok()) << ValidatePlan(node_plan);
  }
  // Job-wide task indices stay unique.
  std::vector<uint32_t> indices;
  for (const plan::Plan& node_plan : plans) {
    for (const plan::Task& task : node_plan.tasks()) indices.push_back(task.index());
  }
  std::sort(indices.begin(), indices.end());
  EXPECT_EQ(std::adjacent_find(indices.begin(), indices.end()), indices.end());
}

TEST(NodeSplitTest, OneCopyToTheHostServesEveryReadingNode) {
  plan::Plan plan = RoundTrip(plan::CUDA, 4);
  // A third node reads x too (its plus2 feeds nothing on the way back).
  plan::DeviceDesc* desc = plan.add_devices();
  *desc->mutable_device() = MakeDevice(2, plan::CUDA);
  plan::RegisterDesc* z = plan.add_registers();
  *z = plan.registers(0);
  z->set_name("z");
  plan::Task* plus2 = plan.add_tasks();
  *plus2 = *FindTask(plan, "plus");
  plus2->set_name("plus2");
  plus2->mutable_stream()->mutable_device()->set_node(2);
  plus2->set_outputs(0, "z");
  plan::Task* sink2 = plan.add_tasks();
  *sink2 = *FindTask(plan, "sink");
  sink2->set_name("sink2");
  sink2->mutable_stream()->mutable_device()->set_node(2);
  sink2->set_inputs(0, "z");

  std::vector<plan::Plan> plans = SplitByNode(plan);
  ASSERT_EQ(plans.size(), 3u);
  int copies_to_host = 0;
  for (const plan::Task& task : plans[0].tasks()) {
    if (task.kind() == plan::COPY && task.stream().device().type() == plan::CPU) ++copies_to_host;
  }
  EXPECT_EQ(copies_to_host, 1);
  for (const char* send : {"send:x@node1", "send:x@node2"}) {
    ASSERT_NE(FindTask(plans[0], send), nullptr) << send;
    EXPECT_THAT(FindTask(plans[0], send)->inputs(), ElementsAre("x@host")) << send;
  }
  for (const plan::Plan& node_plan : plans) {
    EXPECT_TRUE(ValidatePlan(node_plan).ok()) << ValidatePlan(node_plan);
  }
}

TEST(NodeSplitTest, CompilerWrittenProducersAndConsumersFollowTheStaging) {
  plan::Plan plan = RoundTrip(plan::CUDA, 4);
  plan.mutable_registers(0)->set_producer("source");
  plan.mutable_registers(0)->add_consumers("plus");
  plan.mutable_registers(1)->set_producer("plus");
  plan.mutable_registers(1)->add_consumers("sink");
  std::vector<plan::Plan> plans = SplitByNode(plan);
  absl::flat_hash_map<std::string, const plan::RegisterDesc*> registers;
  for (const plan::Plan& node_plan : plans) {
    EXPECT_TRUE(ValidatePlan(node_plan).ok()) << ValidatePlan(node_plan);
    for (const plan::RegisterDesc& reg : node_plan.registers()) registers[reg.name()] = &reg;
  }
  ASSERT_TRUE(registers.contains("x") && registers.contains("x@host") &&
              registers.contains("x@node1@host") && registers.contains("x@node1"));
  EXPECT_THAT(registers["x"]->consumers(), ElementsAre("to-host:x"));
  EXPECT_EQ(registers["x@host"]->producer(), "to-host:x");
  EXPECT_THAT(registers["x@host"]->consumers(), ElementsAre("send:x@node1"));
  EXPECT_EQ(registers["x@node1@host"]->producer(), "receive:x@node1");
  EXPECT_THAT(registers["x@node1@host"]->consumers(), ElementsAre("to-device:x@node1"));
  EXPECT_EQ(registers["x@node1"]->producer(), "to-device:x@node1");
  EXPECT_THAT(registers["x@node1"]->consumers(), ElementsAre("plus"));
}

// --- Running the staged plans on simulated GPUs ------------------------------------------------

// A simulated GPU's memory: host memory whose blocks it remembers, so that the network can refuse
// them.
class SimulatedGpuMemory final : public MemoryResource {
 public:
  struct Blocks {
    std::mutex mutex;
    std::vector<std::pair<const char*, int64_t>> live;  // guarded by mutex

    bool Contains(const void* pointer) {
      std::lock_guard<std::mutex> lock(mutex);
      const char* byte = static_cast<const char*>(pointer);
      return std::any_of(live.begin(), live.end(), [byte](const auto& block) {
        return byte >= block.first && byte < block.first + block.second;
      });
    }
  };

  explicit SimulatedGpuMemory(Blocks* blocks) : blocks_(blocks) {}
  absl::StatusOr<void*> Allocate(int64_t bytes) override {
    absl::StatusOr<void*> pointer = host_.Allocate(bytes);
    if (!pointer.ok()) return pointer;
    std::lock_guard<std::mutex> lock(blocks_->mutex);
    blocks_->live.emplace_back(static_cast<const char*>(*pointer), bytes);
    return pointer;
  }
  void Free(void* pointer, int64_t bytes) override {
    {
      std::lock_guard<std::mutex> lock(blocks_->mutex);
      std::erase_if(blocks_->live, [pointer](const auto& block) { return block.first == pointer; });
    }
    host_.Free(pointer, bytes);
  }

 private:
  HostMemoryResource host_;
  Blocks* blocks_;
};

// An asynchronous stream whose work is complete once recorded: the runtime still takes the
// asynchronous path (consumers elsewhere hear of a slot through its completion event).
class SimulatedGpuStream final : public StreamContext {
 public:
  explicit SimulatedGpuStream(std::atomic<int>* recorded) : recorded_(recorded) {}
  bool is_asynchronous() const override { return true; }
  std::unique_ptr<CompletionEvent> RecordCompletion() override {
    recorded_->fetch_add(1);
    return std::make_unique<Done>();
  }
  absl::Status Copy(void* destination, const void* source, int64_t bytes) override {
    std::memcpy(destination, source, static_cast<size_t>(bytes));
    return absl::OkStatus();
  }

 private:
  struct Done final : public CompletionEvent {
    absl::StatusOr<bool> IsComplete() override { return true; }
  };
  std::atomic<int>* recorded_;
};

// The test kernels, for CPUs and for the simulated GPUs.
const KernelRegistry& SimulatedGpuKernels() {
  static const KernelRegistry* registry = [] {
    auto* result = new KernelRegistry();
    loom::testing::RegisterTestKernels(result);
    loom::testing::RegisterTestKernels(result, plan::CUDA);
    return result;
  }();
  return *registry;
}

TEST(NodeSplitTest, StagedGpuRegistersRunAndTheNetworkNeverTouchesGpuMemory) {
  constexpr int kPieces = 50;
  std::vector<plan::Plan> plans = SplitByNode(RoundTrip(plan::CUDA, kPieces));
  SimulatedGpuMemory::Blocks gpu_blocks;
  std::atomic<int> recorded{0};
  JobOptions options;
  options.stall_timeout = absl::Seconds(20);
  options.memory_resource_factory =
      [&gpu_blocks](const plan::Device& device) -> absl::StatusOr<std::unique_ptr<MemoryResource>> {
    if (device.type() == plan::CUDA) return std::make_unique<SimulatedGpuMemory>(&gpu_blocks);
    return nullptr;  // host memory
  };
  options.stream_context_factory =
      [&recorded](const plan::Stream& stream) -> std::unique_ptr<StreamContext> {
    if (stream.device().type() == plan::CUDA)
      return std::make_unique<SimulatedGpuStream>(&recorded);
    return std::make_unique<SynchronousStreamContext>();
  };
  loom::testing::NodeRuntimes nodes(plans, options, &SimulatedGpuKernels());
  ASSERT_TRUE(nodes.created().ok()) << nodes.created();
  nodes.network().SetBufferCheck([&gpu_blocks](const void* buffer) {
    return gpu_blocks.Contains(buffer) ? absl::InvalidArgumentError("a buffer in GPU memory")
                                       : absl::OkStatus();
  });
  ASSERT_TRUE(nodes.Start().ok());
  absl::Status status = nodes.Wait();
  ASSERT_TRUE(status.ok()) << status;
  std::vector<float> expected;
  for (int piece = 0; piece < kPieces; ++piece) expected.push_back(piece + 1.0f);
  EXPECT_THAT(loom::testing::SinkValues(nodes.job(0), "sink"), ElementsAreArray(expected));
  EXPECT_EQ(nodes.network().transfers(), 2 * kPieces);
  EXPECT_GT(recorded.load(), 0);
}

// Without the staging, the runtime refuses a SEND on a GPU's stream (the plan's validation, or the
// runtime's check of what GPU streams run): the test above would fail rather than pass vacuously.
TEST(NodeSplitTest, ASendOnAGpuStreamIsRefusedByTheRuntime) {
  std::vector<plan::Plan> plans = SplitByNode(RoundTrip(plan::CUDA, 2));
  plan::Task& send = *plans[0].mutable_tasks(3);
  ASSERT_EQ(send.name(), "send:x@node1");
  *send.mutable_stream()->mutable_device() = MakeDevice(0, plan::CUDA);
  JobOptions options;
  options.memory_resource_factory =
      [](const plan::Device& device) -> absl::StatusOr<std::unique_ptr<MemoryResource>> {
    if (device.type() == plan::CUDA) return std::make_unique<HostMemoryResource>();
    return nullptr;
  };
  options.stream_context_factory = [](const plan::Stream&) -> std::unique_ptr<StreamContext> {
    return std::make_unique<SynchronousStreamContext>();
  };
  loom::testing::NodeRuntimes nodes(plans, options, &SimulatedGpuKernels());
  EXPECT_FALSE(nodes.created().ok());
  EXPECT_THAT(nodes.created().message(), ::testing::HasSubstr("send:x@node1"));
}

}  // namespace
}  // namespace loom::compiler
