// What emerges from credits and priorities: pipeline overlap, backward-first scheduling, and the
// micro-batching trio.
#include <algorithm>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/runtime/runtime_test_util.h"

namespace loom::testing {
namespace {

using ::testing::ElementsAreArray;

bool Overlap(const ActEvent& a, const ActEvent& b) {
  return a.start_nanoseconds < b.end_nanoseconds && b.start_nanoseconds < a.end_nanoseconds;
}

TEST(SchedulingTest, FourStagePipelineOverlapsStages) {
  // 4 stages on 4 CPU devices, 2 slots per boundary, 16 pieces, each stage sleeping 5 ms.
  const int stages = 4;
  const int pieces = 16;
  PlanBuilder builder("pipeline");
  builder.AddCpuDevices(stages);
  builder.AddRegister("input", {16}, plan::FLOAT32, 2);
  builder.AddTask("source", plan::SOURCE, 0, {}, {"input"}, "test_piece").set_num_pieces(pieces);
  std::string previous = "input";
  for (int s = 0; s < stages; ++s) {
    std::string output = "boundary" + std::to_string(s);
    builder.AddRegister(output, {16}, plan::FLOAT32, 2);
    plan::Task& stage =
        builder.AddTask("stage" + std::to_string(s), plan::COMPUTE, s, {previous}, {output}, "sleep");
    PlanBuilder::SetAttribute(stage, "microseconds", 5000);
    previous = output;
  }
  builder.AddTask("sink", plan::SINK, stages - 1, {previous}, {});
  auto job = MakeJob(builder.plan());
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Run().ok());

  // Stage s works on piece i+1 while stage s+1 works on piece i.
  int overlapping = 0;
  int pairs = 0;
  for (int s = 0; s + 1 < stages; ++s) {
    std::vector<ActEvent> upstream = EventsOf(**job, "stage" + std::to_string(s));
    std::vector<ActEvent> downstream = EventsOf(**job, "stage" + std::to_string(s + 1));
    ASSERT_EQ(upstream.size(), pieces);
    ASSERT_EQ(downstream.size(), pieces);
    for (int i = 0; i + 1 < pieces; ++i) {
      ASSERT_EQ(upstream[i + 1].piece, i + 1);
      ASSERT_EQ(downstream[i].piece, i);
      ++pairs;
      if (Overlap(upstream[i + 1], downstream[i])) ++overlapping;
    }
  }
  // Wake-up tails on a loaded 2-core machine can delay a rare act by milliseconds; the overlap
  // must still be the rule. (Serial execution would give zero overlapping pairs.)
  EXPECT_GE(overlapping, pairs * 9 / 10) << overlapping << " of " << pairs << " pairs overlap";
  // And the whole run is far shorter than running the stages one after another.
  EXPECT_LT((*job)->makespan_nanoseconds(), int64_t{stages} * pieces * 5'000'000 * 6 / 10);
}

TEST(SchedulingTest, HigherPriorityActsFirstOnAThread) {
  // Two sources on one thread, both able to act from the start: the high-priority one (think
  // backward) takes every act it can before the low-priority one (forward) gets the thread.
  PlanBuilder builder("priority");
  builder.AddCpuDevices(2);
  builder.AddRegister("low_out", {4}, plan::FLOAT32, 3).AddRegister("high_out", {4}, plan::FLOAT32, 3);
  builder.AddTask("low", plan::SOURCE, 0, {}, {"low_out"}, "test_piece").set_num_pieces(10);
  plan::Task& high = builder.AddTask("high", plan::SOURCE, 0, {}, {"high_out"}, "test_piece");
  high.set_num_pieces(10);
  high.set_priority(10);
  builder.AddTask("low_sink", plan::SINK, 1, {"low_out"}, {});
  builder.AddTask("high_sink", plan::SINK, 1, {"high_out"}, {});
  for (int attempt = 0; attempt < 10; ++attempt) {
    auto job = MakeJob(builder.plan());
    ASSERT_TRUE(job.ok()) << job.status();
    ASSERT_TRUE((*job)->Run().ok());
    uint32_t high_index = (*job)->FindActor("high")->id().task_index();
    uint32_t low_index = (*job)->FindActor("low")->id().task_index();
    std::vector<uint32_t> order;
    for (const ActEvent& event : (*job)->events()) {
      if (event.task_index == high_index || event.task_index == low_index) {
        order.push_back(event.task_index);
      }
    }
    ASSERT_EQ(order.size(), 20u);
    // High fills its three slots before low acts at all (more, if slots came back meanwhile).
    for (int i = 0; i < 3; ++i) EXPECT_EQ(order[i], high_index) << "act " << i;
  }
}

TEST(SchedulingTest, UnpackRepeatAccumulate) {
  // A batch [8, 2] per step, 3 steps, 4 micro-batches of [2, 2]. Each micro-batch is added to a
  // variable read M times (repeat), and the 4 results are summed per step (accumulate).
  PlanBuilder builder("micro_batches");
  builder.AddCpuDevices(1);
  builder.AddRegister("batch", {8, 2}).AddRegister("micro", {2, 2});
  builder.AddRegister("variable", {2, 2}).AddRegister("repeated", {2, 2});
  builder.AddRegister("sum", {2, 2}).AddRegister("accumulated", {2, 2});
  plan::Task& batch = builder.AddTask("batch", plan::SOURCE, 0, {}, {"batch"}, "random");
  batch.set_num_pieces(3);
  PlanBuilder::SetAttribute(batch, "seed", 7);
  plan::Task& variable = builder.AddTask("variable", plan::SOURCE, 0, {}, {"variable"}, "fill");
  variable.set_num_pieces(3);
  PlanBuilder::SetFloatAttribute(variable, "value", 0.5);
  builder.AddTask("unpack", plan::UNPACK, 0, {"batch"}, {"micro"}).set_factor(4);
  builder.AddTask("repeat", plan::REPEAT, 0, {"variable"}, {"repeated"}).set_factor(4);
  builder.AddTask("add", plan::COMPUTE, 0, {"micro", "repeated"}, {"sum"}, "add");
  builder.AddTask("accumulate", plan::ACCUMULATE, 0, {"sum"}, {"accumulated"}).set_factor(4);
  builder.AddTask("batch_sink", plan::SINK, 0, {"batch"}, {});
  builder.AddTask("sink", plan::SINK, 0, {"accumulated"}, {});
  // The batch sink reads the batch too, so the unpack and the sink share its slots.
  auto job = MakeJob(builder.plan());
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Run().ok());

  auto batches = FetchedPieces(**job, "batch_sink");
  auto sums = FetchedPieces(**job, "sink");
  ASSERT_TRUE(batches.ok() && sums.ok());
  ASSERT_EQ((**batches)[0].size(), 3u);
  ASSERT_EQ((**sums)[0].size(), 3u);
  for (int step = 0; step < 3; ++step) {
    absl::Span<const float> full = (**batches)[0][step].Values<float>();
    std::vector<float> expected(4, 4 * 0.5f);
    for (int micro = 0; micro < 4; ++micro) {
      for (int i = 0; i < 4; ++i) expected[i] += full[micro * 4 + i];
    }
    absl::Span<const float> got = (**sums)[0][step].Values<float>();
    for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(got[i], expected[i]) << "step " << step;
  }
  // Micro-batch piece numbering: unpack made pieces 0..11, accumulate 0..2.
  std::vector<int64_t> unpack_pieces;
  for (const ActEvent& event : EventsOf(**job, "unpack")) unpack_pieces.push_back(event.piece);
  std::vector<int64_t> expected_pieces;
  for (int i = 0; i < 12; ++i) expected_pieces.push_back(i);
  EXPECT_THAT(unpack_pieces, ElementsAreArray(expected_pieces));
}

}  // namespace
}  // namespace loom::testing
