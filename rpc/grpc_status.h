#ifndef LOOM_RPC_GRPC_STATUS_H_
#define LOOM_RPC_GRPC_STATUS_H_

// Status conversions between absl::Status (Loom's every module boundary), gRPC's status (the
// wire) and the API's JobError (a job's end in JobInfo and events): written once, here.

#include "absl/status/status.h"
#include "grpcpp/support/status.h"
#include "proto/loom/v1/job_service.pb.h"

namespace loom {

// The same code (absl's and gRPC's canonical codes are the same numbers) and message, in both
// directions.
grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

// A status as the API's JobError (code and message), and back.
v1::JobError ToJobError(const absl::Status& status);
absl::Status FromJobError(const v1::JobError& error);

}  // namespace loom

#endif  // LOOM_RPC_GRPC_STATUS_H_
