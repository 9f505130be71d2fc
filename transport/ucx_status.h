#ifndef LOOM_TRANSPORT_UCX_STATUS_H_
#define LOOM_TRANSPORT_UCX_STATUS_H_

// UcxStatusToStatus: the conversion of a UCX status into an absl::Status whose message says what
// was being done. The UCX wrappers (context, worker, endpoint) and the Transport report UCX errors
// with it.

#include <ucs/type/status.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace loom::transport {

// Converts a UCX status into an absl::Status whose message starts with `context` (what was being
// done, and with whom) followed by UCX's own description. UCS_OK becomes OkStatus().
absl::Status UcxStatusToStatus(ucs_status_t status, absl::string_view context);

}  // namespace loom::transport

#endif  // LOOM_TRANSPORT_UCX_STATUS_H_
