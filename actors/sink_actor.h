#ifndef LOOM_ACTORS_SINK_ACTOR_H_
#define LOOM_ACTORS_SINK_ACTOR_H_

// The actor of a SINK task: SinkActor copies the pieces it receives to the host, charged to its
// device's memory budget, to keep them for the job or report them to
// JobOptions::sink_piece_callback. FetchedPieces reads what a job's sink kept, by sink name:
// local runs assemble their fetches from it, `loomctl run-plan` writes it out.

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "runtime/actor.h"
#include "runtime/job_options.h"
#include "runtime/job_runtime.h"

namespace loom {

// Keeps a host copy of every piece of every input, for the job to fetch. The copies are charged
// to the sink's device memory budget. With a piece callback, it also reports every piece it keeps
// (see SinkPieceCallback for the threading); an error from the callback fails the act. Without
// keep_sink_pieces (ActorInit), a piece's copy is charged and kept only while it is reported, and
// a sink without a callback only consumes its inputs.
class SinkActor final : public Actor {
 public:
  using Actor::Actor;
  ~SinkActor() override;

  // pieces()[input][k]: the k-th piece received on that input (with keep_sink_pieces; else
  // empty).
  const std::vector<std::vector<HostTensor>>& pieces() const { return pieces_; }

 protected:
  absl::Status DoAct() override;

 private:
  std::vector<std::vector<HostTensor>> pieces_;
  int64_t charged_bytes_ = 0;
};

// The pieces a job's sink task kept, by input; NOT_FOUND when there is no such sink.
absl::StatusOr<const std::vector<std::vector<HostTensor>>*> FetchedPieces(
    const JobRuntime& job, const std::string& sink_name);

}  // namespace loom

#endif  // LOOM_ACTORS_SINK_ACTOR_H_
