// bench_submit_latency: from submitting a small training job to its first step, on a local cluster
// of three loomd processes (a coordinator and two workers, one CPU device each), through the C++
// ClusterClient as a user would.
//
// The job: the GPT of tools/loom-gpt in a small configuration (T = 16, width 32, 2 layers, 2 heads,
// MLP 64, batch 12, AdamW, 2 steps), data-parallel over the three nodes (node<i>/cpu:0), so that
// the path crosses every node: SubmitJob (validation, compilation, the node split), the launch on
// the three nodes (actors built, a UCX network per node), the connect barrier, the start, a first
// training step (forward, backward, a cross-node gradient all-reduce, AdamW) and its step event
// streamed back to the client.
//
// Timed, per job, with the client's clock: t0 just before the SubmitJob call; the first step =
// the moment the client's WatchJob callback receives the job's first StepEvent. (WatchJob starts
// after SubmitJob returned and replays earlier events, so a step that happened before the watch
// was open counts when its replay arrives: this can only add time.) Also printed: when SubmitJob
// returned and when the RUNNING event arrived, on the same clock. (JobEvent.time cannot be used
// for this: the daemon's timestamps have whole seconds only, their nanos are 0.) One untimed job
// first, then kRepetitions jobs one after another in the same cluster; the median is the result.
//
// Peer: the goal itself (1 s), as compile-scale does; there is no comparable system on this
// machine (Ray and Kubernetes job submission are not installed).
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/common/bench_util.h"
#include "bench/common/command.h"
#include "bench/common/local_cluster.h"
#include "tools/loom-gpt/gpt_model.h"

#ifndef LOOMD_BINARY
#define LOOMD_BINARY ""
#endif

namespace loom::bench {
namespace {

constexpr int kNodes = 3;
constexpr int kRepetitions = 9;
constexpr double kGoalSeconds = 1.0;

gpt::GptConfig SmallGpt() {
  gpt::GptConfig config;
  config.context = 16;
  config.width = 32;
  config.layers = 2;
  config.heads = 2;
  config.mlp_width = 64;
  config.batch = 12;
  config.steps = 2;
  config.data_parallel = kNodes;
  config.devices_per_node = 1;
  return config;
}

struct Latency {
  // Milliseconds after t0 (the SubmitJob call) at which the client saw:
  double submit_returned_ms = 0;  // SubmitJob return
  double running_ms = 0;          // the RUNNING event
  double first_step_ms = 0;       // the first step event
};

absl::StatusOr<Latency> SubmitOnce(ClusterClient& client, const job::Job& job) {
  Latency latency;
  const absl::Time start = absl::Now();
  absl::StatusOr<v1::JobInfo> submitted = client.SubmitJob(job);
  if (!submitted.ok()) return submitted.status();
  latency.submit_returned_ms = absl::ToDoubleMilliseconds(absl::Now() - start);
  bool saw_step = false;
  std::string failure;
  absl::Status watched = client.WatchJob(submitted->job_id(), [&](const v1::JobEvent& event) {
    if (event.has_step() && !saw_step) {
      saw_step = true;
      latency.first_step_ms = absl::ToDoubleMilliseconds(absl::Now() - start);
    }
    if (event.has_state_change()) {
      if (event.state_change().state() == v1::JOB_STATE_RUNNING) {
        latency.running_ms = absl::ToDoubleMilliseconds(absl::Now() - start);
      }
      if (event.state_change().state() == v1::JOB_STATE_FAILED) {
        failure = event.state_change().error().message();
      }
    }
  });
  if (!watched.ok()) return watched;
  if (!failure.empty()) return absl::InternalError(absl::StrCat("the job failed: ", failure));
  if (!saw_step) return absl::InternalError("the job ended without a step event");
  return latency;
}

int Main() {
  const std::string loomd = LOOMD_BINARY;
  if (!ProgramExists(loomd)) {
    std::fprintf(stderr, "submit-latency: loomd is not built ('%s')\n", loomd.c_str());
    return 2;
  }
  absl::StatusOr<job::Job> job = gpt::BuildGptJob(SmallGpt());
  ExitIfError(job.status(), "building the job");
  std::printf(
      "submit-latency: SubmitJob -> first StepEvent at the client, small GPT (T=16 D=32 "
      "L=2, batch 12) DP=%d over %d loomd processes (one CPU device each); 1 untimed + "
      "%d jobs\n",
      kNodes, kNodes, kRepetitions);
  std::printf("machine at start: %s\n", MachineCheck().c_str());
  absl::StatusOr<LocalCluster> cluster = StartLocalCluster(loomd, "submit_latency", kNodes, 1);
  ExitIfError(cluster.status(), "starting the local cluster");
  // std::exit skips the destructors: the daemons are stopped before a failure exits.
  auto exit_if_error = [&cluster](const absl::Status& status, const std::string& what) {
    if (!status.ok()) cluster->daemons.clear();
    ExitIfError(status, what);
  };
  absl::StatusOr<Latency> cold = SubmitOnce(*cluster->client, *job);
  exit_if_error(cold.status(), "the untimed first job");
  std::vector<double> submit_returned, running, first_step;
  for (int repetition = 0; repetition < kRepetitions; ++repetition) {
    absl::StatusOr<Latency> latency = SubmitOnce(*cluster->client, *job);
    exit_if_error(latency.status(), "a job");
    submit_returned.push_back(latency->submit_returned_ms);
    running.push_back(latency->running_ms);
    first_step.push_back(latency->first_step_ms);
  }
  std::printf("ms after the SubmitJob call began, per job, as the client saw it:\n");
  std::printf("  SubmitJob returned   %s\n", JoinValues(submit_returned, 1).c_str());
  std::printf("  RUNNING event        %s\n", JoinValues(running, 1).c_str());
  std::printf("  first step event     %s\n", JoinValues(first_step, 1).c_str());
  std::printf("  (the untimed first job after the cluster came up: first step at %.1f ms)\n",
              cold->first_step_ms);
  std::printf("medians: SubmitJob returned %.1f  RUNNING %.1f  first step %.1f ms\n",
              Median(submit_returned), Median(running), Median(first_step));
  std::printf("machine at end: %s\n", MachineCheck().c_str());
  std::printf("GOAL submit-latency: <= %.1f s (ratio <= 1)\n", kGoalSeconds);
  PrintResult("submit-latency", "seconds", Median(first_step) / 1e3, "goal_seconds", kGoalSeconds);
  return 0;
}

}  // namespace
}  // namespace loom::bench

int main() { return loom::bench::Main(); }
