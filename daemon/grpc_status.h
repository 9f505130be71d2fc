#ifndef LOOM_DAEMON_GRPC_STATUS_H_
#define LOOM_DAEMON_GRPC_STATUS_H_

#include "absl/status/status.h"
#include "grpcpp/support/status.h"
#include "proto/loom/v1/job_service.pb.h"

namespace loom::daemon {

// The same code (absl's and gRPC's canonical codes are the same numbers) and message.
grpc::Status ToGrpcStatus(const absl::Status& status);

// A status as the API's JobError (code and message), and back.
v1::JobError ToJobError(const absl::Status& status);
absl::Status FromJobError(const v1::JobError& error);

}  // namespace loom::daemon

#endif  // LOOM_DAEMON_GRPC_STATUS_H_
