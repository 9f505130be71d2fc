#ifndef LOOM_RUNTIME_COLLECTIVES_COLLECTIVE_HEADER_H_
#define LOOM_RUNTIME_COLLECTIVES_COLLECTIVE_HEADER_H_

// CollectiveHeader: what a rank of a network collective sends every peer before the data move (the
// collective's identity and settings, its position in the communicator's order, its buffers' data
// types and shapes), with its fixed-size wire encoding and the CollectiveSignature it yields for
// CheckCollectiveAgreement. Used by NetworkCollectives.

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "proto/plan.pb.h"
#include "runtime/collective_backend.h"
#include "runtime/collectives/collective_agreement.h"

namespace loom {

// What a rank of a network collective tells every peer before any data moves, so that all ranks
// can run CheckCollectiveAgreement on the same signatures (DESIGN.md §4): the collective's
// identity and settings, the rank's position in the communicator's order (`instance`, the number
// of collectives it ran before), and its buffers' data types and shapes.
//
// On the wire it is a fixed-size record (a network receive names its exact size) of little-endian
// 64-bit words followed by the name. Names longer than kMaxNameBytes travel as a prefix plus a
// fingerprint of the whole name, so two different long names still compare different.
struct CollectiveHeader {
  static constexpr size_t kBytes = 512;
  static constexpr int kMaxAxes = 8;
  static constexpr size_t kMaxNameBytes = 256;

  int rank = 0;
  int64_t instance = 0;
  // kind, reduce, axis, concat_axis, sequence and the (carried) name.
  plan::CollectiveConf conf;
  plan::DataType input_type = plan::DATA_TYPE_UNSPECIFIED;
  Shape input_shape;
  plan::DataType output_type = plan::DATA_TYPE_UNSPECIFIED;
  Shape output_shape;

  // INVALID_ARGUMENT when a buffer has more than kMaxAxes axes.
  static absl::StatusOr<CollectiveHeader> FromCall(const CollectiveCall& call, int64_t instance);

  // Writes kBytes bytes at `bytes`.
  void Encode(std::byte* bytes) const;
  // DATA_LOSS when `bytes` (kBytes of them) are not a header.
  static absl::StatusOr<CollectiveHeader> Decode(const std::byte* bytes);

  // Points into this header (which must outlive the signature).
  CollectiveSignature Signature() const {
    return CollectiveSignature{&conf, input_type, input_shape, output_type, output_shape};
  }
};

}  // namespace loom

#endif  // LOOM_RUNTIME_COLLECTIVES_COLLECTIVE_HEADER_H_
