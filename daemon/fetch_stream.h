#ifndef LOOM_DAEMON_FETCH_STREAM_H_
#define LOOM_DAEMON_FETCH_STREAM_H_

// The coordinator's assembly of fetched tensors for a job submitted with stream_fetches:
// FetchStream puts every piece of the plan's fetches together from the parts the nodes forward and
// hands each, as a FetchedTensor, to the JobManager, which adds it to the job's events for its
// watchers. FetchStream::CheckLimits is the check at submit of what such a job would stream.

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "node/fetch_pieces.h"
#include "proto/loom/v1/job_service.pb.h"
#include "proto/plan.pb.h"
#include "runtime/job_options.h"

namespace loom::daemon {

// The fetched tensors of a job submitted with stream_fetches (SubmitJobRequest): assembles every
// piece of the plan's fetches from the parts the nodes forward (FetchPieceAssembler) and hands
// each to `on_piece` as a FetchedTensor.
//
// Thread-safe: OnPiece runs on the threads that receive the nodes' forwarded pieces; `on_piece` is
// called under the stream's lock, in the order the pieces complete, and must be quick.
class FetchStream {
 public:
  using PieceCallback = std::function<void(v1::FetchedTensor)>;

  // What the coordinator checks when a job of `steps` steps is submitted to stream its fetches
  // (a piece per step and micro-batch): INVALID_ARGUMENT when the plan fetches nothing;
  // RESOURCE_EXHAUSTED, naming the tensor, when one piece has more than `max_piece_bytes` or all
  // pieces of all fetches more than `max_job_bytes`.
  static absl::Status CheckLimits(const plan::Plan& plan, int64_t steps, int64_t max_piece_bytes,
                                  int64_t max_job_bytes);

  // Streams every fetch of `plan`.
  FetchStream(const plan::Plan& plan, PieceCallback on_piece);

  // The sinks whose pieces the stream reads: what the nodes must forward.
  const std::vector<std::string>& sinks() const { return sinks_; }

  // A piece of a sink the nodes forward; pieces of other sinks are ignored. An error (the ranks'
  // parts do not assemble) fails the job.
  absl::Status OnPiece(const SinkPiece& piece);

 private:
  const PieceCallback on_piece_;
  std::vector<std::string> sinks_;
  std::mutex mutex_;
  std::vector<FetchPieceAssembler> fetches_;  // guarded by mutex_
};

}  // namespace loom::daemon

#endif  // LOOM_DAEMON_FETCH_STREAM_H_
