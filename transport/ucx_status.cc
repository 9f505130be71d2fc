#include "transport/ucx_status.h"

#include "absl/strings/str_cat.h"

namespace loom::transport {

absl::Status UcxStatusToStatus(ucs_status_t status, absl::string_view context) {
  if (status == UCS_OK) return absl::OkStatus();
  std::string message = absl::StrCat(context, ": ", ucs_status_string(status));
  switch (status) {
    case UCS_ERR_CANCELED:
      return absl::CancelledError(message);
    case UCS_ERR_TIMED_OUT:
      return absl::DeadlineExceededError(message);
    case UCS_ERR_NO_MEMORY:
    case UCS_ERR_EXCEEDS_LIMIT:
    case UCS_ERR_NO_RESOURCE:
      return absl::ResourceExhaustedError(message);
    case UCS_ERR_INVALID_PARAM:
    case UCS_ERR_MESSAGE_TRUNCATED:
      return absl::InvalidArgumentError(message);
    case UCS_ERR_UNSUPPORTED:
      return absl::UnimplementedError(message);
    case UCS_ERR_ENDPOINT_TIMEOUT:  // what UCX 1.13 reports when a TCP peer closes or dies
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_REJECTED:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_IO_ERROR:
      return absl::UnavailableError(message);
    default:
      return absl::InternalError(message);
  }
}

}  // namespace loom::transport
