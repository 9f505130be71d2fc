#ifndef LOOM_NODE_FETCH_PIECES_H_
#define LOOM_NODE_FETCH_PIECES_H_

// FetchPieceAssembler: the pieces of one fetched tensor collected from its ranks' sinks as they
// arrive (JobOptions::sink_piece_callback) and assembled one piece index at a time, as soon as
// every rank holds it. The step collector (node/step_collector.h), loomd's fetch streams and step
// tracker, and loomctl's fetch writer use it.

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "proto/plan.pb.h"
#include "runtime/job_options.h"

namespace loom {

// One piece (a micro-batch of a step) of a fetched tensor, assembled from every rank.
struct AssembledPiece {
  int64_t piece = 0;
  HostTensor tensor;
};

// Collects the pieces that a fetch's sinks keep (JobOptions::sink_piece_callback) and assembles
// each piece index once every rank's sink holds it (AssembleFetch: splits placed, partial sums
// added, broadcasts read once). Not thread-safe: the owner serialises Add.
class FetchPieceAssembler {
 public:
  explicit FetchPieceAssembler(const plan::Fetch& fetch);

  // Records a piece; pieces of other sinks are ignored. Returns the assembled piece when this one
  // completed it, nothing while ranks are missing, and an error when the ranks' pieces do not
  // assemble.
  absl::StatusOr<std::optional<AssembledPiece>> Add(const SinkPiece& piece);

  const plan::Fetch& fetch() const { return fetch_; }
  // The pieces that some ranks' sinks hold and others' not yet.
  int64_t pending_pieces() const { return static_cast<int64_t>(pending_.size()); }

 private:
  plan::Fetch fetch_;
  absl::flat_hash_map<std::string, int> rank_of_sink_;
  // Pieces that have not reached every rank yet: piece -> per rank.
  std::map<int64_t, std::vector<std::optional<HostTensor>>> pending_;
};

}  // namespace loom

#endif  // LOOM_NODE_FETCH_PIECES_H_
