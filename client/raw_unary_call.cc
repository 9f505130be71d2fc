#include "client/raw_unary_call.h"

#include <vector>

#include "grpcpp/generic/generic_stub.h"

namespace loom {

grpc::Status RawUnaryCall(const std::shared_ptr<grpc::Channel>& channel,
                          grpc::ClientContext* context, const std::string& method,
                          const std::string& request_bytes, std::string* response_bytes) {
  grpc::GenericStub stub(channel);
  grpc::CompletionQueue queue;
  grpc::Slice slice(request_bytes);
  grpc::ByteBuffer request(&slice, 1);
  std::unique_ptr<grpc::GenericClientAsyncResponseReader> call =
      stub.PrepareUnaryCall(context, method, request, &queue);
  call->StartCall();
  grpc::ByteBuffer response;
  grpc::Status status;
  call->Finish(&response, &status, reinterpret_cast<void*>(1));
  void* tag = nullptr;
  bool ok = false;
  queue.Next(&tag, &ok);  // returns when the call ends
  queue.Shutdown();
  while (queue.Next(&tag, &ok)) {
  }
  response_bytes->clear();
  if (status.ok()) {
    std::vector<grpc::Slice> slices;
    if (response.Dump(&slices).ok()) {
      for (const grpc::Slice& part : slices) {
        response_bytes->append(reinterpret_cast<const char*>(part.begin()), part.size());
      }
    }
  }
  return status;
}

}  // namespace loom
