#ifndef LOOM_NODE_FETCH_ASSEMBLY_H_
#define LOOM_NODE_FETCH_ASSEMBLY_H_

// Assembling a logical tensor from the pieces its ranks hold: AssembleFetch for a plan's fetch,
// and AssembleLogicalTensor for any DistributedLayout (a fetch's or a variable's: split axes place
// windows, partial axes are summed, broadcast axes are read once, RanksRead says from which
// ranks). The fetch piece assembler, local runs and checkpoint assembly of node/ build on it.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "proto/plan.pb.h"

namespace loom {

// Assembles one logical tensor from the local pieces of every rank (pieces[rank], in the
// fetch's rank order), following plan::Fetch: splits place windows, partial axes sum, broadcast
// axes are read from their first member. INVALID_ARGUMENT when a piece's shape is not the window
// its rank holds.
absl::StatusOr<HostTensor> AssembleFetch(const plan::Fetch& fetch,
                                         const std::vector<const HostTensor*>& pieces);

// Where the ranks' local pieces sit in a logical tensor (what plan::Fetch and
// plan::VariableLayout both say). `what` names the tensor in errors ("fetch 'y'").
struct DistributedLayout {
  std::string what;
  plan::TensorDesc logical;
  std::vector<int64_t> hierarchy;
  // One per hierarchy axis: "S(0)", "B", "P".
  std::vector<std::string> sbp;
};

// Which ranks' pieces AssembleLogicalTensor reads (by rank): those whose coordinate is 0 on every
// broadcast axis. INVALID_ARGUMENT for an SBP that does not parse.
absl::StatusOr<std::vector<bool>> RanksRead(const DistributedLayout& layout);

// AssembleFetch on any layout: pieces[rank] in rank order; a rank whose coordinate is not 0 on
// some broadcast axis is not read (its piece may be null).
absl::StatusOr<HostTensor> AssembleLogicalTensor(const DistributedLayout& layout,
                                                 const std::vector<const HostTensor*>& pieces);

}  // namespace loom

#endif  // LOOM_NODE_FETCH_ASSEMBLY_H_
