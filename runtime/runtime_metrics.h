#ifndef LOOM_RUNTIME_RUNTIME_METRICS_H_
#define LOOM_RUNTIME_RUNTIME_METRICS_H_

// RuntimeMetrics: the interface through which a running job reports live counters (acts, actor
// time, queued messages, transferred bytes, collectives), with the labels ActorTime and
// TransferDirection. loomd implements it and exports it to Prometheus (daemon/metrics.h).

#include <cstdint>

#include "absl/strings/string_view.h"
#include "proto/plan.pb.h"

namespace loom {

// Where an actor's time goes (the same split as ActorSummary).
enum class ActorTime { kBusy, kBlockedOnInput, kBlockedOnOutput, kWaitingForThread };

enum class TransferDirection { kSent, kReceived };

// What the runtime reports while it runs, for monitoring: loomd exports it to Prometheus
// (daemon/metrics.h). Unlike the event record and the summaries, which are read after the job,
// these arrive live, as deltas, so that a scrape in the middle of a long job sees it move.
//
// Every label the runtime passes is bounded (a task kind, a stream kind, a collective kind, a
// transport name): never an actor, a register or a step.
//
// Threading: stream threads and network threads call it concurrently, several times per act, so
// implementations must be thread-safe and cheap (an atomic add), and must outlive every job that
// reports to them.
class RuntimeMetrics {
 public:
  virtual ~RuntimeMetrics() = default;

  virtual void AddActs(plan::TaskKind kind, int64_t acts) = 0;
  virtual void AddActorTime(plan::TaskKind kind, ActorTime time, int64_t nanoseconds) = 0;
  // Messages waiting in the inboxes of stream threads of this kind (+1 queued, -n taken).
  virtual void AddQueuedMessages(plan::StreamKind stream, int64_t delta) = 0;
  // Bytes moved by a transport ("ucx": between nodes; "local": copies inside a node).
  virtual void AddTransferredBytes(absl::string_view transport, TransferDirection direction,
                                   int64_t bytes) = 0;
  // One rank's collective, from its call to the backend to its return (waiting for the other
  // ranks included), and the bytes of its input.
  virtual void ObserveCollective(plan::CollectiveKind kind, absl::string_view backend,
                                 int64_t nanoseconds, int64_t bytes) = 0;
};

}  // namespace loom

#endif  // LOOM_RUNTIME_RUNTIME_METRICS_H_
