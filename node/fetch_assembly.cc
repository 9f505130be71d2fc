#include "node/fetch_assembly.h"

#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/boxing.h"
#include "compiler/placement.h"
#include "compiler/sbp.h"
#include "core/checked_arithmetic.h"
#include "core/data_type.h"

namespace loom {
namespace {

// Calls `visit(logical_offset, local_offset, run)` for every contiguous run of the last axis of
// `window` placed at `begin` in a row-major tensor of shape `logical`.
template <typename Visit>
void ForEachRun(const Shape& logical, const Shape& window, const std::vector<int64_t>& begin,
                Visit visit) {
  const int rank = logical.rank();
  if (window.NumElements() == 0) return;
  if (rank == 0) {
    visit(0, 0, 1);
    return;
  }
  const int64_t run = window.dimension(rank - 1);
  std::vector<int64_t> index(rank, 0);
  int64_t local = 0;
  while (true) {
    int64_t offset = 0;
    for (int axis = 0; axis < rank; ++axis) {
      offset = offset * logical.dimension(axis) + begin[axis] + index[axis];
    }
    visit(offset, local, run);
    local += run;
    int axis = rank - 2;
    while (axis >= 0 && ++index[axis] == window.dimension(axis)) {
      index[axis] = 0;
      --axis;
    }
    if (axis < 0) break;
  }
}

// The ranks of `hierarchy`; -1 when an extent is below 1 or their product overflows (no number
// of pieces matches it).
int64_t Ranks(const std::vector<int64_t>& hierarchy) {
  int64_t ranks = 1;
  for (int64_t extent : hierarchy) {
    const std::optional<int64_t> product = CheckedMultiply(ranks, extent);
    if (extent < 1 || !product.has_value()) return -1;
    ranks = *product;
  }
  return ranks;
}

// RanksRead, for a parsed `sbp` over `placement`.
std::vector<bool> RanksReadOf(const compiler::NdSbp& sbp, const compiler::Placement& placement) {
  std::vector<bool> read(placement.size(), true);
  for (int rank = 0; rank < placement.size(); ++rank) {
    std::vector<int64_t> coordinates = placement.Coordinates(rank);
    for (size_t h = 0; h < sbp.size(); ++h) {
      if (sbp[h].is_broadcast() && coordinates[h] != 0) read[rank] = false;
    }
  }
  return read;
}

}  // namespace

absl::StatusOr<HostTensor> AssembleFetch(const plan::Fetch& fetch,
                                         const std::vector<const HostTensor*>& pieces) {
  DistributedLayout layout;
  layout.what = absl::StrCat("fetch '", fetch.tensor(), "'");
  layout.logical = fetch.logical();
  layout.hierarchy.assign(fetch.hierarchy().begin(), fetch.hierarchy().end());
  layout.sbp.assign(fetch.sbp().begin(), fetch.sbp().end());
  return AssembleLogicalTensor(layout, pieces);
}

absl::StatusOr<std::vector<bool>> RanksRead(const DistributedLayout& layout) {
  absl::StatusOr<compiler::NdSbp> sbp = compiler::ParseNdSbp(layout.sbp);
  if (!sbp.ok()) return sbp.status();
  const int64_t ranks = Ranks(layout.hierarchy);
  if (ranks < 0 || ranks > kMaxTensorElements) {
    return absl::InvalidArgumentError(absl::StrCat(layout.what, ": hierarchy [",
                                                   absl::StrJoin(layout.hierarchy, ", "),
                                                   "] has no sane number of ranks"));
  }
  return RanksReadOf(*sbp, compiler::Placement(std::vector<plan::Device>(ranks),
                                               layout.hierarchy));
}

absl::StatusOr<HostTensor> AssembleLogicalTensor(const DistributedLayout& layout,
                                                 const std::vector<const HostTensor*>& pieces) {
  const std::vector<int64_t>& hierarchy = layout.hierarchy;
  const int64_t ranks = Ranks(hierarchy);
  if (static_cast<int64_t>(pieces.size()) != ranks) {
    return absl::InvalidArgumentError(
        absl::StrCat(layout.what, ": ", pieces.size(), " pieces for ", ranks, " ranks"));
  }
  absl::StatusOr<compiler::NdSbp> sbp = compiler::ParseNdSbp(layout.sbp);
  if (!sbp.ok()) return sbp.status();
  const plan::DataType data_type = layout.logical.data_type();
  const int64_t element_size = DataTypeSize(data_type);
  bool partial = false;
  for (const compiler::Sbp& axis : *sbp) partial = partial || axis.is_partial();
  if (partial && data_type != plan::FLOAT32) {
    return absl::InvalidArgumentError(absl::StrCat(layout.what, ": partial values of ",
                                                   DataTypeName(data_type), " cannot be summed"));
  }

  HostTensor result;
  result.data_type = data_type;
  result.shape = Shape(layout.logical.shape());
  result.bytes.assign(result.shape.NumElements() * element_size, std::byte{0});
  const compiler::Placement placement(std::vector<plan::Device>(ranks), hierarchy);
  const std::vector<bool> read = RanksReadOf(*sbp, placement);
  for (int rank = 0; rank < ranks; ++rank) {
    if (!read[rank]) continue;
    compiler::LocalWindow window = compiler::LocalWindowOf(result.shape, placement, *sbp, rank);
    if (pieces[rank] == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(layout.what, ": rank ", rank, " has no piece"));
    }
    const HostTensor& piece = *pieces[rank];
    if (piece.shape != window.shape || piece.data_type != data_type) {
      return absl::InvalidArgumentError(
          absl::StrCat(layout.what, ": rank ", rank, " holds ", DataTypeName(piece.data_type),
                       piece.shape.ToString(), " but its window is ", window.shape.ToString()));
    }
    ForEachRun(result.shape, window.shape, window.begin,
               [&](int64_t offset, int64_t local, int64_t run) {
                 if (partial) {
                   float* target = reinterpret_cast<float*>(result.bytes.data()) + offset;
                   const float* source = reinterpret_cast<const float*>(piece.bytes.data()) + local;
                   for (int64_t i = 0; i < run; ++i) target[i] += source[i];
                 } else {
                   std::memcpy(result.bytes.data() + offset * element_size,
                               piece.bytes.data() + local * element_size, run * element_size);
                 }
               });
  }
  return result;
}

}  // namespace loom
