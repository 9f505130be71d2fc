#ifndef LOOM_RPC_GRPC_DURATIONS_H_
#define LOOM_RPC_GRPC_DURATIONS_H_

// GrpcMilliseconds: an absl::Duration as the int milliseconds that gRPC's channel arguments take
// (keepalive, reconnect backoff), for the channels of the cluster client and of loomd's workers
// and coordinator forwarding.

#include <algorithm>
#include <cstdint>
#include <limits>

#include "absl/time/time.h"

namespace loom {

// A duration as the int milliseconds of gRPC's channel arguments (keepalive, reconnect backoff):
// at least 1 (gRPC reads 0 as "off" or "default" for some), at most INT_MAX.
inline int GrpcMilliseconds(absl::Duration duration) {
  return static_cast<int>(
      std::clamp<int64_t>(absl::ToInt64Milliseconds(duration), 1, std::numeric_limits<int>::max()));
}

}  // namespace loom

#endif  // LOOM_RPC_GRPC_DURATIONS_H_
