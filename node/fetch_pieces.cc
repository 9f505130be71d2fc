#include "node/fetch_pieces.h"

#include <utility>

#include "node/fetch_assembly.h"

namespace loom {

FetchPieceAssembler::FetchPieceAssembler(const plan::Fetch& fetch) : fetch_(fetch) {
  for (int rank = 0; rank < fetch.sinks_size(); ++rank) rank_of_sink_[fetch.sinks(rank)] = rank;
}

absl::StatusOr<std::optional<AssembledPiece>> FetchPieceAssembler::Add(const SinkPiece& piece) {
  auto rank = rank_of_sink_.find(piece.sink);
  if (rank == rank_of_sink_.end() || piece.input != 0) return std::nullopt;
  std::vector<std::optional<HostTensor>>& ranks = pending_[piece.piece];
  ranks.resize(rank_of_sink_.size());
  ranks[rank->second] = piece.tensor;
  std::vector<const HostTensor*> pieces;
  for (const std::optional<HostTensor>& tensor : ranks) {
    if (!tensor.has_value()) return std::nullopt;
    pieces.push_back(&*tensor);
  }
  absl::StatusOr<HostTensor> assembled = AssembleFetch(fetch_, pieces);
  pending_.erase(piece.piece);
  if (!assembled.ok()) return assembled.status();
  return AssembledPiece{piece.piece, *std::move(assembled)};
}

}  // namespace loom
