#include "transport/ucx_context.h"

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "transport/ucx_status.h"

namespace loom::transport {

absl::StatusOr<std::unique_ptr<UcxContext>> UcxContext::Create(const UcxContextOptions& options) {
  ucp_config_t* config = nullptr;
  ucs_status_t status = ucp_config_read(/*env_prefix=*/nullptr, /*filename=*/nullptr, &config);
  if (status != UCS_OK) return UcxStatusToStatus(status, "reading the UCX configuration");
  absl::Cleanup release_config = [config] { ucp_config_release(config); };
  for (const auto& [name, value] : options.configuration) {
    status = ucp_config_modify(config, name.c_str(), value.c_str());
    if (status != UCS_OK) {
      return UcxStatusToStatus(status,
                               absl::StrCat("setting UCX configuration ", name, "=", value));
    }
  }

  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_AM | UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  // Each worker is driven by exactly one progress thread: no locking inside UCX.
  params.mt_workers_shared = 0;
  ucp_context_h context = nullptr;
  status = ucp_init(&params, config, &context);
  if (status != UCS_OK) return UcxStatusToStatus(status, "creating the UCX context");
  return std::unique_ptr<UcxContext>(new UcxContext(context));
}

UcxContext::~UcxContext() { ucp_cleanup(context_); }

}  // namespace loom::transport
