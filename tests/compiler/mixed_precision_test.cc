// Mixed precision (Job.matmul_data_type = BFLOAT16): every matmul and causal attention, forward and
// backward, runs on bfloat16 copies of its inputs; variables, gradients and the optimizer stay
// float32; partial sums are reduced in float32 only.
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/boxing.h"
#include "core/plan_steps.h"
#include "core/shared_kernels.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/compiler/compiler_test_util.h"
#include "tests/compiler/gpt_layouts.h"
#include "tests/compiler/run_util.h"
#include "tests/compiler/test_jobs.h"

namespace loom::compiler::testing {
namespace {

using ::testing::HasSubstr;

constexpr char kSgd[] = "sgd { learning_rate: 0.05 momentum: 0.9 }";

job::Job Bfloat16(job::Job job) {
  job.set_matmul_data_type(plan::BFLOAT16);
  return job;
}

plan::DataType TypeOf(const CompileResult& result, const std::string& tensor) {
  auto found = result.graph.tensor_by_name.find(tensor);
  return found == result.graph.tensor_by_name.end()
             ? plan::DATA_TYPE_UNSPECIFIED
             : result.graph.tensors[found->second].type.data_type;
}

TEST(MixedPrecisionTest, EveryMatmulRunsInBfloat16AndVariablesAndGradientsStayFloat32) {
  auto compiled = CompileOn(Bfloat16(ParseJob(MlpRegression(CpuDevices(1), kSgd))), 1);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  int matmuls = 0;
  for (const LogicalNode& node : compiled->graph.nodes) {
    if (node.op_type != "matmul") continue;
    ++matmuls;
    for (const std::vector<int>* tensors : {&node.inputs, &node.outputs}) {
      for (int tensor : *tensors) {
        EXPECT_EQ(compiled->graph.tensors[tensor].type.data_type, plan::BFLOAT16)
            << node.name << ": " << compiled->graph.tensors[tensor].name;
      }
    }
  }
  // Forward h and y; backward dw1 (x is an input: no gradient), da and dw2.
  EXPECT_EQ(matmuls, 5);
  // The casts around the forward matmul "h": its consumers still read float32 "h".
  EXPECT_EQ(TypeOf(*compiled, "h.a.bfloat16"), plan::BFLOAT16);
  EXPECT_EQ(TypeOf(*compiled, "h.b.bfloat16"), plan::BFLOAT16);
  EXPECT_EQ(TypeOf(*compiled, "h.bfloat16"), plan::BFLOAT16);
  for (const char* tensor : {"h", "y", "loss", "w1", "w2", "grad/w1", "grad/w2"}) {
    EXPECT_EQ(TypeOf(*compiled, tensor), plan::FLOAT32) << tensor;
  }
  for (const plan::Task* task : TasksOfKind(compiled->plan, plan::VARIABLE)) {
    EXPECT_EQ(KernelOf(compiled->plan, *task).op_type(), "sgd");
  }
}

TEST(MixedPrecisionTest, TrainsDataParallelLikeOneDeviceAndDiffersFromFloat32) {
  const job::Job one = Bfloat16(ParseJob(MlpRegression(CpuDevices(1), kSgd)));
  auto expected = CompileAndRun(one, 1);
  ASSERT_TRUE(expected.ok()) << expected.status();
  auto actual = CompileAndRun(Bfloat16(ParseJob(MlpRegression(CpuDevices(2), kSgd))), 2);
  ASSERT_TRUE(actual.ok()) << actual.status();
  // Two ranks round their halves of each weight gradient to bfloat16 before summing them in
  // float32, one rank rounds the whole sum: the runs agree to bfloat16's precision, not float32's.
  ExpectSameFetches(*expected, *actual, 1e-2, "bfloat16 MLP regression on 2 devices");
  auto float32 = CompileAndRun(ParseJob(MlpRegression(CpuDevices(1), kSgd)), 1);
  ASSERT_TRUE(float32.ok()) << float32.status();
  const std::vector<HostTensor>& mixed = expected->at("loss");
  const std::vector<HostTensor>& full = float32->at("loss");
  ASSERT_EQ(mixed.size(), full.size());
  int differing = 0;
  for (size_t step = 0; step < mixed.size(); ++step) {
    const float a = mixed[step].Values<float>()[0];
    const float b = full[step].Values<float>()[0];
    EXPECT_NEAR(a, b, 2e-2 * std::fabs(b)) << "step " << step;
    if (a != b) ++differing;
  }
  EXPECT_EQ(differing, static_cast<int>(mixed.size())) << "the casts changed nothing";
  EXPECT_LT(mixed.back().Values<float>()[0], mixed.front().Values<float>()[0]);
}

// With micro-batches a weight is cast once a step, and under ZeRO (the cast on the shard) its
// bfloat16 copy is all-gathered once a step (in a bucket), not once per micro-batch; the losses are
// bit for bit the replicated run's (two ranks sum in one order either way).
TEST(MixedPrecisionTest, WeightsAreCastAndGatheredOnceAStep) {
  const GptLayout layout{.name = "dp2_m4_bf16",
                         .data_parallel = 2,
                         .micro_batches = 4,
                         .matmul_data_type = plan::BFLOAT16};
  std::vector<CompileResult> compiled;
  for (int64_t zero_stage : {0, 2}) {
    GptLayout staged = layout;
    staged.zero_stage = zero_stage;
    absl::StatusOr<CompileResult> result = CompileGpt(staged, job::REGISTER_MEMORY_SHARED);
    ASSERT_TRUE(result.ok()) << result.status();
    compiled.push_back(std::move(*result));
  }
  std::map<std::string, const plan::Task*> variable_of;  // value register -> VARIABLE task
  for (const plan::Task& task : compiled[1].plan.tasks()) {
    if (task.kind() == plan::VARIABLE) variable_of[task.outputs(0)] = &task;
  }
  std::set<std::string> copies;  // the weights' bfloat16 copies (registers)
  for (const plan::Task& task : compiled[1].plan.tasks()) {
    if (task.kind() == plan::COMPUTE && KernelOf(compiled[1].plan, task).op_type() == "cast" &&
        variable_of.contains(task.inputs(0))) {
      copies.insert(task.outputs(0));
      EXPECT_EQ(PiecesPerStep(task), 1) << task.name();
    }
  }
  // And the buckets packed from them (BucketGathers).
  for (const plan::Task& task : compiled[1].plan.tasks()) {
    if (task.kind() == plan::COMPUTE && !task.inputs().empty() && copies.contains(task.inputs(0))) {
      copies.insert(task.outputs(0));
    }
  }
  int gathers = 0;
  for (const plan::Task& task : compiled[1].plan.tasks()) {
    if (task.kind() == plan::COLLECTIVE && task.collective().kind() == plan::ALL_GATHER &&
        copies.contains(task.inputs(0))) {
      ++gathers;
      EXPECT_EQ(PiecesPerStep(task), 1) << task.name();
    }
  }
  EXPECT_GT(copies.size(), 0u);
  EXPECT_GT(gathers, 0);
  absl::StatusOr<MeasuredRun> replicated = RunMeasured(compiled[0]);
  ASSERT_TRUE(replicated.ok()) << replicated.status();
  absl::StatusOr<MeasuredRun> sharded = RunMeasured(compiled[1]);
  ASSERT_TRUE(sharded.ok()) << sharded.status();
  ExpectBitIdentical(replicated->fetched, sharded->fetched, layout.name);
  EXPECT_EQ(sharded->allocated_bytes, sharded->estimated_bytes);
}

// Data parallelism with few samples a rank, where moving a matmul's activations costs fewer bytes
// than gathering its weight: each weight's cast keeps the weight whole (SBP inference prefers the
// signature that converts no input over a free slice), so every matmul reads its weight
// broadcast. Without ZeRO no weight is gathered and nothing but the gradients' buckets is
// reduced; under ZeRO-3 the cast runs on the shard and what is gathered is the bfloat16 copy.
// Before, the casts took slices and the matmuls split their contraction: all-to-alls of the
// activations and reduce-scatters of float32 partial sums, every step.
TEST(MixedPrecisionTest, DataParallelMatmulsReadTheirWeightsWhole) {
  for (int zero_stage : {0, 3}) {
    gpt::GptConfig config;
    config.context = 16;
    config.width = 32;
    config.layers = 2;
    config.heads = 2;
    config.mlp_width = 128;
    config.batch = 2;
    config.steps = 1;
    ApplyLayout(GptLayout{.name = "dp2_bf16",
                          .data_parallel = 2,
                          .matmul_data_type = plan::BFLOAT16,
                          .zero_stage = zero_stage},
                config);
    absl::StatusOr<job::Job> job = gpt::BuildGptJob(config);
    ASSERT_TRUE(job.ok()) << job.status();
    absl::StatusOr<CompileResult> compiled = CompileOn(*job, 2);
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    std::map<std::string, const plan::Task*> producer;
    for (const plan::Task& task : compiled->plan.tasks()) {
      for (const std::string& output : task.outputs()) producer[output] = &task;
    }
    std::map<plan::CollectiveKind, int> collectives;
    int copy_gathers = 0;
    for (const plan::Task& task : compiled->plan.tasks()) {
      if (task.kind() != plan::COLLECTIVE) continue;
      ++collectives[task.collective().kind()];
      if (task.collective().kind() != plan::ALL_GATHER) continue;
      // A weight's shard or its bfloat16 copy, cast on the shard (ZeRO-3 gathers per use).
      const plan::Task* from = producer.at(task.inputs(0));
      const bool cast = from->kind() == plan::COMPUTE &&
                        KernelOf(compiled->plan, *from).op_type() == "cast" &&
                        producer.at(from->inputs(0))->kind() == plan::VARIABLE;
      EXPECT_TRUE(from->kind() == plan::VARIABLE || cast)
          << "zero_stage " << zero_stage << ": " << task.name() << " gathers " << from->name();
      copy_gathers += cast;
    }
    EXPECT_EQ(collectives[plan::ALL_TO_ALL], 0) << "zero_stage " << zero_stage;
    if (zero_stage == 0) {
      EXPECT_EQ(collectives[plan::ALL_GATHER], 0);
      EXPECT_EQ(collectives[plan::REDUCE_SCATTER], 0);
      EXPECT_GT(collectives[plan::ALL_REDUCE], 0);
    } else {
      EXPECT_GT(copy_gathers, 0);
    }
  }
}

TEST(MixedPrecisionTest, TensorParallelPartialSumsAreWidenedThenReducedInFloat32) {
  // Row parallel: y = g @ w2 with w2 S(0) gives partial sums. They stay partial through the
  // widening cast and are all-reduced as float32 "y".
  auto compiled = CompileOn(Bfloat16(ParseJob(MegatronMlp(CpuDevices(2)))), 2);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  EXPECT_EQ(SbpOf(*compiled, "y.bfloat16"), "P");
  EXPECT_EQ(SbpOf(*compiled, "y"), "P");
  std::vector<const plan::Task*> all_reduces = Collectives(compiled->plan, plan::ALL_REDUCE);
  ASSERT_FALSE(all_reduces.empty());
  for (const plan::Task* task : all_reduces) {
    EXPECT_EQ(task->inputs(0).substr(0, 2), "y@") << task->name();
  }
  // And it computes what one device does, to bfloat16 precision.
  auto one = CompileAndRun(Bfloat16(ParseJob(MegatronMlp(CpuDevices(1)))), 1);
  ASSERT_TRUE(one.ok()) << one.status();
  auto two = CompileAndRun(Bfloat16(ParseJob(MegatronMlp(CpuDevices(2)))), 2);
  ASSERT_TRUE(two.ok()) << two.status();
  ExpectSameFetches(*one, *two, 1e-2, "bfloat16 Megatron MLP on 2 devices");
}

TEST(MixedPrecisionTest, PartialSumsOfBfloat16AreNotBoxed) {
  job::Placement proto;
  proto.add_devices("cpu:0");
  proto.add_devices("cpu:1");
  absl::StatusOr<Placement> parsed = Placement::FromProto(proto);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const Placement& placement = *parsed;
  absl::StatusOr<BoxingPlan> boxing =
      PlanBoxing(TensorType{Shape({4, 4}), plan::BFLOAT16}, placement, {Sbp::PartialSum()},
                 placement, {Sbp::Broadcast()});
  ASSERT_EQ(boxing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(boxing.status().message(), HasSubstr("partial sums are reduced in float32 only"));
  EXPECT_TRUE(PlanBoxing(TensorType{Shape({4, 4}), plan::FLOAT32}, placement, {Sbp::PartialSum()},
                         placement, {Sbp::Broadcast()})
                  .ok());
}

TEST(MixedPrecisionTest, AMatmulMarkedKeepFloat32StaysFloat32) {
  job::Job job = Bfloat16(ParseJob(MlpRegression(CpuDevices(1), kSgd)));
  for (job::Op& op : *job.mutable_ops()) {
    if (op.name() == "y") op.set_keep_float32(true);
  }
  auto compiled = CompileOn(job, 1);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  EXPECT_EQ(TypeOf(*compiled, "h.bfloat16"), plan::BFLOAT16);
  EXPECT_EQ(TypeOf(*compiled, "y.bfloat16"), plan::DATA_TYPE_UNSPECIFIED);
  for (const LogicalNode& node : compiled->graph.nodes) {
    if (node.name != "y") continue;
    EXPECT_EQ(compiled->graph.tensors[node.inputs[0]].name, "a");
    EXPECT_EQ(compiled->graph.tensors[node.outputs[0]].type.data_type, plan::FLOAT32);
  }
}

TEST(MixedPrecisionTest, CausalAttentionRunsInBfloat16AndIsReadInFloat32) {
  auto compiled = CompileOn(Bfloat16(ParseJob(TransformerBlock(CpuDevices(1), false))), 1);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  int attentions = 0;
  for (const LogicalNode& node : compiled->graph.nodes) {
    if (node.op_type != "causal_attention") continue;
    ++attentions;
    std::vector<std::string> inputs;
    for (int tensor : node.inputs) {
      inputs.push_back(compiled->graph.tensors[tensor].name);
      EXPECT_EQ(compiled->graph.tensors[tensor].type.data_type, plan::BFLOAT16);
    }
    EXPECT_THAT(inputs, ::testing::ElementsAre("attention.q.bfloat16", "attention.k.bfloat16",
                                               "attention.v.bfloat16"));
  }
  EXPECT_EQ(attentions, 1);
  EXPECT_EQ(TypeOf(*compiled, "attention.bfloat16"), plan::BFLOAT16);
  EXPECT_EQ(TypeOf(*compiled, "attention"), plan::FLOAT32);
  EXPECT_EQ(TypeOf(*compiled, "q_t"), plan::FLOAT32);
}

TEST(MixedPrecisionTest, RejectsOtherDataTypes) {
  job::Job job = ParseJob(MlpRegression(CpuDevices(1), kSgd));
  job.set_matmul_data_type(plan::INT32);
  auto compiled = CompileOn(job, 1);
  ASSERT_EQ(compiled.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(compiled.status().message(), "matmul_data_type must be float32 or bfloat16, not int32");
}

TEST(MixedPrecisionTest, Float32LeavesTheJobAsItIs) {
  job::Job job = ParseJob(MlpRegression(CpuDevices(1), kSgd));
  job.set_matmul_data_type(plan::FLOAT32);
  auto compiled = CompileOn(job, 1);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  EXPECT_EQ(TypeOf(*compiled, "h.bfloat16"), plan::DATA_TYPE_UNSPECIFIED);
  EXPECT_EQ(TypeOf(*compiled, "h"), plan::FLOAT32);
}

}  // namespace
}  // namespace loom::compiler::testing
