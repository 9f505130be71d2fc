// Checkpoints of finished runs: variables and optimizer states assembled from their ranks.
#include "node/checkpoint_assembly.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "actors/variable_actor.h"
#include "compiler/logical_graph.h"
#include "glog/logging.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/kernel_registry.h"
#include "node/local_run.h"
#include "compiler/compile_for_devices.h"

namespace loom {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

HostTensor FloatTensor(Shape shape, const std::vector<float>& values) {
  HostTensor tensor;
  tensor.data_type = plan::FLOAT32;
  tensor.shape = std::move(shape);
  tensor.bytes.resize(values.size() * sizeof(float));
  std::memcpy(tensor.bytes.data(), values.data(), tensor.bytes.size());
  return tensor;
}

std::vector<float> Floats(const HostTensor& tensor) {
  auto values = tensor.Values<float>();
  return std::vector<float>(values.begin(), values.end());
}

plan::VariableLayout Layout(const std::string& name, std::vector<int64_t> shape,
                            std::vector<int64_t> hierarchy, std::vector<std::string> sbp,
                            std::vector<std::string> state_names) {
  plan::VariableLayout layout;
  layout.set_name(name);
  layout.mutable_logical()->set_data_type(plan::FLOAT32);
  for (int64_t extent : shape) layout.mutable_logical()->add_shape(extent);
  for (int64_t extent : hierarchy) layout.add_hierarchy(extent);
  for (const std::string& axis : sbp) layout.add_sbp(axis);
  for (const std::string& state : state_names) layout.add_state_names(state);
  return layout;
}

TEST(AddVariableToCheckpointTest, SplitWindowsArePlacedAndStatesFollow) {
  // [2, 4] split by columns over 2 ranks; one state.
  plan::VariableLayout layout = Layout("w", {2, 4}, {2}, {"S(1)"}, {"optimizer.exp_avg.w"});
  HostTensor rank0 = FloatTensor({2, 2}, {1, 2, 5, 6});
  HostTensor rank1 = FloatTensor({2, 2}, {3, 4, 7, 8});
  HostTensor state0 = FloatTensor({2, 2}, {-1, -2, -5, -6});
  HostTensor state1 = FloatTensor({2, 2}, {-3, -4, -7, -8});
  checkpoint::Checkpoint checkpoint;
  absl::Status status =
      AddVariableToCheckpoint(layout, {&rank0, &rank1}, {{&state0, &state1}}, &checkpoint);
  ASSERT_TRUE(status.ok()) << status;
  ASSERT_EQ(checkpoint.tensors.size(), 2u);
  EXPECT_EQ(checkpoint.tensors["w"].shape, Shape({2, 4}));
  EXPECT_THAT(Floats(checkpoint.tensors["w"]), ElementsAre(1, 2, 3, 4, 5, 6, 7, 8));
  EXPECT_THAT(Floats(checkpoint.tensors["optimizer.exp_avg.w"]),
              ElementsAre(-1, -2, -3, -4, -5, -6, -7, -8));
}

TEST(AddVariableToCheckpointTest, BroadcastAxesAreReadFromCoordinateZero) {
  // Hierarchy [2, 2]: rows split on axis 0, broadcast on axis 1. Ranks 1 and 3 (coordinate 1 on
  // the broadcast axis) hold other values, which must be ignored, not summed.
  plan::VariableLayout layout = Layout("b", {4}, {2, 2}, {"S(0)", "B"}, {});
  HostTensor rank0 = FloatTensor({2}, {1, 2});
  HostTensor rank1 = FloatTensor({2}, {100, 100});
  HostTensor rank2 = FloatTensor({2}, {3, 4});
  HostTensor rank3 = FloatTensor({2}, {100, 100});
  checkpoint::Checkpoint checkpoint;
  absl::Status status =
      AddVariableToCheckpoint(layout, {&rank0, &rank1, &rank2, &rank3}, {}, &checkpoint);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_THAT(Floats(checkpoint.tensors["b"]), ElementsAre(1, 2, 3, 4));
}

TEST(AddVariableToCheckpointTest, WrongPiecesNameTheVariable) {
  plan::VariableLayout layout = Layout("w", {2, 4}, {2}, {"S(1)"}, {});
  HostTensor whole = FloatTensor({2, 4}, {1, 2, 3, 4, 5, 6, 7, 8});
  checkpoint::Checkpoint checkpoint;
  absl::Status status = AddVariableToCheckpoint(layout, {&whole, &whole}, {}, &checkpoint);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("variable 'w'"));
  status = AddVariableToCheckpoint(layout, {&whole}, {}, &checkpoint);
  EXPECT_THAT(status.message(), HasSubstr("1 pieces for 2 ranks"));
}

// A linear model trained with AdamW: w split by columns over the devices, b replicated.
constexpr char kJob[] = R"pb(
  name: "linear"
  placement { devices: [ "cpu:0", "cpu:1" ] }
  num_steps: 3
  optimizer { adamw { learning_rate: 0.01 weight_decay: 0.1 } }
  loss: "loss"
  inputs {
    name: "x"
    shape: [ 8, 4 ]
    sbp: "B"
    random_normal { std: 1 seed: 1 }
  }
  variables {
    name: "w"
    shape: [ 4, 6 ]
    sbp: "S(1)"
    initializer { normal { std: 0.5 seed: 2 } }
  }
  variables {
    name: "b"
    shape: [ 6 ]
    sbp: "B"
    initializer { normal { std: 0.5 seed: 3 } }
  }
  ops {
    name: "y"
    type: "matmul"
    inputs: [ "x", "w" ]
    outputs: "y"
  }
  ops {
    name: "z"
    type: "bias_add"
    inputs: [ "y", "b" ]
    outputs: "z"
  }
  ops {
    name: "squared"
    type: "multiply"
    inputs: [ "z", "z" ]
    outputs: "squared"
  }
  ops { name: "loss" type: "reduce_mean" inputs: "squared" outputs: "loss" }
)pb";

struct TrainedJob {
  std::unique_ptr<compiler::CompiledJob> compiled;
  LocalRunResult run;
};

absl::StatusOr<TrainedJob> Train(int devices, JobOptions options = {}) {
  job::Job job;
  if (!google::protobuf::TextFormat::ParseFromString(kJob, &job)) {
    return absl::InternalError("bad test job");
  }
  compiler::DeviceSet device_set = compiler::DeviceSet::Cpus(devices, 1);
  compiler::FitJobToDevices(device_set, &job);
  TrainedJob trained;
  absl::StatusOr<std::unique_ptr<compiler::CompiledJob>> compiled =
      compiler::CompileJobWithStandardOps(std::move(job), device_set);
  if (!compiled.ok()) return compiled.status();
  trained.compiled = std::move(*compiled);
  static KernelRegistry* kernels = [] {
    auto* registry = new KernelRegistry;
    absl::Status status = RegisterCpuKernels(registry);
    CHECK(status.ok()) << status;
    return registry;
  }();
  absl::StatusOr<LocalRunResult> run =
      RunPlanLocally(trained.compiled->result.plan, *kernels, std::move(options));
  if (!run.ok()) return run.status();
  trained.run = std::move(*run);
  return trained;
}

void ExpectNear(const HostTensor& actual, const HostTensor& expected, const std::string& what) {
  ASSERT_EQ(actual.shape, expected.shape) << what;
  std::vector<float> a = Floats(actual);
  std::vector<float> e = Floats(expected);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], e[i], 1e-5) << what << "[" << i << "]";
}

TEST(AssembleCheckpointTest, TwoDevicesSaveWhatOneDeviceSaves) {
  absl::StatusOr<TrainedJob> one = Train(1);
  ASSERT_TRUE(one.ok()) << one.status();
  absl::StatusOr<TrainedJob> two = Train(2);
  ASSERT_TRUE(two.ok()) << two.status();
  const plan::Plan& plan = two->compiled->result.plan;
  ASSERT_EQ(plan.variables_size(), 2) << "the compiler records no variable layouts yet";

  CheckpointProgress progress;
  progress.steps_taken = 3;
  progress.optimizer = true;
  progress.metadata["job"] = "linear";
  absl::StatusOr<checkpoint::Checkpoint> expected =
      AssembleCheckpoint(one->compiled->result.plan, *one->run.runtime, progress);
  ASSERT_TRUE(expected.ok()) << expected.status();
  absl::StatusOr<checkpoint::Checkpoint> actual =
      AssembleCheckpoint(plan, *two->run.runtime, progress);
  ASSERT_TRUE(actual.ok()) << actual.status();

  std::vector<std::string> names;
  for (const auto& [name, tensor] : actual->tensors) names.push_back(name);
  EXPECT_THAT(names, ElementsAre("b", "optimizer.exp_avg.b", "optimizer.exp_avg.w",
                                 "optimizer.exp_avg_sq.b", "optimizer.exp_avg_sq.w",
                                 "optimizer.step", "w"));
  for (const auto& [name, tensor] : expected->tensors) {
    if (name == "optimizer.step") continue;
    ASSERT_TRUE(actual->tensors.contains(name)) << name;
    ExpectNear(actual->tensors.at(name), tensor, name);
  }
  const HostTensor& step = actual->tensors.at("optimizer.step");
  EXPECT_EQ(step.data_type, plan::INT64);
  EXPECT_EQ(step.shape, Shape());
  EXPECT_EQ(step.Values<int64_t>()[0], 3);
  EXPECT_EQ(actual->metadata.at("step"), "3");
  EXPECT_EQ(actual->metadata.at("job"), "linear");

  // The optimizer really acted.
  const HostTensor& moment = actual->tensors.at("optimizer.exp_avg.w");
  float largest = 0;
  for (float value : Floats(moment)) largest = std::max(largest, std::fabs(value));
  EXPECT_GT(largest, 0) << "AdamW's first moment is still zero";
}

TEST(AssembleCheckpointTest, HandWrittenLayoutsOfACompiledJob) {
  // The same assembly with layouts written here from the VARIABLE tasks, so that this part does
  // not depend on the compiler recording Plan.variables.
  absl::StatusOr<TrainedJob> two = Train(2);
  ASSERT_TRUE(two.ok()) << two.status();
  absl::StatusOr<TrainedJob> one = Train(1);
  ASSERT_TRUE(one.ok()) << one.status();
  auto layouts_of = [](const plan::Plan& plan, int devices) {
    plan::Plan with_layouts = plan;
    with_layouts.clear_variables();
    plan::VariableLayout w =
        Layout("w", {4, 6}, {devices}, {"S(1)"}, {"optimizer.exp_avg.w", "optimizer.exp_avg_sq.w"});
    plan::VariableLayout b =
        Layout("b", {6}, {devices}, {"B"}, {"optimizer.exp_avg.b", "optimizer.exp_avg_sq.b"});
    // VARIABLE tasks come in device order; their first output register is named after the
    // variable ("w@...", "b@...").
    for (const plan::Task& task : plan.tasks()) {
      if (task.kind() != plan::VARIABLE) continue;
      const std::string& output = task.outputs(0);
      if (output.rfind("w", 0) == 0) w.add_tasks(task.name());
      if (output.rfind("b", 0) == 0) b.add_tasks(task.name());
    }
    *with_layouts.add_variables() = w;
    *with_layouts.add_variables() = b;
    return with_layouts;
  };
  CheckpointProgress progress;
  progress.steps_taken = 3;
  absl::StatusOr<checkpoint::Checkpoint> actual =
      AssembleCheckpoint(layouts_of(two->compiled->result.plan, 2), *two->run.runtime, progress);
  ASSERT_TRUE(actual.ok()) << actual.status();
  absl::StatusOr<checkpoint::Checkpoint> expected =
      AssembleCheckpoint(layouts_of(one->compiled->result.plan, 1), *one->run.runtime, progress);
  ASSERT_TRUE(expected.ok()) << expected.status();
  EXPECT_FALSE(actual->tensors.contains("optimizer.step")) << "progress.optimizer is false";
  ASSERT_EQ(actual->tensors.size(), 6u);
  for (const auto& [name, tensor] : expected->tensors) {
    ASSERT_TRUE(actual->tensors.contains(name)) << name;
    ExpectNear(actual->tensors.at(name), tensor, name);
  }
}

// A CPU stream that counts the copies made on it and the waits for it.
class CountingStream final : public StreamContext {
 public:
  CountingStream(std::atomic<int>* copies, std::atomic<int>* waits)
      : copies_(copies), waits_(waits) {}
  bool is_asynchronous() const override { return false; }
  std::unique_ptr<CompletionEvent> RecordCompletion() override { return nullptr; }
  absl::Status Copy(void* destination, const void* source, int64_t bytes) override {
    copies_->fetch_add(1);
    if (bytes > 0) std::memcpy(destination, source, static_cast<size_t>(bytes));
    return absl::OkStatus();
  }
  absl::Status Synchronize() override {
    waits_->fetch_add(1);
    return absl::OkStatus();
  }

 private:
  std::atomic<int>* copies_;
  std::atomic<int>* waits_;
};

TEST(AssembleCheckpointTest, ValuesAreCopiedOnTheirActorsStreams) {
  // A GPU's variables are in device memory: the checkpoint must copy them on the variable's
  // stream and wait for it (a host read of a GPU pointer crashed `loomctl run --save-dir`).
  std::atomic<int> copies{0};
  std::atomic<int> waits{0};
  JobOptions options;
  options.stream_context_factory = [&](const plan::Stream&) -> std::unique_ptr<StreamContext> {
    return std::make_unique<CountingStream>(&copies, &waits);
  };
  absl::StatusOr<TrainedJob> two = Train(2, std::move(options));
  ASSERT_TRUE(two.ok()) << two.status();
  const plan::Plan& plan = two->compiled->result.plan;
  int tensors = 0;
  for (const plan::VariableLayout& layout : plan.variables()) {
    tensors += layout.tasks_size() * (1 + layout.state_names_size());
  }
  ASSERT_GT(tensors, 0);
  copies = 0;
  waits = 0;
  absl::StatusOr<checkpoint::Checkpoint> saved =
      AssembleCheckpoint(plan, *two->run.runtime, CheckpointProgress{});
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(copies.load(), tensors);
  EXPECT_EQ(waits.load(), tensors);
}

TEST(AssembleCheckpointTest, PlansWithoutLayoutsAndUnknownTasksAreRefused) {
  absl::StatusOr<TrainedJob> two = Train(2);
  ASSERT_TRUE(two.ok()) << two.status();
  plan::Plan plan = two->compiled->result.plan;
  plan.clear_variables();
  absl::StatusOr<checkpoint::Checkpoint> result =
      AssembleCheckpoint(plan, *two->run.runtime, CheckpointProgress{});
  EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(result.status().message(), HasSubstr("Plan.variables"));

  plan::VariableLayout layout = Layout("w", {4, 6}, {1}, {"B"}, {});
  layout.add_tasks("no-such-task");
  *plan.add_variables() = layout;
  result = AssembleCheckpoint(plan, *two->run.runtime, CheckpointProgress{});
  EXPECT_EQ(result.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(result.status().message(), HasSubstr("'no-such-task'"));
}

}  // namespace
}  // namespace loom
