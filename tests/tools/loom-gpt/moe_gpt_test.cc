// The MoE GPT (tools/loom-gpt with experts): every expert-parallel layout trains as one device does
// (losses and dropped-assignment counts), the experts' split is what the compiler boxes with
// all-to-alls, skewed routing counts its drops and stays finite, and bad MoE settings are compile
// errors naming the op.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/compiler/compiler_test_util.h"
#include "tests/compiler/run_util.h"
#include "tools/loom-gpt/gpt_model.h"

namespace loom::gpt {
namespace {

using ::loom::compiler::testing::Collectives;
using ::loom::compiler::testing::CompileAndRun;
using ::loom::compiler::testing::CompileOn;
using ::testing::HasSubstr;

struct MoeLayout {
  std::string name;
  int64_t dp = 1;
  int64_t ep = 1;
  int64_t pp = 1;
  int64_t micro_batches = 1;
};

GptConfig MoeConfig(const MoeLayout& layout) {
  GptConfig config;
  config.experts = 4;
  config.data_parallel = layout.dp;
  config.expert_parallel = layout.ep;
  config.pipeline_stages = layout.pp;
  config.micro_batches = layout.micro_batches;
  config.steps = 3;
  return config;
}

// A fetch's pieces (micro-batches) per step: their mean (`mean`) or sum, element by element.
std::vector<std::vector<double>> PerStep(const std::vector<HostTensor>& pieces, int micro_batches,
                                         bool mean) {
  std::vector<std::vector<double>> steps;
  for (size_t piece = 0; piece < pieces.size(); ++piece) {
    absl::Span<const float> values = pieces[piece].Values<float>();
    if (piece % micro_batches == 0) steps.emplace_back(values.size(), 0.0);
    for (size_t i = 0; i < values.size(); ++i) {
      steps.back()[i] += mean ? values[i] / micro_batches : values[i];
    }
  }
  return steps;
}

class MoeGptLayoutTest : public ::testing::TestWithParam<MoeLayout> {};

TEST_P(MoeGptLayoutTest, TrainsAsOneDeviceDoes) {
  const MoeLayout& layout = GetParam();
  MoeLayout one_device{"OneDevice"};
  one_device.micro_batches = layout.micro_batches;
  absl::StatusOr<job::Job> reference = BuildGptJob(MoeConfig(one_device));
  ASSERT_TRUE(reference.ok()) << reference.status();
  absl::StatusOr<job::Job> job = BuildGptJob(MoeConfig(layout));
  ASSERT_TRUE(job.ok()) << job.status();
  const int devices = static_cast<int>(GptDeviceCount(MoeConfig(layout)));

  // Expert parallelism is the all-to-all boxing between the token-split and expert-split
  // tensors (none when every device holds every expert).
  auto compiled = CompileOn(*job, devices);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  EXPECT_EQ(Collectives(compiled->plan, plan::ALL_TO_ALL).empty(), layout.ep == 1) << layout.name;

  auto expected = CompileAndRun(*reference, 1);
  ASSERT_TRUE(expected.ok()) << expected.status();
  auto actual = CompileAndRun(*job, devices);
  ASSERT_TRUE(actual.ok()) << actual.status();
  // Per step: micro-batches hold different samples when data parallelism splits the batch first,
  // so the step's mean loss and summed counts are what must agree.
  const int micro_batches = static_cast<int>(layout.micro_batches);
  for (const char* name : {"loss", "moe.dropped", "moe.tokens_per_expert"}) {
    const bool mean = std::string(name) == "loss";
    const std::vector<std::vector<double>> want = PerStep(expected->at(name), micro_batches, mean);
    const std::vector<std::vector<double>> got = PerStep(actual->at(name), micro_batches, mean);
    ASSERT_EQ(got.size(), 3u) << name;
    ASSERT_EQ(want.size(), got.size()) << name;
    for (size_t step = 0; step < want.size(); ++step) {
      ASSERT_EQ(want[step].size(), got[step].size()) << name;
      for (size_t i = 0; i < want[step].size(); ++i) {
        EXPECT_NEAR(got[step][i], want[step][i], 1e-5 * std::max(1.0, std::abs(want[step][i])))
            << layout.name << ": '" << name << "' step " << step << " element " << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, MoeGptLayoutTest,
                         ::testing::Values(MoeLayout{"ExpertsReplicatedDataParallel2", 2, 1},
                                           MoeLayout{"ExpertParallel2", 2, 2},
                                           MoeLayout{"ExpertParallel4", 4, 4},
                                           MoeLayout{"DataParallel2ExpertParallel2", 4, 2},
                                           MoeLayout{"Pipeline2ExpertParallel2", 2, 2, 2, 2}),
                         [](const auto& info) { return info.param.name; });

TEST(MoeGptTest, ParametersAreTheExpertsAndTheRouterInMoeBlocks) {
  const std::vector<GptParameter> parameters = GptParameters(MoeConfig({"ExpertParallel2", 2, 2}));
  auto find = [&](const std::string& name) -> const GptParameter* {
    for (const GptParameter& parameter : parameters) {
      if (parameter.name == name) return &parameter;
    }
    return nullptr;
  };
  for (int layer : {1, 3}) {
    const std::string prefix = absl::StrCat("h.", layer, ".moe.");
    ASSERT_NE(find(prefix + "router.weight"), nullptr);
    EXPECT_EQ(find(prefix + "router.weight")->shape, (std::vector<int64_t>{128, 4}));
    EXPECT_EQ(find(prefix + "experts.c_fc.weight")->shape, (std::vector<int64_t>{4, 128, 512}));
    EXPECT_EQ(find(prefix + "experts.c_fc.bias")->shape, (std::vector<int64_t>{4, 512}));
    EXPECT_EQ(find(prefix + "experts.c_proj.weight")->shape, (std::vector<int64_t>{4, 512, 128}));
    EXPECT_EQ(find(prefix + "experts.c_proj.bias")->shape, (std::vector<int64_t>{4, 128}));
    EXPECT_TRUE(find(prefix + "experts.c_fc.weight")->expert);
    EXPECT_FALSE(find(prefix + "router.weight")->expert);
    EXPECT_EQ(find(absl::StrCat("h.", layer, ".mlp.c_fc.weight")), nullptr);
  }
  EXPECT_NE(find("h.0.mlp.c_fc.weight"), nullptr);
  EXPECT_NE(find("h.2.mlp.c_fc.weight"), nullptr);
}

TEST(MoeGptTest, SkewedRoutingCountsItsDropsAndStaysFinite) {
  // A router of equal weights gives every token equal probabilities: ties go to the lower
  // expert, so every token's first choice is expert 0 and its second expert 1. Per sequence (64
  // tokens, 40 slots per expert) 24 first and 24 second choices are dropped: 48 x 16 sequences
  // x 2 MoE layers in the first step.
  GptConfig config = MoeConfig({"ExpertParallel2", 2, 2});
  config.steps = 5;
  absl::StatusOr<job::Job> job = BuildGptJob(config);
  ASSERT_TRUE(job.ok()) << job.status();
  for (job::Variable& variable : *job->mutable_variables()) {
    if (variable.name().ends_with("moe.router.weight")) {
      variable.mutable_initializer()->Clear();
      variable.mutable_initializer()->set_constant(0.0);
    }
  }
  auto fetches = CompileAndRun(*job, 2);
  ASSERT_TRUE(fetches.ok()) << fetches.status();
  const std::vector<HostTensor>& dropped = fetches->at("moe.dropped");
  ASSERT_EQ(dropped.size(), 5u);
  EXPECT_EQ(dropped[0].Values<float>()[0], 48 * 16 * 2);
  const std::vector<HostTensor>& per_expert = fetches->at("moe.tokens_per_expert");
  EXPECT_THAT(std::vector<float>(per_expert[0].Values<float>().begin(),
                                 per_expert[0].Values<float>().end()),
              ::testing::ElementsAre(64 * 16 * 2, 64 * 16 * 2, 0, 0));
  for (const HostTensor& loss : fetches->at("loss")) {
    EXPECT_TRUE(std::isfinite(loss.Values<float>()[0]));
  }
}

TEST(MoeGptTest, BadMoeSettingsAreCompileErrorsNamingTheOp) {
  struct Case {
    std::string what;
    void (*change)(GptConfig&);
    std::string message;
  };
  const Case cases[] = {
      {"k > E",
       [](GptConfig& c) {
         c.experts = 1;
         c.top_k = 2;
       },
       "op 'h.1.moe.route' (moe_route): attribute 'k' = 2 is more than the 1 experts"},
      {"capacity factor 0", [](GptConfig& c) { c.capacity_factor = 0; },
       "op 'h.1.moe.route' (moe_route): attribute 'capacity_factor' must be finite and > 0"},
      {"capacity factor < 0", [](GptConfig& c) { c.capacity_factor = -1; },
       "op 'h.1.moe.route' (moe_route): attribute 'capacity_factor' must be finite and > 0"},
      {"E not divisible by EP",
       [](GptConfig& c) {
         c.experts = 3;
         c.data_parallel = 2;
         c.expert_parallel = 2;
       },
       "op 'h.1.moe.experts.rows' (reshape): no SBP signature"},
  };
  for (const Case& test : cases) {
    GptConfig config = MoeConfig({"OneDevice"});
    test.change(config);
    absl::StatusOr<job::Job> job = BuildGptJob(config);
    ASSERT_TRUE(job.ok()) << test.what << ": " << job.status();
    auto compiled = CompileOn(*job, static_cast<int>(GptDeviceCount(config)));
    ASSERT_FALSE(compiled.ok()) << test.what;
    EXPECT_EQ(compiled.status().code(), absl::StatusCode::kInvalidArgument) << test.what;
    EXPECT_THAT(std::string(compiled.status().message()), HasSubstr(test.message)) << test.what;
  }
}

}  // namespace
}  // namespace loom::gpt
