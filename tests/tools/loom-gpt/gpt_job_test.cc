// The reference GPT (tools/loom-gpt): its job compiles on every parallel layout of the oracle
// tests, its variables carry the Megatron SBPs, bad configs are rejected with clear errors, and its
// initial-weights file holds what the job's own initializers draw.
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/compiler/compiler_test_util.h"
#include "tests/compiler/run_util.h"
#include "tools/loom-gpt/gpt_model.h"

namespace loom::gpt {
namespace {

using ::loom::compiler::testing::CompileAndRun;
using ::loom::compiler::testing::CompileOn;
using ::loom::compiler::testing::SbpOf;
using ::testing::HasSubstr;

struct Layout {
  std::string name;
  int64_t dp = 1;
  int64_t tp = 1;
  int64_t pp = 1;
  int64_t micro_batches = 1;
  double max_grad_norm = 0;
};

GptConfig ConfigFor(const Layout& layout) {
  GptConfig config;
  config.data_parallel = layout.dp;
  config.tensor_parallel = layout.tp;
  config.pipeline_stages = layout.pp;
  config.micro_batches = layout.micro_batches;
  config.max_grad_norm = layout.max_grad_norm;
  config.steps = 2;
  return config;
}

const Layout kLayouts[] = {
    {"OneDevice"},
    {"DataParallel2", 2},
    {"TensorParallel2", 1, 2},
    {"Pipeline2MicroBatches4", 1, 1, 2, 4},
    {"DataParallel2Pipeline2", 2, 1, 2, 2},
    {"DataParallel2TensorParallel2", 2, 2},
    {"ClippedOneDevice", 1, 1, 1, 1, 1.0},
};

class GptJobTest : public ::testing::TestWithParam<Layout> {};

TEST_P(GptJobTest, BuildsAndCompiles) {
  const GptConfig config = ConfigFor(GetParam());
  absl::StatusOr<job::Job> job = BuildGptJob(config);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->variables_size(), 69);
  EXPECT_EQ(job->loss(), "loss");
  ASSERT_EQ(job->inputs_size(), 2);
  ASSERT_TRUE(job->inputs(0).has_token_dataset());
  EXPECT_FALSE(job->inputs(0).token_dataset().targets());
  EXPECT_TRUE(job->inputs(1).token_dataset().targets());
  EXPECT_EQ(job->inputs(0).token_dataset().sources(0).paths(0), config.data_paths.front());
  EXPECT_EQ(job->num_micro_batches(), config.micro_batches > 1 ? config.micro_batches : 0);
  EXPECT_EQ(job->max_grad_norm(), config.max_grad_norm);
  auto compiled = CompileOn(*job, static_cast<int>(GptDeviceCount(config)));
  ASSERT_TRUE(compiled.ok()) << GetParam().name << ": " << compiled.status();
}

INSTANTIATE_TEST_SUITE_P(Layouts, GptJobTest, ::testing::ValuesIn(kLayouts),
                         [](const auto& info) { return info.param.name; });

TEST(GptJobTest, ParametersFollowGpt2NamesAndShapes) {
  const std::vector<GptParameter> parameters = GptParameters(GptConfig{});
  ASSERT_EQ(parameters.size(), 69u);
  EXPECT_EQ(parameters[0].name, "wte");
  EXPECT_EQ(parameters[0].shape, (std::vector<int64_t>{256, 128}));
  EXPECT_EQ(parameters[1].name, "wpe");
  EXPECT_EQ(parameters[1].shape, (std::vector<int64_t>{64, 128}));
  EXPECT_EQ(parameters[4].name, "h.0.attn.q.weight");
  EXPECT_EQ(parameters[5].name, "h.0.attn.q.bias");
  EXPECT_EQ(parameters[12].name, "h.0.ln_2.weight");
  EXPECT_EQ(parameters[14].name, "h.0.mlp.c_fc.weight");
  EXPECT_EQ(parameters[14].shape, (std::vector<int64_t>{128, 512}));
  EXPECT_EQ(parameters[16].name, "h.0.mlp.c_proj.weight");
  EXPECT_EQ(parameters[16].shape, (std::vector<int64_t>{512, 128}));
  EXPECT_NEAR(parameters[16].std, 0.02 / std::sqrt(8.0), 1e-12);
  EXPECT_EQ(parameters.back().name, "lm_head.weight");
  EXPECT_EQ(parameters.back().shape, (std::vector<int64_t>{128, 256}));
}

// Megatron: q, k, v and c_fc split on their output axis (their biases with them), both c_proj
// weights on their input axis, everything else replicated; the residual stream is replicated
// over the tensor-parallel ranks.
TEST(GptJobTest, TensorParallelVariablesHaveMegatronSbps) {
  for (const Layout& layout : {Layout{"tp", 1, 2}, Layout{"dp_tp", 2, 2}}) {
    const GptConfig config = ConfigFor(layout);
    absl::StatusOr<job::Job> job = BuildGptJob(config);
    ASSERT_TRUE(job.ok()) << job.status();
    auto compiled = CompileOn(*job, static_cast<int>(GptDeviceCount(config)));
    ASSERT_TRUE(compiled.ok()) << layout.name << ": " << compiled.status();
    auto expect = [&](const std::string& tensor, const std::string& model_axis,
                      const std::string& data_axis) {
      const std::string expected =
          layout.dp > 1 ? absl::StrCat("(", data_axis, ", ", model_axis, ")") : model_axis;
      EXPECT_EQ(SbpOf(*compiled, tensor), expected) << layout.name << ": " << tensor;
    };
    for (int layer = 0; layer < 4; ++layer) {
      const std::string p = absl::StrCat("h.", layer, ".");
      for (const char* name : {"attn.q", "attn.k", "attn.v", "mlp.c_fc"}) {
        expect(absl::StrCat(p, name, ".weight"), "S(1)", "B");
        expect(absl::StrCat(p, name, ".bias"), "S(0)", "B");
      }
      for (const char* name : {"attn.c_proj", "mlp.c_proj"}) {
        expect(absl::StrCat(p, name, ".weight"), "S(0)", "B");
        expect(absl::StrCat(p, name, ".bias"), "B", "B");
      }
      for (const char* name : {"ln_1.weight", "ln_1.bias", "ln_2.weight", "ln_2.bias"}) {
        expect(p + name, "B", "B");
      }
      // Heads are split: the attention runs on H / tp heads per rank.
      expect(p + "attn.core", "S(1)", "S(0)");
      for (const char* name : {"attn.q", "attn.k", "attn.v", "mlp.c_fc", "mlp.gelu"}) {
        expect(p + name, "S(2)", "S(0)");
      }
      expect(p + "attn.residual", "B", "S(0)");
      expect(p + "mlp.residual", "B", "S(0)");
    }
    for (const char* name : {"wte", "wpe", "ln_f.weight", "ln_f.bias", "lm_head.weight"}) {
      expect(name, "B", "B");
    }
  }
}

TEST(GptJobTest, PipelineStagesHoldTheirBlocks) {
  GptConfig config = ConfigFor({"dp_pp", 2, 1, 2, 2});
  config.layers = 5;  // 3 blocks on stage 0, 2 on stage 1
  absl::StatusOr<job::Job> job = BuildGptJob(config);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->stage_placements_size(), 2);
  EXPECT_THAT(job->stage_placements(1).devices(), ::testing::ElementsAre("cpu:2", "cpu:3"));
  auto stage_devices = [](int stage) {
    return stage == 0 ? std::vector<std::string>{"cpu:0", "cpu:1"}
                      : std::vector<std::string>{"cpu:2", "cpu:3"};
  };
  for (const job::Variable& variable : job->variables()) {
    int stage = 0;
    if (variable.name().starts_with("h.3.") || variable.name().starts_with("h.4.") ||
        variable.name().starts_with("ln_f") || variable.name().starts_with("lm_head")) {
      stage = 1;
    }
    EXPECT_THAT(variable.placement().devices(), ::testing::ElementsAreArray(stage_devices(stage)))
        << variable.name();
  }
  for (const job::Op& op : job->ops()) {
    ASSERT_TRUE(op.has_stage()) << op.name();
    if (op.name().starts_with("h.2.")) {
      EXPECT_EQ(op.stage(), 0) << op.name();
    }
    if (op.name().starts_with("h.3.") || op.name() == "loss") {
      EXPECT_EQ(op.stage(), 1) << op.name();
    }
  }
  EXPECT_EQ(job->inputs(0).placement().devices(0), "cpu:0");
  EXPECT_EQ(job->inputs(1).placement().devices(0), "cpu:2");
  EXPECT_EQ(job->num_micro_batches(), 2);
  auto compiled = CompileOn(*job, 4);
  EXPECT_TRUE(compiled.ok()) << compiled.status();
}

TEST(GptJobTest, InterleavedStagesGoRoundRobinOverTheDeviceGroups) {
  GptConfig config = ConfigFor({"pp_v", 1, 1, 2, 4});
  config.virtual_stages = 2;
  config.schedule = job::INTERLEAVED;  // 4 blocks: block k on stage k, on group k % 2
  absl::StatusOr<job::Job> job = BuildGptJob(config);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->pipeline_schedule(), job::INTERLEAVED);
  ASSERT_EQ(job->stage_placements_size(), 4);
  for (int stage = 0; stage < 4; ++stage) {
    EXPECT_THAT(job->stage_placements(stage).devices(),
                ::testing::ElementsAre(absl::StrCat("cpu:", stage % 2)));
  }
  for (const job::Op& op : job->ops()) {
    for (int layer = 0; layer < 4; ++layer) {
      if (op.name().starts_with(absl::StrCat("h.", layer, "."))) {
        EXPECT_EQ(op.stage(), layer) << op.name();
      }
    }
    if (op.name() == "loss") {
      EXPECT_EQ(op.stage(), 3);
    }
  }
  EXPECT_EQ(job->inputs(1).placement().devices(0), "cpu:1");  // the labels, on the last stage
  EXPECT_EQ(GptDeviceCount(config), 2);
  auto compiled = CompileOn(*job, 2);
  EXPECT_TRUE(compiled.ok()) << compiled.status();
}

TEST(GptJobTest, RejectsBadConfigs) {
  struct Case {
    std::string what;
    void (*change)(GptConfig&);
    std::string message;
  };
  const Case cases[] = {
      {"heads not divisible by tp", [](GptConfig& c) { c.tensor_parallel = 3; },
       "heads 4 is not divisible by the tensor-parallel degree 3"},
      {"more stages than layers", [](GptConfig& c) { c.pipeline_stages = 5; },
       "layers 4 < pipeline stages 5"},
      {"more interleaved stages than layers",
       [](GptConfig& c) {
         c.pipeline_stages = 2;
         c.virtual_stages = 3;
         c.schedule = job::INTERLEAVED;
       },
       "layers 4 < pipeline stages 6"},
      {"stages overflowing",
       [](GptConfig& c) {
         c.pipeline_stages = int64_t{1} << 62;
         c.virtual_stages = 4;
         c.schedule = job::INTERLEAVED;
       },
       "pipeline stages 4611686018427387904 x 4 per device group overflow int64"},
      {"devices overflowing",
       [](GptConfig& c) {
         c.pipeline_stages = int64_t{1} << 40;
         c.data_parallel = int64_t{1} << 20;
         c.tensor_parallel = 8;
       },
       "devices pipeline_stages x data_parallel x tensor_parallel = 1099511627776 x 1048576 x 8 "
       "overflow int64"},
      {"virtual stages without interleaving", [](GptConfig& c) { c.virtual_stages = 2; },
       "virtual_stages 2 needs the interleaved schedule"},
      {"interleaving without virtual stages",
       [](GptConfig& c) {
         c.pipeline_stages = 2;
         c.schedule = job::INTERLEAVED;
       },
       "the interleaved schedule needs virtual_stages >= 2"},
      {"width not divisible by heads", [](GptConfig& c) { c.heads = 3; },
       "width 128 is not divisible by heads 3"},
      {"batch not divisible", [](GptConfig& c) { c.data_parallel = 3; },
       "batch 16 is not divisible by data_parallel x micro_batches = 3 x 1"},
      {"micro-batches", [](GptConfig& c) { c.micro_batches = 32; },
       "batch 16 is not divisible by data_parallel x micro_batches = 1 x 32"},
      {"zero layers", [](GptConfig& c) { c.layers = 0; }, "layers must be >= 1, got 0"},
      {"small vocabulary", [](GptConfig& c) { c.vocab = 100; }, "vocab 100 < 256"},
      {"data format", [](GptConfig& c) { c.data_format = "text"; }, "data format must be"},
      {"no data", [](GptConfig& c) { c.data_paths.clear(); }, "no data"},
      {"data weights",
       [](GptConfig& c) {
         c.data_weights = {1, 2};
       },
       "2 data weights for 1 data paths"},
      {"negative data weight", [](GptConfig& c) { c.data_weights = {-1}; },
       "data weights must be finite and > 0, got -1"},
      {"end of text beyond a byte",
       [](GptConfig& c) {
         c.end_of_text = 300;
         c.vocab = 512;
       },
       "the end-of-text token 300 is not a byte"},
      {"end of text beyond the vocabulary", [](GptConfig& c) { c.end_of_text = 256; },
       "the end-of-text token 256 is not below vocab 256"},
      {"negative clipping", [](GptConfig& c) { c.max_grad_norm = -1; }, "max_grad_norm"},
      {"matmul data type", [](GptConfig& c) { c.matmul_data_type = plan::INT32; },
       "matmul data type must be float32 or bfloat16, got int32"},
      {"mlp width",
       [](GptConfig& c) {
         c.tensor_parallel = 4;
         c.mlp_width = 510;
       },
       "mlp_width 510 is not divisible by the tensor-parallel degree 4"},
  };
  for (const Case& test : cases) {
    GptConfig config;
    test.change(config);
    absl::StatusOr<job::Job> job = BuildGptJob(config);
    ASSERT_FALSE(job.ok()) << test.what;
    EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument) << test.what;
    EXPECT_THAT(std::string(job.status().message()), HasSubstr(test.message)) << test.what;
    EXPECT_FALSE(WriteGptInitialWeights(config, "/nonexistent/never.safetensors").ok());
  }
}

TEST(GptJobTest, MixedPrecisionSetsTheJobsMatmulDataType) {
  GptConfig config;
  absl::StatusOr<job::Job> plain = BuildGptJob(config);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->matmul_data_type(), plan::DATA_TYPE_UNSPECIFIED);
  config.matmul_data_type = plan::BFLOAT16;
  absl::StatusOr<job::Job> mixed = BuildGptJob(config);
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  EXPECT_EQ(mixed->matmul_data_type(), plan::BFLOAT16);
}

TEST(GptJobTest, InitialWeightsFileHoldsEveryParameter) {
  GptConfig config;
  config.seed = 3;
  const std::string path =
      (std::filesystem::path(::testing::TempDir()) / "gpt_init.safetensors").string();
  ASSERT_TRUE(WriteGptInitialWeights(config, path).ok());
  absl::StatusOr<checkpoint::Checkpoint> file = checkpoint::ReadSafetensors(path);
  ASSERT_TRUE(file.ok()) << file.status();
  std::remove(path.c_str());
  EXPECT_EQ(file->metadata.at("model"), "gpt");
  EXPECT_EQ(file->metadata.at("seed"), "3");
  const std::vector<GptParameter> parameters = GptParameters(config);
  ASSERT_EQ(file->tensors.size(), parameters.size());
  for (const GptParameter& parameter : parameters) {
    const HostTensor& tensor = file->tensors.at(parameter.name);
    EXPECT_EQ(tensor.data_type, plan::FLOAT32);
    EXPECT_EQ(tensor.shape, Shape(parameter.shape)) << parameter.name;
    absl::Span<const float> values = tensor.Values<float>();
    double sum_squares = 0;
    for (float value : values) sum_squares += static_cast<double>(value) * value;
    const double rms = std::sqrt(sum_squares / values.size());
    switch (parameter.init) {
      case ParameterInit::kNormal:
        EXPECT_NEAR(rms, parameter.std, 0.1 * parameter.std) << parameter.name;
        break;
      case ParameterInit::kZeros:
        EXPECT_EQ(rms, 0.0) << parameter.name;
        break;
      case ParameterInit::kOnes:
        EXPECT_EQ(rms, 1.0) << parameter.name;
        break;
    }
  }
  // Different seeds, different weights; the projections are smaller.
  EXPECT_NE(file->tensors.at("wte").Values<float>()[0],
            InitialNormalValue(0.02, ParameterSeed(GptConfig{}, 0), 0));
}

// The file holds exactly what the job's initializers draw, so a run without --init starts from
// the same weights as one with it.
TEST(GptJobTest, InitialWeightsMatchTheJobInitializers) {
  GptConfig config;
  const std::vector<GptParameter> parameters = GptParameters(config);
  job::Job job;
  job.set_name("initializers");
  job.mutable_placement()->add_devices("cpu:0");
  job.mutable_placement()->add_devices("cpu:1");
  for (int position : {0, 16}) {  // wte, h.0.mlp.c_proj.weight
    const GptParameter& parameter = parameters[position];
    job::Variable* variable = job.add_variables();
    variable->set_name(parameter.name);
    for (int64_t extent : parameter.shape) variable->add_shape(extent);
    variable->mutable_initializer()->mutable_normal()->set_std(parameter.std);
    variable->mutable_initializer()->mutable_normal()->set_seed(ParameterSeed(config, position));
    variable->add_sbp("S(0)");
    job::Op* op = job.add_ops();
    op->set_name(parameter.name + ".copy");
    op->set_type("identity");
    op->add_inputs(parameter.name);
    op->add_outputs(parameter.name + ".copy");
    job.add_fetch(parameter.name + ".copy");
  }
  auto fetched = CompileAndRun(job, 2);
  ASSERT_TRUE(fetched.ok()) << fetched.status();
  for (int position : {0, 16}) {
    const GptParameter& parameter = parameters[position];
    absl::Span<const float> values = fetched->at(parameter.name + ".copy").at(0).Values<float>();
    ASSERT_EQ(static_cast<int64_t>(values.size()), Shape(parameter.shape).NumElements());
    for (size_t i = 0; i < values.size(); i += 97) {
      ASSERT_EQ(values[i], InitialNormalValue(parameter.std, ParameterSeed(config, position), i))
          << parameter.name << " element " << i;
    }
  }
}

// Data x tensor parallelism: the gradients whose boxing is only the data-parallel all-reduce
// (replicated ones and those split the same way as their tensor-parallel variable) are
// all-reduced in buckets; training is the same without buckets.
TEST(GptJobTest, DataParallelGradientsAreAllReducedInBuckets) {
  GptConfig config = ConfigFor({"DataParallel2TensorParallel2", 2, 2});
  absl::StatusOr<job::Job> bucketed = BuildGptJob(config);
  ASSERT_TRUE(bucketed.ok()) << bucketed.status();
  job::Job unbucketed = *bucketed;
  unbucketed.set_gradient_bucket_bytes(-1);
  // All-reduces of single gradients and of buckets, over the ranks.
  auto count = [](const job::Job& job) -> std::pair<int, int> {
    auto compiled = CompileOn(job, 4);
    EXPECT_TRUE(compiled.ok()) << compiled.status();
    if (!compiled.ok()) return {-1, -1};
    std::pair<int, int> counts;
    for (const plan::Task& task : compiled->plan.tasks()) {
      if (task.kind() != plan::COLLECTIVE || task.collective().kind() != plan::ALL_REDUCE) continue;
      if (task.inputs(0).rfind("grad/", 0) == 0) ++counts.first;
      if (task.inputs(0).rfind("gradient_bucket.", 0) == 0) ++counts.second;
    }
    return counts;
  };
  const auto [single_with, buckets_with] = count(*bucketed);
  const auto [single_without, buckets_without] = count(unbucketed);
  EXPECT_EQ(buckets_without, 0);
  // On every rank: the bucket of gradients partial on the data-parallel axis only (one
  // all-reduce), the bucket of those partial on both axes (one all-reduce per axis), and the
  // bucket of those partial on both whose variables the tensor-parallel axis splits (one
  // all-reduce per axis, then each rank keeps its shards: packed shard by shard).
  EXPECT_EQ(buckets_with, 5 * 4);
  EXPECT_LT(single_with, single_without - buckets_with);
  auto with_buckets = CompileAndRun(*bucketed, 4);
  ASSERT_TRUE(with_buckets.ok()) << with_buckets.status();
  auto without_buckets = CompileAndRun(unbucketed, 4);
  ASSERT_TRUE(without_buckets.ok()) << without_buckets.status();
  ::loom::compiler::testing::ExpectSameFetches(*without_buckets, *with_buckets, 1e-6, "buckets");
}

}  // namespace
}  // namespace loom::gpt
