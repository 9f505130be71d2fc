#include "rpc/request_parse_errors.h"

#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "google/protobuf/descriptor.h"
#include "grpcpp/support/interceptor.h"
#include "grpcpp/support/server_interceptor.h"
#include "grpcpp/support/status.h"

namespace loom {
namespace {

using ::grpc::experimental::InterceptionHookPoints;
using ::grpc::experimental::InterceptorBatchMethods;
using ::grpc::experimental::ServerRpcInfo;

// One call's interceptor. gRPC's server (sync and callback alike) deserializes a unary or
// server-streaming call's one request before the handler runs and reports it at
// POST_RECV_MESSAGE, with no message when it did not parse; the handler is then skipped and the
// parse status (INTERNAL, for proto3 with an empty message) goes out through PRE_SEND_STATUS.
// The batches of one call come one after another, so the flag needs no lock.
class RequestParseErrorInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit RequestParseErrorInterceptor(std::string method) : method_(std::move(method)) {}

  void Intercept(InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_MESSAGE) &&
        methods->GetRecvMessage() == nullptr) {
      request_unparsed_ = true;
    }
    if (request_unparsed_ &&
        methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS) &&
        methods->GetSendStatus().error_code() == grpc::StatusCode::INTERNAL) {
      methods->ModifySendStatus(
          grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, RequestParseErrorMessage(method_)));
    }
    methods->Proceed();
  }

 private:
  const std::string method_;
  bool request_unparsed_ = false;
};

class RequestParseErrorInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateServerInterceptor(ServerRpcInfo* info) override {
    // Client and bidirectional streams read their messages in the handler, which sees a failed
    // read itself (and a stream's end also reads no message): left alone.
    if (info->type() != ServerRpcInfo::Type::UNARY &&
        info->type() != ServerRpcInfo::Type::SERVER_STREAMING) {
      return nullptr;
    }
    return new RequestParseErrorInterceptor(info->method() == nullptr ? "" : info->method());
  }
};

}  // namespace

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
MakeRequestParseErrorInterceptorFactory() {
  return std::make_unique<RequestParseErrorInterceptorFactory>();
}

std::string RequestParseErrorMessage(absl::string_view method) {
  // "/loom.v1.JobService/SubmitJob" is the method "loom.v1.JobService.SubmitJob".
  std::string full_name(absl::StripPrefix(method, "/"));
  const size_t slash = full_name.rfind('/');
  const google::protobuf::MethodDescriptor* descriptor = nullptr;
  if (slash != std::string::npos) {
    full_name[slash] = '.';
    descriptor = google::protobuf::DescriptorPool::generated_pool()->FindMethodByName(full_name);
  }
  if (descriptor == nullptr) {
    return absl::StrCat("the request body of ", method, " does not parse as its request message");
  }
  return absl::StrCat("the request body of ", method, " is not a valid ",
                      descriptor->input_type()->full_name());
}

}  // namespace loom
