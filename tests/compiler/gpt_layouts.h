#ifndef LOOM_TESTS_COMPILER_GPT_LAYOUTS_H_
#define LOOM_TESTS_COMPILER_GPT_LAYOUTS_H_

// A tiny GPT (tools/loom-gpt) on the layouts the memory-sharing tests cover (one device, DP, TP,
// PP with 1F1B, GPipe and interleaved, TP x PP zero bubble, DP x PP with clipping, micro-batches,
// MoE with EP, DP x TP in bfloat16, stages on two nodes), compiled with or without register memory
// sharing; and a check that two layouts train bit for bit alike.

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/compiler.h"
#include "gtest/gtest.h"
#include "proto/job.pb.h"
#include "tests/compiler/compiler_test_util.h"
#include "tests/compiler/run_util.h"
#include "tools/loom-gpt/gpt_model.h"

namespace loom::compiler::testing {

struct GptLayout {
  std::string name;
  int64_t data_parallel = 1;
  int64_t tensor_parallel = 1;
  int64_t pipeline_stages = 1;
  int64_t micro_batches = 1;
  job::PipelineSchedule schedule = job::ONE_F_ONE_B;
  int64_t virtual_stages = 1;  // stages per device group (INTERLEAVED)
  int64_t experts = 0;
  int64_t expert_parallel = 1;
  double max_grad_norm = 0;
  plan::DataType matmul_data_type = plan::FLOAT32;
  int64_t zero_stage = 0;
  job::Recompute recompute = job::RECOMPUTE_NONE;
  job::OffloadActivations offload_activations = job::OFFLOAD_NONE;
  std::string device_type = "cpu";  // GptConfig.device_type: "cuda" places the model on GPUs
  int nodes = 1;

  int devices() const {
    return static_cast<int>(data_parallel * tensor_parallel * pipeline_stages);
  }
};

inline void PrintTo(const GptLayout& layout, std::ostream* out) { *out << layout.name; }

inline std::vector<GptLayout> SharingLayouts() {
  return {
      GptLayout{.name = "one_device"},
      GptLayout{.name = "one_device_bf16", .matmul_data_type = plan::BFLOAT16},
      GptLayout{.name = "dp2", .data_parallel = 2},
      GptLayout{.name = "tp2", .tensor_parallel = 2},
      GptLayout{.name = "pp2_m4_1f1b", .pipeline_stages = 2, .micro_batches = 4},
      GptLayout{
          .name = "pp2_m4_gpipe", .pipeline_stages = 2, .micro_batches = 4, .schedule = job::GPIPE},
      GptLayout{.name = "dp2_pp2_m2_clipped",
                .data_parallel = 2,
                .pipeline_stages = 2,
                .micro_batches = 2,
                .max_grad_norm = 0.5},
      // The layout that stalled before the plan proof, with its weight gradients deferred.
      GptLayout{.name = "tp2_pp2_m4_zero_bubble_clipped",
                .tensor_parallel = 2,
                .pipeline_stages = 2,
                .micro_batches = 4,
                .schedule = job::ZERO_BUBBLE,
                .max_grad_norm = 0.5},
      // Two stages on each device (stashes of rounds sharing a device).
      GptLayout{.name = "pp2_v2_m4_interleaved_clipped",
                .pipeline_stages = 2,
                .micro_batches = 4,
                .schedule = job::INTERLEAVED,
                .virtual_stages = 2,
                .max_grad_norm = 0.5},
      // Micro-batches without stages: each stream's chain orders micro-batch n + 1 after n.
      GptLayout{.name = "m4_one_device", .micro_batches = 4},
      GptLayout{.name = "dp2_m4_zero3_clipped",
                .data_parallel = 2,
                .micro_batches = 4,
                .max_grad_norm = 0.5,
                .zero_stage = 3},
      GptLayout{.name = "tp2_m2_bf16",
                .tensor_parallel = 2,
                .micro_batches = 2,
                .matmul_data_type = plan::BFLOAT16},
      GptLayout{.name = "dp2_ep2_moe", .data_parallel = 2, .experts = 4, .expert_parallel = 2},
      GptLayout{.name = "dp2_tp2_bf16_clipped",
                .data_parallel = 2,
                .tensor_parallel = 2,
                .max_grad_norm = 0.5,
                .matmul_data_type = plan::BFLOAT16},
      // ZeRO: gathers per use ordered one use ahead, reduce-scatters before the next gradient.
      GptLayout{
          .name = "dp2_zero3_clipped", .data_parallel = 2, .max_grad_norm = 0.5, .zero_stage = 3},
      GptLayout{.name = "dp2_tp2_zero3", .data_parallel = 2, .tensor_parallel = 2, .zero_stage = 3},
      // Stages on two nodes: SEND / RECEIVE pairs between the node plans.
      GptLayout{
          .name = "pp2_m4_1f1b_two_nodes", .pipeline_stages = 2, .micro_batches = 4, .nodes = 2},
  };
}

// The 1F1B layouts on which each other schedule is checked to train bit for bit alike: PP, DP x PP
// clipped, TP x PP clipped in bfloat16, MoE with EP, ZeRO-3 under PP.
inline std::vector<GptLayout> PipelineScheduleLayouts() {
  return {GptLayout{.name = "pp2_m4", .pipeline_stages = 2, .micro_batches = 4},
          GptLayout{.name = "dp2_pp2_m2_clipped",
                    .data_parallel = 2,
                    .pipeline_stages = 2,
                    .micro_batches = 2,
                    .max_grad_norm = 0.5},
          GptLayout{.name = "tp2_pp2_m4_clipped_bf16",
                    .tensor_parallel = 2,
                    .pipeline_stages = 2,
                    .micro_batches = 4,
                    .max_grad_norm = 0.5,
                    .matmul_data_type = plan::BFLOAT16},
          GptLayout{.name = "moe_dp2_ep2_pp2_m2",
                    .data_parallel = 2,
                    .pipeline_stages = 2,
                    .micro_batches = 2,
                    .experts = 4,
                    .expert_parallel = 2},
          GptLayout{.name = "dp2_pp2_m4_zero3",
                    .data_parallel = 2,
                    .pipeline_stages = 2,
                    .micro_batches = 4,
                    .zero_stage = 3}};
}

// The layouts of SharingLayouts on one node (the whole plan runs in one process).
inline std::vector<GptLayout> OneNodeSharingLayouts() {
  std::vector<GptLayout> layouts;
  for (const GptLayout& layout : SharingLayouts()) {
    if (layout.nodes == 1) layouts.push_back(layout);
  }
  return layouts;
}

// Sets `layout`'s parallelism, micro-batches, schedule, experts, clipping and precision on a model
// configuration.
inline void ApplyLayout(const GptLayout& layout, gpt::GptConfig& config) {
  config.data_parallel = layout.data_parallel;
  config.tensor_parallel = layout.tensor_parallel;
  config.pipeline_stages = layout.pipeline_stages;
  config.micro_batches = layout.micro_batches;
  config.schedule = layout.schedule;
  config.virtual_stages = layout.virtual_stages;
  config.experts = layout.experts;
  config.expert_parallel = layout.expert_parallel;
  config.max_grad_norm = layout.max_grad_norm;
  config.matmul_data_type = layout.matmul_data_type;
  config.zero_stage = layout.zero_stage;
  config.recompute = layout.recompute;
  config.offload_activations = layout.offload_activations;
  config.device_type = layout.device_type;
  if (layout.nodes > 1) config.devices_per_node = layout.devices() / layout.nodes;
}

// The tiny GPT (vocabulary 256, context 16, width 32, 4 layers, 3 steps) on `layout`.
inline absl::StatusOr<job::Job> GptJobOn(const GptLayout& layout, job::RegisterMemory memory) {
  gpt::GptConfig config;
  config.vocab = 256;
  config.context = 16;
  config.width = 32;
  config.layers = 4;
  config.heads = 2;
  config.mlp_width = 64;
  config.batch = 8;
  config.steps = 3;
  ApplyLayout(layout, config);
  absl::StatusOr<job::Job> job = gpt::BuildGptJob(config);
  if (!job.ok()) return job.status();
  job->set_register_memory(memory);
  return job;
}

inline absl::StatusOr<CompileResult> CompileGpt(const GptLayout& layout,
                                                job::RegisterMemory memory) {
  absl::StatusOr<job::Job> job = GptJobOn(layout, memory);
  if (!job.ok()) return job.status();
  return CompileOn(*job, layout.devices(), layout.nodes);
}

// Trains the tiny GPT on `reference` and on `other` (another schedule or placement of the same
// arithmetic) and fails the test unless every fetched value of every step has the same bits.
inline void ExpectTrainsBitForBitAs(const GptLayout& reference, const GptLayout& other) {
  absl::StatusOr<job::Job> reference_job = GptJobOn(reference, job::REGISTER_MEMORY_SHARED);
  ASSERT_TRUE(reference_job.ok()) << reference_job.status();
  absl::StatusOr<job::Job> other_job = GptJobOn(other, job::REGISTER_MEMORY_SHARED);
  ASSERT_TRUE(other_job.ok()) << other_job.status();
  absl::StatusOr<std::map<std::string, std::vector<HostTensor>>> expected =
      CompileAndRun(*reference_job, reference.devices());
  ASSERT_TRUE(expected.ok()) << expected.status();
  absl::StatusOr<std::map<std::string, std::vector<HostTensor>>> actual =
      CompileAndRun(*other_job, other.devices());
  ASSERT_TRUE(actual.ok()) << actual.status();
  ExpectBitIdentical(*expected, *actual, other.name);
}

}  // namespace loom::compiler::testing

#endif  // LOOM_TESTS_COMPILER_GPT_LAYOUTS_H_
