#include "daemon/metrics.h"

#include <cmath>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/strip.h"

namespace loom::daemon {
namespace {

constexpr double kSecondsPerNanosecond = 1e-9;

// Steps of small models take milliseconds, of large ones minutes.
prometheus::Histogram::BucketBoundaries StepBuckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300};
}

// A collective of a few bytes between threads takes microseconds; 64 MiB over TCP ~0.1 s.
prometheus::Histogram::BucketBoundaries CollectiveBuckets() {
  return {1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 0.01, 0.03, 0.1, 0.3, 1, 3, 10};
}

std::string EnumLabel(absl::string_view name, absl::string_view prefix) {
  return absl::AsciiStrToLower(absl::StripPrefix(name, prefix));
}

}  // namespace

std::string TaskKindLabel(plan::TaskKind kind) { return EnumLabel(plan::TaskKind_Name(kind), ""); }

std::string JobStateLabel(v1::JobState state) {
  return EnumLabel(v1::JobState_Name(state), "JOB_STATE_");
}

DaemonMetrics::DaemonMetrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      collective_buckets_(CollectiveBuckets()) {
  auto& acts = prometheus::BuildCounter()
                   .Name("loom_actor_acts_total")
                   .Help("Acts of this node's actors, by task kind.")
                   .Register(*registry_);
  const std::array<prometheus::Family<prometheus::Counter>*, 4> seconds = {
      &prometheus::BuildCounter()
           .Name("loom_actor_busy_seconds_total")
           .Help("Time this node's actors spent acting (kernels included), by task kind.")
           .Register(*registry_),
      &prometheus::BuildCounter()
           .Name("loom_actor_blocked_on_input_seconds_total")
           .Help("Time this node's actors waited for an input (no READY slot), by task kind.")
           .Register(*registry_),
      &prometheus::BuildCounter()
           .Name("loom_actor_blocked_on_output_seconds_total")
           .Help("Time this node's actors had their inputs but no free output slot "
                 "(back-pressure), by task kind.")
           .Register(*registry_),
      &prometheus::BuildCounter()
           .Name("loom_actor_waiting_for_thread_seconds_total")
           .Help("Time this node's actors could act but their stream thread ran another actor, "
                 "by task kind.")
           .Register(*registry_),
  };
  for (int value = 0; value < plan::TaskKind_ARRAYSIZE; ++value) {
    if (!plan::TaskKind_IsValid(value) || value == plan::TASK_KIND_UNSPECIFIED) continue;
    const prometheus::Labels labels = {{"kind", TaskKindLabel(static_cast<plan::TaskKind>(value))}};
    actors_[value].acts = &acts.Add(labels);
    for (size_t time = 0; time < seconds.size(); ++time) {
      actors_[value].seconds[time] = &seconds[time]->Add(labels);
    }
  }
  auto& queued = prometheus::BuildGauge()
                     .Name("loom_stream_queued_messages")
                     .Help(
                         "Actor messages waiting in the inboxes of this node's stream threads, "
                         "by stream kind.")
                     .Register(*registry_);
  for (int value = 0; value < plan::StreamKind_ARRAYSIZE; ++value) {
    if (!plan::StreamKind_IsValid(value) || value == plan::STREAM_KIND_UNSPECIFIED) continue;
    queued_messages_[value] = &queued.Add(
        {{"stream",
          EnumLabel(plan::StreamKind_Name(static_cast<plan::StreamKind>(value)), "STREAM_")}});
  }
  transferred_bytes_ = &prometheus::BuildCounter()
                            .Name("loom_transport_bytes_total")
                            .Help(
                                "Bytes moved by this node, by transport (ucx: between nodes; "
                                "local: copies between devices of the node) and direction.")
                            .Register(*registry_);
  for (const char* direction : {"sent", "received"}) {
    transferred_bytes_->Add({{"transport", "ucx"}, {"direction", direction}});
  }
  collective_seconds_ = &prometheus::BuildHistogram()
                             .Name("loom_collective_duration_seconds")
                             .Help(
                                 "One rank's collective on this node, from its call to its "
                                 "return (waiting for the other ranks included), by operation "
                                 "and backend.")
                             .Register(*registry_);
  collective_bytes_ = &prometheus::BuildCounter()
                           .Name("loom_collective_bytes_total")
                           .Help(
                               "Input bytes of this node's ranks' collectives, by operation and "
                               "backend.")
                           .Register(*registry_);
  jobs_finished_ = &prometheus::BuildCounter()
                        .Name("loom_jobs_finished_total")
                        .Help("Jobs that ended, by final state (coordinator only).")
                        .Register(*registry_);
  for (const char* state : {"succeeded", "failed", "cancelled"}) {
    jobs_finished_->Add({{"state", state}});
  }
  step_seconds_ = &prometheus::BuildHistogram()
                       .Name("loom_step_duration_seconds")
                       .Help(
                           "Training steps of the running jobs, from the end of the previous "
                           "step to the end of this one (coordinator only).")
                       .Register(*registry_)
                       .Add({}, StepBuckets());
  checkpoint_seconds_ = &prometheus::BuildHistogram()
                             .Name("loom_checkpoint_save_duration_seconds")
                             .Help(
                                 "Checkpoints of the running jobs, from the nodes' parts to the "
                                 "file written (coordinator only).")
                             .Register(*registry_)
                             .Add({}, StepBuckets());
  steps_ = &prometheus::BuildCounter()
                .Name("loom_steps_total")
                .Help("Training steps finished (coordinator only).")
                .Register(*registry_)
                .Add({});
  tokens_ = &prometheus::BuildCounter()
                 .Name("loom_tokens_total")
                 .Help(
                     "Tokens read by finished training steps, for jobs that read a token file "
                     "(coordinator only).")
                 .Register(*registry_)
                 .Add({});
  training_loss_ = &prometheus::BuildGauge()
                        .Name("loom_training_loss")
                        .Help(
                            "The loss of the running job's last finished training step, the mean "
                            "over its micro-batches (coordinator only; NaN until a step ends).")
                        .Register(*registry_)
                        .Add({});
  training_loss_->Set(std::numeric_limits<double>::quiet_NaN());
  validation_loss_ = &prometheus::BuildGauge()
                          .Name("loom_validation_loss")
                          .Help(
                              "The validation loss of the running job's last step that "
                              "evaluated (Job.evaluation), on a held-out batch (coordinator "
                              "only; NaN until a step reports one).")
                          .Register(*registry_)
                          .Add({});
  validation_loss_->Set(std::numeric_limits<double>::quiet_NaN());
  dropped_assignments_ = &prometheus::BuildCounter()
                              .Name("loom_moe_dropped_assignments_total")
                              .Help(
                                  "Token-to-expert assignments over an expert's capacity (the "
                                  "token skips that expert), summed over MoE layers (coordinator "
                                  "only, jobs that fetch moe.dropped).")
                              .Register(*registry_)
                              .Add({});
  expert_assignments_ = &prometheus::BuildCounter()
                             .Name("loom_moe_expert_assignments_total")
                             .Help(
                                 "Token-to-expert assignments by expert index, before capacity "
                                 "drops, summed over MoE layers (coordinator only, jobs that "
                                 "fetch moe.tokens_per_expert).")
                             .Register(*registry_);
}

void DaemonMetrics::AddActs(plan::TaskKind kind, int64_t acts) {
  if (kind <= 0 || kind >= plan::TaskKind_ARRAYSIZE || actors_[kind].acts == nullptr) return;
  actors_[kind].acts->Increment(static_cast<double>(acts));
}

void DaemonMetrics::AddActorTime(plan::TaskKind kind, ActorTime time, int64_t nanoseconds) {
  if (kind <= 0 || kind >= plan::TaskKind_ARRAYSIZE || actors_[kind].acts == nullptr) return;
  actors_[kind].seconds[static_cast<size_t>(time)]->Increment(static_cast<double>(nanoseconds) *
                                                              kSecondsPerNanosecond);
}

void DaemonMetrics::AddQueuedMessages(plan::StreamKind stream, int64_t delta) {
  if (stream <= 0 || stream >= plan::StreamKind_ARRAYSIZE) stream = plan::STREAM_COMPUTE;
  queued_messages_[stream]->Increment(static_cast<double>(delta));
}

void DaemonMetrics::AddTransferredBytes(absl::string_view transport, TransferDirection direction,
                                        int64_t bytes) {
  transferred_bytes_
      ->Add({{"transport", std::string(transport)},
             {"direction", direction == TransferDirection::kSent ? "sent" : "received"}})
      .Increment(static_cast<double>(bytes));
}

void DaemonMetrics::ObserveCollective(plan::CollectiveKind kind, absl::string_view backend,
                                      int64_t nanoseconds, int64_t bytes) {
  const prometheus::Labels labels = {{"operation", EnumLabel(plan::CollectiveKind_Name(kind), "")},
                                     {"backend", std::string(backend)}};
  collective_seconds_->Add(labels, collective_buckets_)
      .Observe(static_cast<double>(nanoseconds) * kSecondsPerNanosecond);
  collective_bytes_->Add(labels).Increment(static_cast<double>(bytes));
}

void DaemonMetrics::JobFinished(v1::JobState state) {
  jobs_finished_->Add({{"state", JobStateLabel(state)}}).Increment();
}

void DaemonMetrics::StepFinished(const v1::StepEvent& step) {
  steps_->Increment();
  step_seconds_->Observe(step.step_time_seconds());
  if (step.has_tokens_per_second()) {
    tokens_->Increment(std::round(step.tokens_per_second() * step.step_time_seconds()));
  }
  training_loss_->Set(step.loss());
  if (step.has_validation_loss()) validation_loss_->Set(step.validation_loss());
}

void DaemonMetrics::CheckpointSaved(double seconds) { checkpoint_seconds_->Observe(seconds); }

void DaemonMetrics::AddDroppedAssignments(double assignments) {
  dropped_assignments_->Increment(assignments);
}

void DaemonMetrics::AddExpertAssignments(const std::vector<float>& assignments_per_expert) {
  for (size_t expert = 0; expert < assignments_per_expert.size(); ++expert) {
    expert_assignments_->Add({{"expert", std::to_string(expert)}})
        .Increment(assignments_per_expert[expert]);
  }
}

}  // namespace loom::daemon
