#ifndef LOOM_DAEMON_METRICS_H_
#define LOOM_DAEMON_METRICS_H_

// One loomd's Prometheus metrics: DaemonMetrics, the runtime's counters of this node's part of
// every job (it is their RuntimeMetrics) and, on the coordinator, the jobs' ends, steps,
// checkpoints and MoE assignments. Also the names of the MoE fetches the coordinator counts and the
// label values of task kinds and job states. The MetricsServer serves its registry.

#include <array>
#include <memory>

#include "absl/strings/string_view.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "proto/loom/v1/job_service.pb.h"
#include "proto/plan.pb.h"
#include "runtime/runtime_metrics.h"

namespace loom::daemon {

// One loomd's Prometheus metrics (prometheus-cpp), in a registry of its own (no global state):
// the runtime's live counters of this node's part of every job (it is the JobOptions::metrics of
// the node's jobs), and on the coordinator the jobs' ends and steps. The cluster's and the jobs'
// current state are read at scrape time (daemon/cluster_collector.h). docs/OPERATIONS.md,
// "Metrics", lists every name.
//
// Names start with loom_, counters end in _total, times are seconds and sizes bytes. Labels are
// bounded: task kinds, stream kinds, collective kinds, transports, job states.
//
// Thread-safe: the runtime's stream and network threads and the job manager call it concurrently.
class DaemonMetrics final : public RuntimeMetrics {
 public:
  DaemonMetrics();

  const std::shared_ptr<prometheus::Registry>& registry() const { return registry_; }

  // RuntimeMetrics.
  void AddActs(plan::TaskKind kind, int64_t acts) override;
  void AddActorTime(plan::TaskKind kind, ActorTime time, int64_t nanoseconds) override;
  void AddQueuedMessages(plan::StreamKind stream, int64_t delta) override;
  void AddTransferredBytes(absl::string_view transport, TransferDirection direction,
                           int64_t bytes) override;
  void ObserveCollective(plan::CollectiveKind kind, absl::string_view backend, int64_t nanoseconds,
                         int64_t bytes) override;

  // The coordinator's job manager: a job ended in `state` (SUCCEEDED, FAILED or CANCELLED).
  void JobFinished(v1::JobState state);
  // A training step of the running job ended (its duration, tokens and loss, and its validation
  // loss when it has one).
  void StepFinished(const v1::StepEvent& step);
  // A checkpoint of the running job was saved (assembled from its parts and written) in `seconds`.
  void CheckpointSaved(double seconds);
  // A micro-batch of a mixture-of-experts job: its assignments over capacity, and the assignments
  // each expert got (before dropping), summed over the MoE layers.
  void AddDroppedAssignments(double assignments);
  void AddExpertAssignments(const std::vector<float>& assignments_per_expert);

 private:
  struct ActorCounters {
    prometheus::Counter* acts = nullptr;
    // By ActorTime.
    std::array<prometheus::Counter*, 4> seconds{};
  };

  std::shared_ptr<prometheus::Registry> registry_;
  const prometheus::Histogram::BucketBoundaries collective_buckets_;
  // By TaskKind and StreamKind value (the hot paths: no label lookup).
  std::array<ActorCounters, plan::TaskKind_ARRAYSIZE> actors_{};
  std::array<prometheus::Gauge*, plan::StreamKind_ARRAYSIZE> queued_messages_{};
  prometheus::Family<prometheus::Counter>* transferred_bytes_ = nullptr;
  prometheus::Family<prometheus::Histogram>* collective_seconds_ = nullptr;
  prometheus::Family<prometheus::Counter>* collective_bytes_ = nullptr;
  prometheus::Family<prometheus::Counter>* jobs_finished_ = nullptr;
  prometheus::Histogram* step_seconds_ = nullptr;
  prometheus::Counter* steps_ = nullptr;
  prometheus::Histogram* checkpoint_seconds_ = nullptr;
  prometheus::Counter* tokens_ = nullptr;
  prometheus::Gauge* training_loss_ = nullptr;
  prometheus::Gauge* validation_loss_ = nullptr;
  prometheus::Counter* dropped_assignments_ = nullptr;
  prometheus::Family<prometheus::Counter>* expert_assignments_ = nullptr;
};

// The fetches whose pieces the coordinator counts into the MoE metrics, when a job has them
// (tools/loom-gpt's MoE GPT fetches both): float32 scalars of dropped assignments, and float32
// [experts] of assignments per expert.
inline constexpr char kMoeDroppedFetch[] = "moe.dropped";
inline constexpr char kMoeTokensPerExpertFetch[] = "moe.tokens_per_expert";

// "compute", "copy", "send": a task kind as a label value (lower case, no prefix).
std::string TaskKindLabel(plan::TaskKind kind);
// "succeeded", "running": a job state as a label value.
std::string JobStateLabel(v1::JobState state);

}  // namespace loom::daemon

#endif  // LOOM_DAEMON_METRICS_H_
