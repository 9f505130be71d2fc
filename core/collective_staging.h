#ifndef LOOM_CORE_COLLECTIVE_STAGING_H_
#define LOOM_CORE_COLLECTIVE_STAGING_H_

// CollectiveStagingBytes: the host staging buffers, by slot, that one rank of a network collective
// needs for the blocks that cannot move in place. The network collectives allocate exactly these,
// and the compiler's memory estimate (compiler/memory_plan.cc) counts them.

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/tensor.h"
#include "proto/plan.pb.h"

namespace loom {

// What the network collectives (runtime/collectives/network_collectives.h) hold besides the
// caller's buffers: host staging buffers for the blocks that cannot move in place. The runtime
// allocates exactly these, and the compiler's memory estimate (compiler/memory_plan.h) counts them,
// so that a plan admitted at submit fits at launch and in its first step.

// The staging buffers rank `rank` of a network collective uses, in bytes by slot (0: none), given
// every rank's input shape in rank order and the element type. 2 x size slots:
//  - slot s (s < size): the block received from rank s, when it cannot land in the output in
//    place: reductions (all-reduce, reduce-scatter) receive every contribution but rank 0's
//    (the sum starts from it, in the output); all-gathers and all-to-alls whose blocks are not
//    contiguous in the output (concatenated along an axis other than the leading ones);
//  - slot size + d: the block packed for rank d, when it is not contiguous in the input
//    (reduce-scatters and all-to-alls split along an axis other than the leading ones).
// The runtime keeps one buffer per slot per (communicator, rank), grown to the largest size its
// collectives ask for. INVALID_ARGUMENT as CollectiveOutputShape when the shapes do not fit.
absl::StatusOr<std::vector<int64_t>> CollectiveStagingBytes(const plan::CollectiveConf& conf,
                                                            absl::Span<const Shape> input_shapes,
                                                            int rank, plan::DataType data_type);

}  // namespace loom

#endif  // LOOM_CORE_COLLECTIVE_STAGING_H_
