#include "transport/ucx_context.h"

#include <cstdio>
#include <cstdlib>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "transport/ucx_status.h"

namespace loom::transport {
namespace {

// The value of UCX_TLS after the environment and the overrides: UCX 1.13 has no getter for one
// setting, so the configuration is printed to memory and its TLS line read back.
std::string EffectiveTransports(const ucp_config_t* config) {
  char* text = nullptr;
  size_t length = 0;
  FILE* stream = open_memstream(&text, &length);
  if (stream == nullptr) return "";
  ucp_config_print(config, stream, /*title=*/nullptr, UCS_CONFIG_PRINT_CONFIG);
  std::fclose(stream);
  std::string transports;
  for (absl::string_view line : absl::StrSplit(absl::string_view(text, length), '\n')) {
    if (absl::ConsumePrefix(&line, "UCX_TLS=")) transports = std::string(line);
  }
  std::free(text);
  return transports;
}

}  // namespace

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

  std::string transports = EffectiveTransports(config);

  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_AM | UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  // Each worker is driven by exactly one progress thread: no locking inside UCX.
  params.mt_workers_shared = 0;
  ucp_context_h context = nullptr;
  status = ucp_init(&params, config, &context);
  if (status != UCS_OK) return UcxStatusToStatus(status, "creating the UCX context");
  return std::unique_ptr<UcxContext>(new UcxContext(context, std::move(transports)));
}

UcxContext::~UcxContext() { ucp_cleanup(context_); }

}  // namespace loom::transport
