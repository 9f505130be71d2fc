#include "transport/ucx_worker.h"

#include "transport/ucx_status.h"

namespace loom::transport {

absl::StatusOr<std::unique_ptr<UcxWorker>> UcxWorker::Create(UcxContext& context) {
  ucp_worker_params_t params{};
  params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  // Several threads use the worker, one at a time (Transport's worker token).
  params.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  ucp_worker_h worker = nullptr;
  ucs_status_t status = ucp_worker_create(context.handle(), &params, &worker);
  if (status != UCS_OK) return UcxStatusToStatus(status, "creating the UCX worker");

  ucp_worker_attr_t attributes{};
  attributes.field_mask = UCP_WORKER_ATTR_FIELD_ADDRESS;
  status = ucp_worker_query(worker, &attributes);
  if (status != UCS_OK) {
    ucp_worker_destroy(worker);
    return UcxStatusToStatus(status, "querying the UCX worker's address");
  }
  std::string address(reinterpret_cast<const char*>(attributes.address), attributes.address_length);
  ucp_worker_release_address(worker, attributes.address);

  int event_fd = -1;
  status = ucp_worker_get_efd(worker, &event_fd);
  if (status != UCS_OK) {
    ucp_worker_destroy(worker);
    return UcxStatusToStatus(status, "getting the UCX worker's event file descriptor");
  }
  return std::unique_ptr<UcxWorker>(new UcxWorker(worker, std::move(address), event_fd));
}

UcxWorker::~UcxWorker() { ucp_worker_destroy(worker_); }

bool UcxWorker::Progress() { return ucp_worker_progress(worker_) != 0; }

absl::StatusOr<bool> UcxWorker::Arm() {
  ucs_status_t status = ucp_worker_arm(worker_);
  if (status == UCS_OK) return true;
  if (status == UCS_ERR_BUSY) return false;
  return UcxStatusToStatus(status, "arming the UCX worker's event file descriptor");
}

}  // namespace loom::transport
