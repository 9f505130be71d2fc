// Variables whose value and optimizer states start from a checkpoint (Task.state_initializers with
// "safetensors_slice"), and jobs resumed after k steps ("first_step").
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "actors/variable_actor.h"
#include "core/file_roots.h"
#include "core/safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/runtime/runtime_test_util.h"

namespace loom::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::FloatNear;
using ::testing::HasSubstr;
using ::testing::Pointwise;

// The plans here read their checkpoint from the test's directory: any path may be opened, as in
// `loomctl run` (the roots outlive every job of the test binary).
absl::StatusOr<std::unique_ptr<JobRuntime>> MakeJobReadingFiles(const plan::Plan& plan) {
  static const FileRoots* const files = new FileRoots(FileRoots::Unrestricted());
  JobOptions options;
  options.files = files;
  return MakeJob(plan, std::move(options));
}

HostTensor FloatTensor(const Shape& shape, const std::vector<float>& values) {
  HostTensor tensor;
  tensor.data_type = plan::FLOAT32;
  tensor.shape = shape;
  tensor.bytes.resize(values.size() * sizeof(float));
  std::memcpy(tensor.bytes.data(), values.data(), tensor.bytes.size());
  return tensor;
}

HostTensor Copy(const TensorView& view) {
  HostTensor tensor;
  tensor.data_type = view.data_type;
  tensor.shape = view.shape;
  const std::byte* data = static_cast<const std::byte*>(view.data);
  tensor.bytes.assign(data, data + view.ByteSize());
  return tensor;
}

std::vector<float> Floats(const TensorView& view) {
  const float* data = view.Data<const float>();
  return std::vector<float>(data, data + view.NumElements());
}

void SetIntList(plan::KernelConf* conf, const std::string& name,
                const std::vector<int64_t>& values) {
  plan::IntList* list = (*conf->mutable_attributes())[name].mutable_int_list();
  for (int64_t value : values) list->add_values(value);
}

// A "safetensors_slice" kernel reading the window at `begin` of tensor `tensor` of `logical`.
plan::KernelConf SliceConf(const std::string& path, const std::string& tensor,
                           const std::vector<int64_t>& logical, const std::vector<int64_t>& begin) {
  plan::KernelConf conf;
  conf.set_op_type("safetensors_slice");
  (*conf.mutable_attributes())["path"].set_string_value(path);
  (*conf.mutable_attributes())["tensor"].set_string_value(tensor);
  SetIntList(&conf, "logical_shape", logical);
  SetIntList(&conf, "slice_begin", begin);
  return conf;
}

std::string TempPath(const std::string& name) {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return absl::StrCat(::testing::TempDir(), "/loom_state_initializers_", ::getpid(), "_",
                      info->name(), "_", name);
}

// ------------------------------------------------------------------------------------------------
// One SGD step from a checkpoint, by hand.

class SgdFromCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = TempPath("sgd.safetensors");
    // The logical variable is [4, 3]; this rank holds rows 2 and 3 (slice_begin [2, 0]).
    std::vector<float> value;
    std::vector<float> momentum;
    for (int i = 0; i < 12; ++i) {
      value.push_back(static_cast<float>(i));
      momentum.push_back(0.1f * static_cast<float>(i));
    }
    checkpoint::Checkpoint contents;
    contents.tensors["w"] = FloatTensor({4, 3}, value);
    contents.tensors["w.momentum_buffer"] = FloatTensor({4, 3}, momentum);
    ASSERT_TRUE(checkpoint::WriteSafetensors(path_, contents).ok());
  }
  void TearDown() override { std::remove(path_.c_str()); }

  // w (rows 2..3 of the checkpoint's "w") with SGD (lr 0.1, momentum 0.9, first_step 5), its
  // momentum buffer from "w.momentum_buffer", a gradient of 0.5 everywhere, `steps` steps.
  PlanBuilder Plan(int steps) const {
    PlanBuilder builder("sgd_from_checkpoint");
    builder.AddCpuDevices(1);
    builder.AddRegister("w", {2, 3}, plan::FLOAT32, 1).AddRegister("g", {2, 3});
    plan::Task& variable = builder.AddTask("w", plan::VARIABLE, 0, {"g"}, {"w"}, "sgd");
    PlanBuilder::SetFloatAttribute(variable, "lr", 0.1);
    PlanBuilder::SetFloatAttribute(variable, "momentum", 0.9);
    PlanBuilder::SetAttribute(variable, "first_step", 5);
    variable.set_num_pieces(steps);
    variable.set_num_optimizer_states(1);
    *variable.mutable_initializer() = SliceConf(path_, "w", {4, 3}, {2, 0});
    *variable.add_state_initializers() = SliceConf(path_, "w.momentum_buffer", {4, 3}, {2, 0});
    plan::Task& gradient = builder.AddTask("g", plan::SOURCE, 0, {}, {"g"}, "fill");
    PlanBuilder::SetFloatAttribute(gradient, "value", 0.5);
    gradient.set_num_pieces(steps);
    builder.AddTask("observe", plan::SINK, 0, {"w"}, {});
    return builder;
  }

  std::string path_;
};

TEST_F(SgdFromCheckpointTest, StatesStartFromTheCheckpointAndTheStepUsesThem) {
  auto job = MakeJobReadingFiles(Plan(1).plan());
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Run().ok());
  // The step reads w[2, 0] = 6 from the checkpoint.
  EXPECT_THAT(SinkValues(**job, "observe"), ElementsAre(6.0f));
  const auto* variable = dynamic_cast<const VariableActor*>((*job)->FindActor("w"));
  ASSERT_NE(variable, nullptr);
  ASSERT_EQ(variable->states().size(), 1u);
  // A resumed step (first_step 5): buf = 0.9 * buf + 0.5 with buf = 0.6 .. 1.1 from the
  // checkpoint (not the gradient, as on the very first step); w -= 0.1 * buf with w = 6 .. 11.
  EXPECT_THAT(
      Floats(variable->states()[0]),
      Pointwise(FloatNear(1e-6), std::vector<float>{1.04f, 1.13f, 1.22f, 1.31f, 1.40f, 1.49f}));
  EXPECT_THAT(Floats(variable->value()),
              Pointwise(FloatNear(1e-5),
                        std::vector<float>{5.896f, 6.887f, 7.878f, 8.869f, 9.860f, 10.851f}));
}

TEST_F(SgdFromCheckpointTest, BeforeAnyUpdateTheStatesHoldTheCheckpoint) {
  // The variable without its gradient: act 0 initialises the value and the states, nothing more.
  PlanBuilder builder = Plan(1);
  plan::Plan& plan = builder.mutable_plan();
  plan.mutable_tasks(0)->clear_inputs();
  plan.mutable_tasks()->DeleteSubrange(1, 1);  // the gradient source
  plan.mutable_registers()->DeleteSubrange(1, 1);
  auto job = MakeJobReadingFiles(plan);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Run().ok());
  const auto* variable = dynamic_cast<const VariableActor*>((*job)->FindActor("w"));
  ASSERT_NE(variable, nullptr);
  EXPECT_THAT(Floats(variable->value()), ElementsAre(6, 7, 8, 9, 10, 11));
  EXPECT_THAT(Floats(variable->states()[0]),
              Pointwise(FloatNear(1e-6), std::vector<float>{0.6f, 0.7f, 0.8f, 0.9f, 1.0f, 1.1f}));
}

TEST_F(SgdFromCheckpointTest, StateInitializersMustMatchTheStates) {
  PlanBuilder builder = Plan(1);
  plan::Task* variable = builder.mutable_plan().mutable_tasks(0);
  *variable->add_state_initializers() = SliceConf(path_, "w.momentum_buffer", {4, 3}, {2, 0});
  auto job = MakeJobReadingFiles(builder.plan());
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(job.status().message(), HasSubstr("task 'w'"));
  EXPECT_THAT(job.status().message(), HasSubstr("2 state_initializers for 1 optimizer states"));
}

TEST_F(SgdFromCheckpointTest, MissingStateTensorIsNamed) {
  PlanBuilder builder = Plan(1);
  plan::Task* variable = builder.mutable_plan().mutable_tasks(0);
  *variable->mutable_state_initializers(0) = SliceConf(path_, "w.exp_avg", {4, 3}, {2, 0});
  auto job = MakeJobReadingFiles(builder.plan());
  ASSERT_FALSE(job.ok());
  EXPECT_THAT(job.status().message(), HasSubstr("optimizer state 0"));
  EXPECT_THAT(job.status().message(), HasSubstr("task 'w'"));
  EXPECT_THAT(job.status().message(),
              HasSubstr(absl::StrCat("checkpoint '", path_, "' has no tensor 'w.exp_avg'")));
}

// ------------------------------------------------------------------------------------------------
// AdamW resumed after k steps from a checkpoint of the value and moments equals the uninterrupted
// run, bit for bit.

struct RunResult {
  HostTensor value;
  std::vector<HostTensor> states;
  std::vector<float> observed;
};

// w [4, 3] (random normal, or from `checkpoint`) trained with AdamW on random normal gradients for
// `steps` steps after `first_step` earlier ones.
absl::StatusOr<RunResult> TrainAdamW(int steps, int first_step, const std::string& checkpoint) {
  PlanBuilder builder("adamw_resume");
  builder.AddCpuDevices(2);
  builder.AddRegister("w", {4, 3}, plan::FLOAT32, 1).AddRegister("g", {4, 3});
  plan::Task& variable = builder.AddTask("w", plan::VARIABLE, 0, {"g"}, {"w"}, "adamw");
  PlanBuilder::SetFloatAttribute(variable, "lr", 0.05);
  PlanBuilder::SetFloatAttribute(variable, "weight_decay", 0.1);
  if (first_step > 0) PlanBuilder::SetAttribute(variable, "first_step", first_step);
  variable.set_num_pieces(steps);
  variable.set_num_optimizer_states(2);
  if (checkpoint.empty()) {
    plan::KernelConf* initializer = variable.mutable_initializer();
    initializer->set_op_type("random");
    (*initializer->mutable_attributes())["distribution"].set_string_value("normal");
    (*initializer->mutable_attributes())["seed"].set_int_value(3);
    (*initializer->mutable_attributes())["same_every_piece"].set_bool_value(true);
  } else {
    *variable.mutable_initializer() = SliceConf(checkpoint, "w", {4, 3}, {0, 0});
    *variable.add_state_initializers() = SliceConf(checkpoint, "w.exp_avg", {4, 3}, {0, 0});
    *variable.add_state_initializers() = SliceConf(checkpoint, "w.exp_avg_sq", {4, 3}, {0, 0});
  }
  plan::Task& gradient = builder.AddTask("g", plan::SOURCE, 1, {}, {"g"}, "random");
  PlanBuilder::SetStringAttribute(gradient, "distribution", "normal");
  PlanBuilder::SetAttribute(gradient, "seed", 11);
  if (first_step > 0) PlanBuilder::SetAttribute(gradient, "first_step", first_step);
  gradient.set_num_pieces(steps);
  builder.AddTask("observe", plan::SINK, 1, {"w"}, {});

  auto job = MakeJobReadingFiles(builder.plan());
  if (!job.ok()) return job.status();
  if (absl::Status status = (*job)->Run(); !status.ok()) return status;
  const auto* actor = dynamic_cast<const VariableActor*>((*job)->FindActor("w"));
  if (actor == nullptr) return absl::InternalError("no variable actor 'w'");
  RunResult result;
  result.value = Copy(actor->value());
  for (const TensorView& state : actor->states()) result.states.push_back(Copy(state));
  result.observed = SinkValues(**job, "observe");
  return result;
}

TEST(AdamWResumeTest, ResumedRunEqualsTheUninterruptedOneBitForBit) {
  constexpr int kTotal = 5;
  absl::StatusOr<RunResult> uninterrupted = TrainAdamW(kTotal, 0, "");
  ASSERT_TRUE(uninterrupted.ok()) << uninterrupted.status();
  for (int k : {1, 3}) {
    absl::StatusOr<RunResult> first = TrainAdamW(k, 0, "");
    ASSERT_TRUE(first.ok()) << first.status();
    const std::string path = TempPath(absl::StrCat("adamw_", k, ".safetensors"));
    checkpoint::Checkpoint saved;
    saved.tensors["w"] = first->value;
    saved.tensors["w.exp_avg"] = first->states[0];
    saved.tensors["w.exp_avg_sq"] = first->states[1];
    ASSERT_TRUE(checkpoint::WriteSafetensors(path, saved).ok());

    absl::StatusOr<RunResult> resumed = TrainAdamW(kTotal - k, k, path);
    std::remove(path.c_str());
    ASSERT_TRUE(resumed.ok()) << resumed.status();
    EXPECT_EQ(resumed->value.bytes, uninterrupted->value.bytes) << "k = " << k;
    ASSERT_EQ(resumed->states.size(), 2u);
    EXPECT_EQ(resumed->states[0].bytes, uninterrupted->states[0].bytes) << "k = " << k;
    EXPECT_EQ(resumed->states[1].bytes, uninterrupted->states[1].bytes) << "k = " << k;
    // What the model read at each remaining step, too.
    EXPECT_EQ(resumed->observed, std::vector<float>(uninterrupted->observed.begin() + k,
                                                    uninterrupted->observed.end()));
  }
  // Without first_step the resumed run would differ (bias correction and gradients restart).
  absl::StatusOr<RunResult> first = TrainAdamW(3, 0, "");
  ASSERT_TRUE(first.ok());
  const std::string path = TempPath("adamw_naive.safetensors");
  checkpoint::Checkpoint saved;
  saved.tensors["w"] = first->value;
  saved.tensors["w.exp_avg"] = first->states[0];
  saved.tensors["w.exp_avg_sq"] = first->states[1];
  ASSERT_TRUE(checkpoint::WriteSafetensors(path, saved).ok());
  absl::StatusOr<RunResult> naive = TrainAdamW(kTotal - 3, 0, path);
  std::remove(path.c_str());
  ASSERT_TRUE(naive.ok()) << naive.status();
  EXPECT_NE(naive->value.bytes, uninterrupted->value.bytes);
}

}  // namespace
}  // namespace loom::testing
