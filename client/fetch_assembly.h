#ifndef LOOM_CLIENT_FETCH_ASSEMBLY_H_
#define LOOM_CLIENT_FETCH_ASSEMBLY_H_

#include <vector>

#include "absl/status/statusor.h"
#include "proto/plan.pb.h"
#include "runtime/tensor.h"

namespace loom {

// Assembles one logical tensor from the local pieces of every rank (pieces[rank], in the
// fetch's rank order), following plan::Fetch: splits place windows, partial axes sum, broadcast
// axes are read from their first member. INVALID_ARGUMENT when a piece's shape is not the window
// its rank holds.
absl::StatusOr<HostTensor> AssembleFetch(const plan::Fetch& fetch,
                                         const std::vector<const HostTensor*>& pieces);

}  // namespace loom

#endif  // LOOM_CLIENT_FETCH_ASSEMBLY_H_
