#ifndef LOOM_RUNTIME_JOB_OPTIONS_H_
#define LOOM_RUNTIME_JOB_OPTIONS_H_

// What the runner of a job chooses for its JobRuntime: JobOptions (timeouts, event recording, the
// factories of stream contexts, memory resources and collective backends, the network, metrics, and
// the sink and snapshot callbacks), and the sinks' live output, SinkPiece and SinkPieceCallback.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/file_roots.h"
#include "core/plan_steps.h"
#include "core/tensor.h"
#include "device/memory_resource.h"
#include "device/stream_context.h"
#include "proto/plan.pb.h"
#include "runtime/collective_backend.h"
#include "runtime/network.h"
#include "runtime/runtime_metrics.h"
#include "runtime/variable_snapshot.h"

namespace loom {

// A piece a sink task has just kept: the task, which of its inputs, the piece index (0, 1, ... in
// the order the sink receives them: with micro-batches, num_micro_batches pieces per step) and the
// host copy the sink keeps (valid only during the call: copy what you need).
struct SinkPiece {
  const std::string& sink;
  int input;
  int64_t piece;
  const HostTensor& tensor;
};

// Called by a sink for every piece it keeps, for live output (per-step losses, progress).
//
// Threading: it runs on the sink actor's stream thread, inside the sink's act, after the copy is
// kept and before the sink returns the input slot to its producer. Sinks on different streams call
// it concurrently, so it must be thread-safe; the pieces of one sink arrive in piece order. It
// must be quick (the sink's stream waits for it) and must not block on other actors. An error it
// returns fails the job, like a kernel error of that sink at that piece.
using SinkPieceCallback = std::function<absl::Status(const SinkPiece&)>;

struct JobOptions {
  // A job in which no actor has acted or received a message for this long, with no kernel
  // running, has stalled: it ends with a report of what every actor waits for.
  absl::Duration stall_timeout = absl::Seconds(10);
  // A stream thread with nothing to do polls its inbox this long before it parks (and a rank of a
  // shared-memory collective waits so long for its peers; network collectives wait in the
  // transport's drive instead, transport/transport.h).
  absl::Duration spin_before_park = absl::Microseconds(50);
  // Keep an ActEvent per act (for traces and tests). Costs a few bytes per act.
  bool record_events = true;
  // With record_events: only the acts of these steps (a window of a long job; the steps of an
  // act's piece as Task.pieces_per_step says).
  RecordedSteps recorded_steps;
  // With record_events: at most this many ActEvents are kept (about 24 bytes each), so that the
  // record of a long job stays bounded; acts beyond it are not recorded and the record says it was
  // truncated (JobRuntime::events_truncated, and a note in its Chrome trace). 0: none kept.
  // Negative: the job is refused. loomd passes its --max-trace-events-per-job.
  static constexpr int64_t kDefaultMaxRecordedEvents = 2'000'000;
  int64_t max_recorded_events = kDefaultMaxRecordedEvents;
  // Builds the context of each stream. Unset: CPU streams are synchronous; other device types are
  // rejected. The CUDA backend (and tests of the asynchronous path) supply their own.
  std::function<std::unique_ptr<StreamContext>(const plan::Stream&)> stream_context_factory;
  // Builds the memory resource of each device of the plan. Unset, or returning null: CPU devices
  // get host memory and other device types are rejected. The CUDA backend supplies GPU memory.
  std::function<absl::StatusOr<std::unique_ptr<MemoryResource>>(const plan::Device&)>
      memory_resource_factory;
  // How long a rank waits in a collective for its peers (to arrive, and to finish) before the job
  // fails with DEADLINE_EXCEEDED naming the collective and the missing ranks. A rank waiting in a
  // collective is busy, not stalled, so this (not stall_timeout) bounds such waits.
  absl::Duration collective_timeout = absl::Seconds(60);
  // Builds the backend of each communicator in Plan.communicators. Unset, or returning null: a
  // communicator with ranks on other nodes gets the network backend (NetworkCollectives, over
  // `network`), one whose devices are all CPU devices of this node the shared-memory backend, and
  // any other is rejected (FAILED_PRECONDITION). The CUDA backend supplies NCCL.
  std::function<absl::StatusOr<std::unique_ptr<CollectiveBackend>>(const plan::Communicator&,
                                                                   const plan::Plan&)>
      collective_backend_factory;
  // Unset: sinks only keep their pieces. Set: every sink of reported_sinks also reports each piece
  // it copies (see SinkPieceCallback); the runtime hands it to those sinks in their ActorInit.
  SinkPieceCallback sink_piece_callback;
  // The sinks (task names) that report to sink_piece_callback; unset: every sink.
  std::optional<absl::flat_hash_set<std::string>> reported_sinks;
  // Whether sinks keep every piece until the job is destroyed (FetchedPieces: what `loomctl run`
  // writes at the end; the copies are charged to the sinks' devices). False: a sink holds a piece
  // only while it reports it to sink_piece_callback, so that the memory of a job that fetches
  // does not grow with its steps (loomd, whose clients get step events, not pieces), and a sink
  // that does not report copies nothing (on a GPU: no device-to-host copy, no stream wait).
  bool keep_sink_pieces = true;
  // Periodic snapshots of the variables, for checkpoints while a job runs: with both set, every
  // VARIABLE task hands the callback a host copy of its value and optimizer states after each step
  // k that is a multiple of snapshot_every_steps, except the job's last (read that one from the
  // actors once the job ended). 0: none. Negative: the job is refused.
  int64_t snapshot_every_steps = 0;
  VariableSnapshotCallback variable_snapshot_callback;
  // The network between the nodes of a multi-node job (not owned; it must outlive the runtime and
  // be stopped before the runtime is destroyed, so that no transfer completes into freed memory).
  // Unset: a plan whose tasks talk to other nodes is rejected.
  Network* network = nullptr;
  // Live counters of what the job does (acts, actor time, queues, bytes, collectives), for
  // monitoring; not owned, must outlive the runtime. Null: none (the summaries and the event
  // record are kept either way).
  RuntimeMetrics* metrics = nullptr;
  // Where kernels may open the files their configurations name (KernelInit::files); not owned,
  // must outlive the runtime. Null: no kernel may open a file.
  const FileRoots* files = nullptr;
};

}  // namespace loom

#endif  // LOOM_RUNTIME_JOB_OPTIONS_H_
