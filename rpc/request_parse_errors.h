#ifndef LOOM_RPC_REQUEST_PARSE_ERRORS_H_
#define LOOM_RPC_REQUEST_PARSE_ERRORS_H_

// A gRPC server interceptor that answers a request body which does not parse as its method's
// request message with INVALID_ARGUMENT naming the method and the request type, instead of gRPC's
// own INTERNAL with an empty message. Install it on a grpc::ServerBuilder through
// builder.experimental().SetInterceptorCreators.

#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "grpcpp/support/server_interceptor.h"

namespace loom {

// Makes the factory of the interceptor. It touches only a unary or server-streaming call whose
// request message gRPC failed to deserialize (it saw no request at POST_RECV_MESSAGE) and whose
// status is INTERNAL; every other call and status passes unchanged. The new message never holds
// the body's bytes.
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
MakeRequestParseErrorInterceptorFactory();

// The message for a request body of `method` ("/package.Service/Method") that does not parse:
// names the method and, when the generated descriptor pool knows the method, its request type.
std::string RequestParseErrorMessage(absl::string_view method);

}  // namespace loom

#endif  // LOOM_RPC_REQUEST_PARSE_ERRORS_H_
