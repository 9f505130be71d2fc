// Live metrics (JobOptions::metrics) of a job with collectives: the deltas add up to what the
// actor summaries say.
#include "runtime/runtime_metrics.h"

#include <array>
#include <atomic>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "gtest/gtest.h"
#include "proto/plan.pb.h"
#include "tests/runtime/collective_test_util.h"

namespace loom::testing {
namespace {

class CountingMetrics final : public RuntimeMetrics {
 public:
  void AddActs(plan::TaskKind kind, int64_t acts) override { acts_[kind] += acts; }
  void AddActorTime(plan::TaskKind kind, ActorTime time, int64_t nanoseconds) override {
    time_[kind][static_cast<int>(time)] += nanoseconds;
  }
  void AddQueuedMessages(plan::StreamKind stream, int64_t delta) override {
    queued_[stream] += delta;
    if (delta > 0) pushed_ += delta;
  }
  void AddTransferredBytes(absl::string_view, TransferDirection, int64_t) override {}
  void ObserveCollective(plan::CollectiveKind kind, absl::string_view backend, int64_t nanoseconds,
                         int64_t bytes) override {
    EXPECT_EQ(kind, plan::ALL_REDUCE);
    EXPECT_EQ(backend, "shared_memory");
    EXPECT_GT(nanoseconds, 0);
    ++collectives_;
    collective_bytes_ += bytes;
  }

  std::array<std::atomic<int64_t>, plan::TaskKind_ARRAYSIZE> acts_{};
  std::array<std::array<std::atomic<int64_t>, 4>, plan::TaskKind_ARRAYSIZE> time_{};
  std::array<std::atomic<int64_t>, plan::StreamKind_ARRAYSIZE> queued_{};
  std::atomic<int64_t> pushed_{0};
  std::atomic<int64_t> collectives_{0};
  std::atomic<int64_t> collective_bytes_{0};
};

TEST(RuntimeMetricsTest, LiveCountsAddUpToTheSummaries) {
  const int pieces = 6;
  CountingMetrics metrics;
  std::vector<ActorSummary> summaries;
  {
    JobOptions options;
    options.metrics = &metrics;
    auto job = MakeCollectiveJob(TwoCollectivesPlan(pieces), std::move(options));
    ASSERT_TRUE(job.ok()) << job.status();
    ASSERT_TRUE((*job)->Run().ok());
    summaries = (*job)->Summaries();
  }  // the runtime is gone: whatever it left in inboxes left the queue gauge
  std::array<int64_t, plan::TaskKind_ARRAYSIZE> acts{};
  std::array<std::array<int64_t, 4>, plan::TaskKind_ARRAYSIZE> time{};
  for (const ActorSummary& summary : summaries) {
    acts[summary.kind] += summary.acts;
    time[summary.kind][static_cast<int>(ActorTime::kBusy)] += summary.busy_nanoseconds;
    time[summary.kind][static_cast<int>(ActorTime::kBlockedOnInput)] +=
        summary.blocked_on_input_nanoseconds;
    time[summary.kind][static_cast<int>(ActorTime::kBlockedOnOutput)] +=
        summary.blocked_on_output_nanoseconds;
    time[summary.kind][static_cast<int>(ActorTime::kWaitingForThread)] +=
        summary.waiting_for_thread_nanoseconds;
  }
  for (int kind = 0; kind < plan::TaskKind_ARRAYSIZE; ++kind) {
    EXPECT_EQ(metrics.acts_[kind].load(), acts[kind]) << plan::TaskKind_Name(kind);
    for (int part = 0; part < 4; ++part) {
      EXPECT_EQ(metrics.time_[kind][part].load(), time[kind][part])
          << plan::TaskKind_Name(kind) << " time " << part;
    }
  }
  EXPECT_EQ(metrics.acts_[plan::COLLECTIVE].load(), 2 * 2 * pieces);
  EXPECT_GT(metrics.time_[plan::COMPUTE][static_cast<int>(ActorTime::kBusy)].load(),
            pieces * 3'000'000);  // the 3 ms sleeps
  EXPECT_EQ(metrics.collectives_.load(), 2 * 2 * pieces);
  // Per rank and piece: 6 + 4 float32 elements.
  EXPECT_EQ(metrics.collective_bytes_.load(), 2 * pieces * (6 + 4) * 4);
  EXPECT_GT(metrics.pushed_.load(), 0);
  for (int stream = 0; stream < plan::StreamKind_ARRAYSIZE; ++stream) {
    EXPECT_EQ(metrics.queued_[stream].load(), 0) << plan::StreamKind_Name(stream);
  }
}

}  // namespace
}  // namespace loom::testing
