#ifndef LOOM_CLIENT_RAW_UNARY_CALL_H_
#define LOOM_CLIENT_RAW_UNARY_CALL_H_

// RawUnaryCall: a unary gRPC call with serialized bytes in and out, without generated code. The
// cluster client's health check (grpc.health.v1, which ships no C++ code) and the cluster tests
// call it.

#include <memory>
#include <string>

#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/status.h"

namespace loom {

// Calls `method` ("/package.Service/Method") on `channel` with serialized request bytes, without
// generated code (services such as grpc.health.v1 ship none for C++, and tests send bytes that
// are no valid message). On OK, `response_bytes` holds the serialized response. The context's
// deadline bounds the call.
grpc::Status RawUnaryCall(const std::shared_ptr<grpc::Channel>& channel,
                          grpc::ClientContext* context, const std::string& method,
                          const std::string& request_bytes, std::string* response_bytes);

}  // namespace loom

#endif  // LOOM_CLIENT_RAW_UNARY_CALL_H_
