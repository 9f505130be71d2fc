#ifndef LOOM_RUNTIME_COLLECTIVES_COLLECTIVE_AGREEMENT_H_
#define LOOM_RUNTIME_COLLECTIVES_COLLECTIVE_AGREEMENT_H_

// The check that the ranks of a collective agree: CollectiveSignature (what one rank brings: the
// collective's settings, data types and shapes) and CheckCollectiveAgreement, which every
// collective backend runs on all ranks' signatures, plus DescribeCollectiveSettings and
// SameCollectiveSettings for the settings ranks must share.

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/tensor.h"
#include "proto/plan.pb.h"

namespace loom {

// What one rank brings to a collective, as far as its peers must agree on it (DESIGN.md §4).
struct CollectiveSignature {
  const plan::CollectiveConf* conf = nullptr;
  plan::DataType input_type = plan::DATA_TYPE_UNSPECIFIED;
  Shape input_shape;
  plan::DataType output_type = plan::DATA_TYPE_UNSPECIFIED;
  Shape output_shape;
};

// The check every backend runs once it knows all ranks' signatures (in rank order) for the
// collective at `position` (the number of collectives the communicator completed before it):
//  - every rank runs the same collective (sequence, name, kind) with the same settings, else
//    INTERNAL naming both collectives and ranks ("rank 0 runs collective 'a' (sequence 0) while
//    rank 1 runs 'b' (sequence 1)");
//  - the sequence is the one the global order of `num_collectives` puts at `position` (INTERNAL);
//  - data types agree, reductions are float32, and every output has the shape the inputs give it
//    (INVALID_ARGUMENT).
// Every rank that runs it on the same signatures gets the same status.
absl::Status CheckCollectiveAgreement(absl::string_view communicator, int num_collectives,
                                      int64_t position,
                                      absl::Span<const CollectiveSignature> ranks);

// "all-reduce sum", "all-gather axis 1", "all-to-all axis 0 concat_axis 1": the settings ranks
// must share beyond the collective's identity.
std::string DescribeCollectiveSettings(const plan::CollectiveConf& conf);

// Whether `a` and `b` have the same settings in that sense (the fields their kind uses), without
// building the strings.
bool SameCollectiveSettings(const plan::CollectiveConf& a, const plan::CollectiveConf& b);

}  // namespace loom

#endif  // LOOM_RUNTIME_COLLECTIVES_COLLECTIVE_AGREEMENT_H_
