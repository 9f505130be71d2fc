#include "transport/ucx_endpoint.h"

#include "glog/logging.h"
#include "transport/ucx_status.h"

namespace loom::transport {

absl::StatusOr<std::unique_ptr<UcxEndpoint>> UcxEndpoint::Create(
    UcxWorker& worker, absl::string_view peer_address, ucp_err_handler_cb_t error_callback,
    void* error_argument) {
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.address = reinterpret_cast<const ucp_address_t*>(peer_address.data());
  params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler.cb = error_callback;
  params.err_handler.arg = error_argument;
  ucp_ep_h endpoint = nullptr;
  ucs_status_t status = ucp_ep_create(worker.handle(), &params, &endpoint);
  if (status != UCS_OK) return UcxStatusToStatus(status, "creating a UCX endpoint");
  return std::unique_ptr<UcxEndpoint>(new UcxEndpoint(worker, endpoint));
}

UcxEndpoint::~UcxEndpoint() {
  if (!close_started_) Close(/*force=*/true);
  absl::Time deadline = absl::Now() + absl::Seconds(1);
  while (!IsClosed() && absl::Now() < deadline) worker_.Progress();
  if (!IsClosed()) {
    LOG(ERROR) << "a UCX endpoint did not close within a second; abandoning its close request";
  }
}

void UcxEndpoint::Close(bool force) {
  if (close_started_) return;
  close_started_ = true;
  ucp_request_param_t params{};
  params.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  params.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
  ucs_status_ptr_t request = ucp_ep_close_nbx(endpoint_, &params);
  if (UCS_PTR_IS_PTR(request)) close_request_ = request;
  // An immediate error (UCS_PTR_IS_ERR) still releases the endpoint: nothing left to wait for.
}

bool UcxEndpoint::IsClosed() {
  if (!close_started_) return false;
  if (close_request_ == nullptr) return true;
  if (ucp_request_check_status(close_request_) == UCS_INPROGRESS) return false;
  ucp_request_free(close_request_);
  close_request_ = nullptr;
  return true;
}

}  // namespace loom::transport
