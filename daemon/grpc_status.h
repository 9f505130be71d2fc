#ifndef LOOM_DAEMON_GRPC_STATUS_H_
#define LOOM_DAEMON_GRPC_STATUS_H_

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace loom::daemon {

// The same code (absl's and gRPC's canonical codes are the same numbers) and message.
grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace loom::daemon

#endif  // LOOM_DAEMON_GRPC_STATUS_H_
