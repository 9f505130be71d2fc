#include "rpc/grpc_status.h"

#include <string>

namespace loom {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

v1::JobError ToJobError(const absl::Status& status) {
  v1::JobError error;
  error.set_code(static_cast<int32_t>(status.code()));
  error.set_message(std::string(status.message()));
  return error;
}

absl::Status FromJobError(const v1::JobError& error) {
  return absl::Status(static_cast<absl::StatusCode>(error.code()), error.message());
}

}  // namespace loom
