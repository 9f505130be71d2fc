#ifndef LOOM_COMPILER_SBP_H_
#define LOOM_COMPILER_SBP_H_

// SBP, the layout of a logical tensor on a placement's devices: Sbp on one hierarchy axis (split,
// broadcast, partial sum or partial max) and NdSbp, one Sbp per axis. ParseSbp and ParseNdSbp read
// the annotations of a job in OneFlow's or DTensor's spelling; NdSbpToString prints them.

#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"

namespace loom::compiler {

// How a logical tensor lives on the devices of one placement axis of n devices:
//  S(i): each device holds one of n balanced slices along axis i;
//  B:    each device holds the whole tensor;
//  P:    each device holds a tensor of full shape; the logical value is their sum (P(max): max).
struct Sbp {
  enum class Kind { kSplit, kBroadcast, kPartialSum, kPartialMax };

  Kind kind = Kind::kBroadcast;
  int axis = 0;  // kSplit only

  static Sbp Split(int axis) { return Sbp{Kind::kSplit, axis}; }
  static Sbp Broadcast() { return Sbp{Kind::kBroadcast, 0}; }
  static Sbp PartialSum() { return Sbp{Kind::kPartialSum, 0}; }
  static Sbp PartialMax() { return Sbp{Kind::kPartialMax, 0}; }

  bool is_split() const { return kind == Kind::kSplit; }
  bool is_broadcast() const { return kind == Kind::kBroadcast; }
  bool is_partial() const { return kind == Kind::kPartialSum || kind == Kind::kPartialMax; }

  // "S(0)", "B", "P", "P(max)".
  std::string ToString() const;

  bool operator==(const Sbp& other) const {
    return kind == other.kind && (kind != Kind::kSplit || axis == other.axis);
  }
  bool operator!=(const Sbp& other) const { return !(*this == other); }
  template <typename H>
  friend H AbslHashValue(H hash, const Sbp& sbp) {
    return H::combine(std::move(hash), static_cast<int>(sbp.kind), sbp.is_split() ? sbp.axis : 0);
  }
};

// One Sbp per axis of a placement's hierarchy: (S(0), S(1)) on [2, 2].
using NdSbp = absl::InlinedVector<Sbp, 3>;

// Parses OneFlow's spelling ("S(0)", "B", "P", "P(sum)", "P(max)") and DTensor's ("Shard(0)",
// "Replicate", "Partial", "Partial(max)"); spaces are ignored.
absl::StatusOr<Sbp> ParseSbp(const std::string& text);
absl::StatusOr<NdSbp> ParseNdSbp(const std::vector<std::string>& texts);

// "(S(0), B)"; a one-axis NdSbp prints as "S(0)".
std::string NdSbpToString(const NdSbp& sbp);

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_SBP_H_
