// loomd's Prometheus metrics: DaemonMetrics and ScrapeGauges rendered by the MetricsServer over
// HTTP, and a daemon's metrics after a training job.
#include "daemon/metrics.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "daemon/metrics_server.h"
#include "daemon/scrape_gauges.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "tests/daemon/daemon_test_util.h"

namespace loom::daemon {
namespace {

using ::testing::HasSubstr;

// GET http://address/metrics; fails the test on an HTTP error.
std::string Scrape(const std::string& address) {
  httplib::Client client(absl::StrCat("http://", address));
  client.set_connection_timeout(5);
  client.set_read_timeout(10);
  httplib::Result result = client.Get("/metrics");
  if (!result) {
    ADD_FAILURE() << "GET /metrics from " << address << ": " << httplib::to_string(result.error());
    return "";
  }
  EXPECT_EQ(result->status, 200);
  EXPECT_THAT(result->get_header_value("Content-Type"), HasSubstr("text/plain; version=0.0.4"));
  return result->body;
}

// Sample lines ("name{labels} value") by their name-and-labels part.
std::map<std::string, double> Samples(const std::string& text) {
  std::map<std::string, double> samples;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (line.empty() || line.front() == '#') continue;
    const size_t space = line.rfind(' ');
    double value = 0;
    if (space == absl::string_view::npos || !absl::SimpleAtod(line.substr(space + 1), &value)) {
      ADD_FAILURE() << "not a sample line: " << line;
      continue;
    }
    samples[std::string(line.substr(0, space))] = value;
  }
  return samples;
}

// `promtool check metrics` on `text` (the linter Prometheus ships); skipped without promtool.
void ExpectPromtoolAccepts(const std::string& text) {
  if (std::system("command -v promtool >/dev/null 2>&1") != 0) {
    GTEST_LOG_(INFO) << "promtool not installed: not linting";
    return;
  }
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / absl::StrCat("loom_metrics_", getpid(), ".txt");
  std::ofstream(path) << text;
  const std::string command = absl::StrCat("promtool check metrics < ", path.string(), " 2>&1");
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buffer[512];
  while (fgets(buffer, sizeof(buffer), pipe) != nullptr) output += buffer;
  const int status = pclose(pipe);
  std::filesystem::remove(path);
  EXPECT_EQ(status, 0) << "promtool check metrics:\n" << output;
}

TEST(DaemonMetricsTest, RendersWhatTheRuntimeReports) {
  auto metrics = std::make_shared<DaemonMetrics>();
  metrics->AddActs(plan::COMPUTE, 3);
  metrics->AddActorTime(plan::COMPUTE, ActorTime::kBusy, 1'500'000'000);
  metrics->AddActorTime(plan::SEND, ActorTime::kBlockedOnOutput, 250'000'000);
  metrics->AddQueuedMessages(plan::STREAM_COMMUNICATION, 5);
  metrics->AddQueuedMessages(plan::STREAM_COMMUNICATION, -2);
  metrics->AddTransferredBytes("ucx", TransferDirection::kSent, 4096);
  metrics->ObserveCollective(plan::ALL_REDUCE, "network", 2'000'000, 1024);
  metrics->JobFinished(v1::JOB_STATE_FAILED);
  v1::StepEvent step;
  step.set_step_time_seconds(0.2);
  step.set_tokens_per_second(5000);
  step.set_loss(2.5);
  metrics->StepFinished(step);
  metrics->CheckpointSaved(0.3);
  auto gauges = std::make_shared<ScrapeGauges>();
  gauges->Add("loom_test_nodes", "A gauge read at scrape time.", [] {
    return std::vector<ScrapeGauges::Sample>{{{{"state", "ready"}}, 2.0}};
  });

  absl::StatusOr<std::unique_ptr<MetricsServer>> server =
      MetricsServer::Start("127.0.0.1:0", {metrics->registry(), gauges});
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->port(), 0);
  const std::string text = Scrape((*server)->address());
  std::map<std::string, double> samples = Samples(text);
  EXPECT_EQ(samples["loom_actor_acts_total{kind=\"compute\"}"], 3);
  EXPECT_EQ(samples["loom_actor_acts_total{kind=\"send\"}"], 0);  // every kind, from the start
  EXPECT_DOUBLE_EQ(samples["loom_actor_busy_seconds_total{kind=\"compute\"}"], 1.5);
  EXPECT_DOUBLE_EQ(samples["loom_actor_blocked_on_output_seconds_total{kind=\"send\"}"], 0.25);
  EXPECT_EQ(samples["loom_stream_queued_messages{stream=\"communication\"}"], 3);
  EXPECT_EQ(samples["loom_transport_bytes_total{direction=\"sent\",transport=\"ucx\"}"], 4096);
  EXPECT_EQ(samples["loom_collective_duration_seconds_count{backend=\"network\","
                    "operation=\"all_reduce\"}"],
            1);
  EXPECT_EQ(samples["loom_collective_bytes_total{backend=\"network\",operation=\"all_reduce\"}"],
            1024);
  EXPECT_EQ(samples["loom_jobs_finished_total{state=\"failed\"}"], 1);
  EXPECT_EQ(samples["loom_jobs_finished_total{state=\"succeeded\"}"], 0);
  EXPECT_EQ(samples["loom_steps_total"], 1);
  EXPECT_EQ(samples["loom_tokens_total"], 1000);
  EXPECT_EQ(samples["loom_training_loss"], 2.5);
  EXPECT_EQ(samples["loom_step_duration_seconds_bucket{le=\"0.25\"}"], 1);
  EXPECT_EQ(samples["loom_step_duration_seconds_bucket{le=\"0.1\"}"], 0);
  EXPECT_EQ(samples["loom_checkpoint_save_duration_seconds_bucket{le=\"0.5\"}"], 1);
  EXPECT_EQ(samples["loom_checkpoint_save_duration_seconds_bucket{le=\"0.25\"}"], 0);
  EXPECT_EQ(samples["loom_test_nodes{state=\"ready\"}"], 2);
  ExpectPromtoolAccepts(text);
}

TEST(MetricsServerTest, BadAddressesAreClearErrors) {
  absl::StatusOr<std::unique_ptr<MetricsServer>> no_port = MetricsServer::Start("localhost", {});
  EXPECT_EQ(no_port.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(no_port.status().message(), HasSubstr("'localhost'"));

  absl::StatusOr<std::unique_ptr<MetricsServer>> first = MetricsServer::Start("127.0.0.1:0", {});
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<std::unique_ptr<MetricsServer>> taken =
      MetricsServer::Start((*first)->address(), {});
  EXPECT_EQ(taken.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(taken.status().message(), HasSubstr((*first)->address()));
}

class DaemonMetricsJobTest : public testing::DaemonTest {
 protected:
  void SetUp() override {
    DaemonOptions options = testing::TestOptions();
    options.metrics_listen_address = "127.0.0.1:0";
    StartDaemon(options);
  }
};

TEST_F(DaemonMetricsJobTest, ATrainingJobMovesTheCounters) {
  ASSERT_FALSE(daemon_->metrics_address().empty());
  std::map<std::string, double> before = Samples(Scrape(daemon_->metrics_address()));
  EXPECT_EQ(before["loom_actor_acts_total{kind=\"compute\"}"], 0);
  EXPECT_EQ(before["loom_cluster_nodes{state=\"ready\"}"], 1);
  EXPECT_EQ(before["loom_jobs{state=\"running\"}"], 0);

  constexpr int kSteps = 6;
  const std::string job_id = SubmitOrDie(testing::TrainingJob(kSteps));
  ASSERT_TRUE(WaitForState(job_id, v1::JOB_STATE_SUCCEEDED));

  const std::string text = Scrape(daemon_->metrics_address());
  std::map<std::string, double> after = Samples(text);
  EXPECT_GT(after["loom_actor_acts_total{kind=\"compute\"}"], 0);
  EXPECT_GT(after["loom_actor_busy_seconds_total{kind=\"compute\"}"], 0);
  EXPECT_GT(after["loom_actor_acts_total{kind=\"collective\"}"], 0);  // data parallel
  EXPECT_GT(after["loom_collective_duration_seconds_count{backend=\"shared_memory\","
                  "operation=\"all_reduce\"}"],
            0);
  EXPECT_EQ(after["loom_steps_total"], kSteps);
  EXPECT_GT(after["loom_training_loss"], 0);  // the last step's mean squared error
  EXPECT_EQ(after["loom_step_duration_seconds_count"], kSteps);
  EXPECT_EQ(after["loom_jobs_finished_total{state=\"succeeded\"}"], 1);
  EXPECT_EQ(after["loom_jobs{state=\"succeeded\"}"], 1);
  ExpectPromtoolAccepts(text);
  // Once the node released the job, every message queued during it was taken or dropped with
  // its thread: the queue gauges are back to 0.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  std::string queued;
  do {
    std::map<std::string, double> samples = Samples(Scrape(daemon_->metrics_address()));
    queued.clear();
    for (const char* stream : {"compute", "copy_in", "copy_out", "communication"}) {
      const double value =
          samples[absl::StrCat("loom_stream_queued_messages{stream=\"", stream, "\"}")];
      if (value != 0) absl::StrAppend(&queued, " ", stream, "=", value);
    }
    if (queued.empty()) break;
    absl::SleepFor(absl::Milliseconds(50));
  } while (absl::Now() < deadline);
  EXPECT_EQ(queued, "") << "messages still counted as queued 10 s after the job";
}

TEST_F(DaemonMetricsJobTest, TheJobHistorysBytesArePlansEventsAndTraces) {
  std::map<std::string, double> before = Samples(Scrape(daemon_->metrics_address()));
  for (const char* part : {"plan", "events", "trace", "fetched"}) {
    EXPECT_EQ(before[absl::StrCat("loom_job_history_bytes{part=\"", part, "\"}")], 0) << part;
  }
  constexpr int kSteps = 40;
  ASSERT_TRUE(
      WaitForState(SubmitTracedOrDie(testing::TrainingJob(kSteps)), v1::JOB_STATE_SUCCEEDED));

  // The plan is kept once the job's run is over, just after it ended.
  std::map<std::string, double> after;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  do {
    after = Samples(Scrape(daemon_->metrics_address()));
  } while (after["loom_job_history_bytes{part=\"plan\"}"] == 0 && absl::Now() < deadline);
  EXPECT_GT(after["loom_job_history_bytes{part=\"plan\"}"], 0);
  // 40 step events and 4 state changes, compressed: a few dozen bytes each at most.
  EXPECT_GT(after["loom_job_history_bytes{part=\"events\"}"], 0);
  EXPECT_LT(after["loom_job_history_bytes{part=\"events\"}"], 60 * (kSteps + 4));
  EXPECT_GT(after["loom_job_history_bytes{part=\"trace\"}"], 0);
  EXPECT_EQ(after["loom_job_history_bytes{part=\"fetched\"}"], 0);

  // A job that streams its fetches: its fetched tensors are held after it ended.
  const std::string streaming =
      SubmitStreamingOrDie(testing::CountingJob(2, "ones_total", "ones_per_column"));
  double fetched_bytes = 0;
  for (const v1::JobEvent& event : WatchToEnd(streaming)) {
    fetched_bytes += static_cast<double>(event.fetched().data().size());
  }
  EXPECT_GT(fetched_bytes, 0);
  EXPECT_EQ(Samples(Scrape(daemon_->metrics_address()))["loom_job_history_bytes{part=\"fetched\"}"],
            fetched_bytes);
}

TEST_F(DaemonMetricsJobTest, TheMoeFetchesOfAJobAreCountedPerMicroBatch) {
  // Stand-ins for an MoE model's counts: partial sums over the data-parallel ranks (reduce_sum of
  // a split tensor), two micro-batches per step, assembled before they are counted.
  constexpr int kSteps = 3;
  const job::Job job = testing::CountingJob(kSteps, "moe.dropped", "moe.tokens_per_expert");
  const std::string job_id = SubmitOrDie(job);
  ASSERT_TRUE(WaitForState(job_id, v1::JOB_STATE_SUCCEEDED));
  const std::string text = Scrape(daemon_->metrics_address());
  std::map<std::string, double> after = Samples(text);
  // Per step: the 8 x 4 ones summed (32), and 8 per column.
  EXPECT_EQ(after["loom_moe_dropped_assignments_total"], 32 * kSteps);
  for (int expert = 0; expert < 4; ++expert) {
    EXPECT_EQ(after[absl::StrCat("loom_moe_expert_assignments_total{expert=\"", expert, "\"}")],
              8 * kSteps)
        << expert;
  }
  ExpectPromtoolAccepts(text);
}

}  // namespace
}  // namespace loom::daemon
