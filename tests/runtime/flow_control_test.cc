// Credit-based flow control, reader counts and END_OF_DATA over the shapes plans take.
#include <algorithm>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/runtime/runtime_test_util.h"

namespace loom::testing {
namespace {

using ::testing::ElementsAreArray;

std::vector<float> Range(int count, float offset) {
  std::vector<float> values;
  for (int i = 0; i < count; ++i) values.push_back(static_cast<float>(i) + offset);
  return values;
}

TEST(FlowControlTest, ChainDeliversEveryPieceInOrder) {
  PlanBuilder builder("chain");
  builder.AddCpuDevices(1);
  builder.AddRegister("x", {4}).AddRegister("y", {4});
  builder.AddTask("source", plan::SOURCE, 0, {}, {"x"}, "test_piece").set_num_pieces(50);
  builder.AddTask("plus", plan::COMPUTE, 0, {"x"}, {"y"}, "test_sum_plus_one");
  builder.AddTask("sink", plan::SINK, 0, {"y"}, {});
  auto job = MakeJob(builder.plan());
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Run().ok());
  EXPECT_THAT(SinkValues(**job, "sink"), ElementsAreArray(Range(50, 1.0f)));
  for (const ActorSummary& summary : (*job)->Summaries()) {
    EXPECT_EQ(summary.acts, summary.kind == plan::SINK || summary.kind == plan::COMPUTE ||
                                    summary.kind == plan::SOURCE
                                ? 50
                                : 0)
        << summary.name;
  }
}

// A fast producer with k output slots is never more than k pieces ahead of a slow consumer:
// from the event record, the producer starts piece p only after the consumer finished p - k.
class BackPressureTest : public ::testing::TestWithParam<int> {};

TEST_P(BackPressureTest, ProducerNeverMoreThanSlotsAhead) {
  const int slots = GetParam();
  const int pieces = 40;
  PlanBuilder builder("back_pressure");
  builder.AddCpuDevices(2);
  builder.AddRegister("x", {8}, plan::FLOAT32, slots).AddRegister("y", {8});
  builder.AddTask("fast", plan::SOURCE, 0, {}, {"x"}, "test_piece").set_num_pieces(pieces);
  plan::Task& slow = builder.AddTask("slow", plan::COMPUTE, 1, {"x"}, {"y"}, "test_spin");
  PlanBuilder::SetAttribute(slow, "microseconds", 300);
  builder.AddTask("sink", plan::SINK, 1, {"y"}, {});
  auto job = MakeJob(builder.plan());
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Run().ok());

  std::vector<ActEvent> produced = EventsOf(**job, "fast");
  std::vector<ActEvent> consumed = EventsOf(**job, "slow");
  ASSERT_EQ(produced.size(), pieces);
  ASSERT_EQ(consumed.size(), pieces);
  int max_ahead = 0;
  for (int p = 0; p < pieces; ++p) {
    EXPECT_EQ(produced[p].piece, p);
    EXPECT_EQ(consumed[p].piece, p);
    if (p >= slots) {
      EXPECT_GE(produced[p].start_nanoseconds, consumed[p - slots].end_nanoseconds)
          << "piece " << p << " produced before the consumer returned piece " << p - slots;
    }
    // How many pieces the producer had made when the consumer started piece p.
    int ahead = 0;
    for (const ActEvent& event : produced) {
      if (event.end_nanoseconds <= consumed[p].start_nanoseconds) ++ahead;
    }
    max_ahead = std::max(max_ahead, ahead - p);
  }
  EXPECT_LE(max_ahead, slots);
  // With a slow consumer the producer does run ahead: the bound is reached, not just respected.
  EXPECT_EQ(max_ahead, slots);
}

INSTANTIATE_TEST_SUITE_P(Slots, BackPressureTest, ::testing::Values(1, 2, 3));

// Task.input_lookahead: the act on piece j waits until the input holds pieces up to j + k, or
// to the last piece of j's step; it still reads piece j.
TEST(FlowControlTest, LookaheadWaitsForLaterPiecesOfTheStep) {
  constexpr int kPieces = 12;
  constexpr int kPiecesPerStep = 4;
  constexpr int kLookahead = 2;
  PlanBuilder builder("lookahead");
  builder.AddCpuDevices(2);
  builder.AddRegister("s", {4}).AddRegister("x", {4}, plan::FLOAT32, kLookahead + 2);
  builder.AddRegister("y", {4});
  builder.AddTask("source", plan::SOURCE, 0, {}, {"s"}, "test_piece").set_num_pieces(kPieces);
  plan::Task& slow = builder.AddTask("slow", plan::COMPUTE, 0, {"s"}, {"x"}, "test_spin");
  PlanBuilder::SetAttribute(slow, "microseconds", 300);
  plan::Task& late = builder.AddTask("late", plan::COMPUTE, 1, {"x"}, {"y"}, "test_sum_plus_one");
  late.set_pieces_per_step(kPiecesPerStep);
  late.add_input_lookahead(kLookahead);
  builder.AddTask("sink", plan::SINK, 1, {"y"}, {});
  auto job = MakeJob(builder.plan());
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Run().ok());
  // Piece j's own values, each plus one.
  EXPECT_THAT(SinkValues(**job, "sink"), ElementsAreArray(Range(kPieces, 1.0f)));
  const std::vector<ActEvent> written = EventsOf(**job, "slow");
  const std::vector<ActEvent> read = EventsOf(**job, "late");
  ASSERT_EQ(written.size(), kPieces);
  ASSERT_EQ(read.size(), kPieces);
  for (int j = 0; j < kPieces; ++j) {
    const int last_of_step = (j / kPiecesPerStep + 1) * kPiecesPerStep - 1;
    const int awaited = std::min(j + kLookahead, last_of_step);
    EXPECT_GE(read[j].start_nanoseconds, written[awaited].end_nanoseconds) << "piece " << j;
  }
}

// An ordering input (Task.ordering_inputs) holds the act back until its piece is READY, but the
// kernel never sees it: 'plus' computes s + 1 from its first input alone.
TEST(FlowControlTest, OrderingInputsOrderActsWithoutFeedingTheKernel) {
  constexpr int kPieces = 8;
  PlanBuilder builder("ordering");
  builder.AddCpuDevices(2);
  builder.AddRegister("s", {4}).AddRegister("g", {4}).AddRegister("gate", {4});
  builder.AddRegister("y", {4});
  builder.AddTask("source", plan::SOURCE, 0, {}, {"s"}, "test_piece").set_num_pieces(kPieces);
  builder.AddTask("gate_source", plan::SOURCE, 1, {}, {"g"}, "test_piece").set_num_pieces(kPieces);
  plan::Task& slow = builder.AddTask("slow", plan::COMPUTE, 1, {"g"}, {"gate"}, "test_spin");
  PlanBuilder::SetAttribute(slow, "microseconds", 300);
  builder.AddTask("plus", plan::COMPUTE, 0, {"s", "gate"}, {"y"}, "test_sum_plus_one")
      .set_ordering_inputs(1);
  builder.AddTask("sink", plan::SINK, 0, {"y"}, {});
  auto job = MakeJob(builder.plan());
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Run().ok());
  EXPECT_THAT(SinkValues(**job, "sink"), ElementsAreArray(Range(kPieces, 1.0f)));
  const std::vector<ActEvent> gates = EventsOf(**job, "slow");
  const std::vector<ActEvent> acts = EventsOf(**job, "plus");
  ASSERT_EQ(gates.size(), kPieces);
  ASSERT_EQ(acts.size(), kPieces);
  for (int j = 0; j < kPieces; ++j) {
    EXPECT_GE(acts[j].start_nanoseconds, gates[j].end_nanoseconds) << "piece " << j;
  }
}

TEST(FlowControlTest, FanOutCountsReadersBeforeReusingASlot) {
  // One register read by three consumers on three threads, one slot: every consumer sees every
  // piece exactly once, and the slot is reused only after all three returned it.
  PlanBuilder builder("fan_out");
  builder.AddCpuDevices(3);
  builder.AddRegister("x", {16}, plan::FLOAT32, 1);
  for (int i = 0; i < 3; ++i) builder.AddRegister("y" + std::to_string(i), {16});
  builder.AddTask("source", plan::SOURCE, 0, {}, {"x"}, "test_piece").set_num_pieces(30);
  for (int i = 0; i < 3; ++i) {
    std::string suffix = std::to_string(i);
    plan::Task& reader =
        builder.AddTask("reader" + suffix, plan::COMPUTE, i, {"x"}, {"y" + suffix}, "test_spin");
    PlanBuilder::SetAttribute(reader, "microseconds", 20 * (i + 1));
    builder.AddTask("sink" + suffix, plan::SINK, i, {"y" + suffix}, {});
  }
  auto job = MakeJob(builder.plan());
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Run().ok());
  for (int i = 0; i < 3; ++i) {
    EXPECT_THAT(SinkValues(**job, "sink" + std::to_string(i)), ElementsAreArray(Range(30, 0.0f)));
  }
  std::vector<ActEvent> produced = EventsOf(**job, "source");
  for (int i = 0; i < 3; ++i) {
    std::vector<ActEvent> read = EventsOf(**job, "reader" + std::to_string(i));
    for (int p = 1; p < 30; ++p) {
      EXPECT_GE(produced[p].start_nanoseconds, read[p - 1].end_nanoseconds);
    }
  }
}

TEST(FlowControlTest, FanInAndDiamondCombineMatchingPieces) {
  // source -> a, b (fan-out); a, b -> join (fan-in): a diamond. join = (x+1) + (x+1) + 1.
  PlanBuilder builder("diamond");
  builder.AddCpuDevices(3);
  builder.AddRegister("x", {2}).AddRegister("a", {2}).AddRegister("b", {2}).AddRegister("j", {2});
  builder.AddTask("source", plan::SOURCE, 0, {}, {"x"}, "test_piece").set_num_pieces(25);
  builder.AddTask("left", plan::COMPUTE, 1, {"x"}, {"a"}, "test_sum_plus_one");
  plan::Task& right = builder.AddTask("right", plan::COMPUTE, 2, {"x"}, {"b"}, "test_spin");
  PlanBuilder::SetAttribute(right, "microseconds", 50);
  builder.AddTask("join", plan::COMPUTE, 0, {"a", "b"}, {"j"}, "test_sum_plus_one");
  builder.AddTask("sink", plan::SINK, 0, {"j"}, {});
  auto job = MakeJob(builder.plan());
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Run().ok());
  std::vector<float> expected;
  for (int p = 0; p < 25; ++p) expected.push_back(static_cast<float>(p + 1 + p + 1));
  EXPECT_THAT(SinkValues(**job, "sink"), ElementsAreArray(expected));
}

TEST(FlowControlTest, OneRegisterReadTwiceByOneTask) {
  PlanBuilder builder("self_join");
  builder.AddCpuDevices(1);
  builder.AddRegister("x", {2}, plan::FLOAT32, 1).AddRegister("y", {2});
  builder.AddTask("source", plan::SOURCE, 0, {}, {"x"}, "test_piece").set_num_pieces(10);
  builder.AddTask("twice", plan::COMPUTE, 0, {"x", "x"}, {"y"}, "test_sum_plus_one");
  builder.AddTask("sink", plan::SINK, 0, {"y"}, {});
  auto job = MakeJob(builder.plan());
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Run().ok());
  std::vector<float> expected;
  for (int p = 0; p < 10; ++p) expected.push_back(2.0f * p + 1.0f);
  EXPECT_THAT(SinkValues(**job, "sink"), ElementsAreArray(expected));
}

TEST(FlowControlTest, LongChainAcrossThreadsEndsEverywhere) {
  const int length = 40;
  PlanBuilder builder("long_chain");
  builder.AddCpuDevices(4);
  builder.AddRegister("r0", {3});
  builder.AddTask("source", plan::SOURCE, 0, {}, {"r0"}, "test_piece").set_num_pieces(64);
  for (int i = 1; i <= length; ++i) {
    builder.AddRegister("r" + std::to_string(i), {3}, plan::FLOAT32, 1 + i % 3);
    builder.AddTask("step" + std::to_string(i), plan::COMPUTE, i % 4,
                    {"r" + std::to_string(i - 1)}, {"r" + std::to_string(i)}, "test_sum_plus_one");
  }
  builder.AddTask("sink", plan::SINK, 3, {"r" + std::to_string(length)}, {});
  auto job = MakeJob(builder.plan());
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Run().ok());
  EXPECT_THAT(SinkValues(**job, "sink"), ElementsAreArray(Range(64, length)));
}

TEST(FlowControlTest, ProducedRegisterWithoutConsumersRecyclesItsSlots) {
  PlanBuilder builder("unread");
  builder.AddCpuDevices(1);
  builder.AddRegister("x", {2}, plan::FLOAT32, 1).AddRegister("unused", {2}, plan::FLOAT32, 1);
  builder.AddRegister("y", {2});
  builder.AddTask("source", plan::SOURCE, 0, {}, {"x", "unused"}, "test_piece").set_num_pieces(7);
  builder.AddTask("plus", plan::COMPUTE, 0, {"x"}, {"y"}, "test_sum_plus_one");
  builder.AddTask("sink", plan::SINK, 0, {"y"}, {});
  auto job = MakeJob(builder.plan());
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Run().ok());
  EXPECT_THAT(SinkValues(**job, "sink"), ElementsAreArray(Range(7, 1.0f)));
}

TEST(FlowControlTest, ZeroPiecesEndsAtOnce) {
  PlanBuilder builder("empty");
  builder.AddCpuDevices(1);
  builder.AddRegister("x", {2}).AddRegister("y", {2});
  builder.AddTask("source", plan::SOURCE, 0, {}, {"x"}, "test_piece").set_num_pieces(0);
  builder.AddTask("plus", plan::COMPUTE, 0, {"x"}, {"y"}, "test_sum_plus_one");
  builder.AddTask("sink", plan::SINK, 0, {"y"}, {});
  auto job = MakeJob(builder.plan());
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Run().ok());
  EXPECT_TRUE(SinkValues(**job, "sink").empty());
}

TEST(FlowControlTest, SourcesOfDifferentLengthsEndWithoutHanging) {
  // The join can act only as often as its shorter input; the surplus of the longer is returned.
  PlanBuilder builder("uneven");
  builder.AddCpuDevices(2);
  builder.AddRegister("a", {1}).AddRegister("b", {1}).AddRegister("j", {1});
  builder.AddTask("long", plan::SOURCE, 0, {}, {"a"}, "test_piece").set_num_pieces(20);
  builder.AddTask("short", plan::SOURCE, 1, {}, {"b"}, "test_piece").set_num_pieces(5);
  builder.AddTask("join", plan::COMPUTE, 0, {"a", "b"}, {"j"}, "test_sum_plus_one");
  builder.AddTask("sink", plan::SINK, 0, {"j"}, {});
  auto job = MakeJob(builder.plan());
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Run().ok());
  EXPECT_EQ(SinkValues(**job, "sink").size(), 5u);
}

}  // namespace
}  // namespace loom::testing
