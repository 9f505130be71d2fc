// The local order of collectives: every rank runs its collectives in sequence order, whatever
// input is ready first, ends cleanly when they have fewer (or no) pieces, and a stall report says
// which collective waits for its turn.
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "actors/sink_actor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/plan.pb.h"
#include "testing/plan_builder.h"
#include "tests/runtime/collective_test_util.h"
#include "tests/runtime/runtime_test_util.h"

namespace loom::testing {
namespace {

using ::testing::HasSubstr;

TEST(CollectiveOrderTest, CollectivesActInSequenceOrderEvenWhenALaterInputIsReadyFirst) {
  const int pieces = 6;
  auto job = MakeCollectiveJob(TwoCollectivesPlan(pieces));
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Run().ok());
  for (int rank = 0; rank < 2; ++rank) {
    const std::string r = absl::StrCat(rank);
    std::vector<ActEvent> first = EventsOf(**job, "first" + r);
    std::vector<ActEvent> second = EventsOf(**job, "second" + r);
    ASSERT_EQ(first.size(), static_cast<size_t>(pieces));
    ASSERT_EQ(second.size(), static_cast<size_t>(pieces));
    for (int piece = 0; piece < pieces; ++piece) {
      EXPECT_EQ(first[piece].piece, piece);
      EXPECT_EQ(second[piece].piece, piece);
      // first(p) < second(p) < first(p + 1).
      EXPECT_LE(first[piece].end_nanoseconds, second[piece].start_nanoseconds) << piece;
      if (piece + 1 < pieces) {
        EXPECT_LE(second[piece].end_nanoseconds, first[piece + 1].start_nanoseconds) << piece;
      }
    }
  }
  // The values: each output is the sum of both ranks' pattern inputs.
  for (int rank = 0; rank < 2; ++rank) {
    auto kept = FetchedPieces(**job, absl::StrCat("sink", rank));
    ASSERT_TRUE(kept.ok());
    for (int piece = 0; piece < pieces; ++piece) {
      std::vector<double> slow = ToDoubles((**kept)[0][piece]);
      std::vector<double> fast = ToDoubles((**kept)[1][piece]);
      for (int i = 0; i < 4; ++i) {
        EXPECT_EQ(slow[i],
                  (20 * 131 + piece * 17 + i * 7) % 251 + (21 * 131 + piece * 17 + i * 7) % 251);
      }
      for (int i = 0; i < 6; ++i) {
        EXPECT_EQ(fast[i],
                  (10 * 131 + piece * 17 + i * 7) % 251 + (11 * 131 + piece * 17 + i * 7) % 251);
      }
    }
  }
}

// Task.ordering_inputs on a collective: each rank's all-reduce of piece p waits for its rank's
// slow gate of piece p, and reduces its data input alone.
TEST(CollectiveOrderTest, OrderingInputsOrderACollectiveWithoutBeingReduced) {
  constexpr int kPieces = 5;
  PlanBuilder builder("ordered_collective");
  builder.AddCpuDevices(2);
  AddCommunicator(builder, "dp", {0, 1}, 1);
  for (int rank = 0; rank < 2; ++rank) {
    const std::string r = absl::StrCat(rank);
    builder.AddRegister("in" + r, {4}).AddRegister("out" + r, {4});
    builder.AddRegister("raw" + r, {4}).AddRegister("gate" + r, {4});
    plan::Task& source =
        builder.AddTask("source" + r, plan::SOURCE, rank, {}, {"in" + r}, "test_pattern");
    source.set_num_pieces(kPieces);
    PlanBuilder::SetAttribute(source, "seed", 10 + rank);
    plan::Task& raw =
        builder.AddTask("raw_source" + r, plan::SOURCE, rank, {}, {"raw" + r}, "test_pattern");
    raw.set_num_pieces(kPieces);
    PlanBuilder::SetAttribute(raw, "seed", 20 + rank);
    plan::Task& gate =
        builder.AddTask("gate" + r, plan::COMPUTE, rank, {"raw" + r}, {"gate" + r}, "sleep");
    PlanBuilder::SetAttribute(gate, "microseconds", 1000 * (rank + 1));
    plan::Task& reduce = AddCollective(builder, "reduce" + r, rank, "in" + r, "out" + r,
                                       Conf("dp", plan::ALL_REDUCE, 0, "reduce"), rank);
    reduce.add_inputs("gate" + r);
    reduce.set_ordering_inputs(1);
    builder.AddTask("sink" + r, plan::SINK, rank, {"out" + r}, {});
  }
  auto job = MakeCollectiveJob(builder.plan());
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Run().ok());
  for (int rank = 0; rank < 2; ++rank) {
    const std::string r = absl::StrCat(rank);
    const std::vector<ActEvent> gates = EventsOf(**job, "gate" + r);
    const std::vector<ActEvent> acts = EventsOf(**job, "reduce" + r);
    ASSERT_EQ(gates.size(), static_cast<size_t>(kPieces));
    ASSERT_EQ(acts.size(), static_cast<size_t>(kPieces));
    for (int piece = 0; piece < kPieces; ++piece) {
      EXPECT_GE(acts[piece].start_nanoseconds, gates[piece].end_nanoseconds) << piece;
    }
    auto kept = FetchedPieces(**job, "sink" + r);
    ASSERT_TRUE(kept.ok());
    for (int piece = 0; piece < kPieces; ++piece) {
      const std::vector<double> values = ToDoubles((**kept)[0][piece]);
      for (int i = 0; i < 4; ++i) {
        EXPECT_EQ(values[i],
                  (10 * 131 + piece * 17 + i * 7) % 251 + (11 * 131 + piece * 17 + i * 7) % 251);
      }
    }
  }
}

TEST(CollectiveOrderTest, CollectivesWithFewerPiecesEndTheOrderCleanly) {
  // Sequence 1 gets 2 pieces, sequence 0 gets 3: every rank runs 0, 1, 0, 1, 0 and then stops.
  plan::Plan plan = TwoCollectivesPlan(3);
  for (plan::Task& task : *plan.mutable_tasks()) {
    if (task.name().rfind("fast_source", 0) == 0) task.set_num_pieces(2);
  }
  auto job = MakeCollectiveJob(plan);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Run().ok());
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(EventsOf(**job, absl::StrCat("first", rank)).size(), 3u);
    EXPECT_EQ(EventsOf(**job, absl::StrCat("second", rank)).size(), 2u);
  }
}

TEST(CollectiveOrderTest, NoPiecesAtAllEndsCleanly) {
  CollectiveCase c;
  c.label = "no_pieces";
  c.kind = plan::ALL_REDUCE;
  c.inputs = SameShapes({4}, 3);
  c.pieces = 0;
  auto job = MakeCollectiveJob(CasePlan(c));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_TRUE((*job)->Run().ok());
}

TEST(CollectiveOrderTest, AStallReportSaysWhichCollectiveWaitsForItsTurn) {
  // One rank. Sequence 0's input never comes (the stall of failure_test: 'late' waits for a sum
  // that can never complete); sequence 1's input is ready, but it is not its turn.
  PlanBuilder builder("turn_stall");
  builder.AddCpuDevices(2);
  AddCommunicator(builder, "solo", {0}, 2);
  builder.AddRegister("x", {2}, plan::FLOAT32, 1)
      .AddRegister("sum", {2})
      .AddRegister("late_out", {2});
  builder.AddRegister("ready", {2}).AddRegister("out0", {2}).AddRegister("out1", {2});
  builder.AddTask("source", plan::SOURCE, 0, {}, {"x"}, "test_piece").set_num_pieces(8);
  builder.AddTask("accumulate", plan::ACCUMULATE, 1, {"x"}, {"sum"}).set_factor(4);
  builder.AddTask("late", plan::COMPUTE, 0, {"x", "sum"}, {"late_out"}, "test_sum_plus_one");
  builder.AddTask("ready_source", plan::SOURCE, 0, {}, {"ready"}, "test_piece").set_num_pieces(8);
  AddCollective(builder, "zero", 0, "late_out", "out0", Conf("solo", plan::ALL_REDUCE, 0, "zero"),
                0);
  AddCollective(builder, "one", 0, "ready", "out1", Conf("solo", plan::ALL_REDUCE, 1, "one"), 0);
  JobOptions options;
  options.stall_timeout = absl::Milliseconds(300);
  auto job = MakeCollectiveJob(builder.plan(), options);
  ASSERT_TRUE(job.ok()) << job.status();
  absl::Status status = (*job)->Run();
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(status.message(),
              HasSubstr("'one' waits for its turn on communicator 'solo': collective 'one' "
                        "(sequence 1) comes after sequence 0 ('zero')"));
  EXPECT_THAT(status.message(), HasSubstr("'zero' waits for input register 'late_out'"));
}

}  // namespace
}  // namespace loom::testing
