#include "daemon/plan_response.h"

#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/compressed_message.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/gzip_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/wire_format_lite.h"

namespace loom::daemon {

using google::protobuf::internal::WireFormatLite;

v1::GetPlanResponse PlanResponseOf(const compiler::CompiledJob& compiled, std::optional<int> node) {
  v1::GetPlanResponse response;
  if (node.has_value()) {
    *response.add_node_plans() = compiled.result.node_plans[static_cast<size_t>(*node)];
    return response;
  }
  *response.mutable_plan() = compiled.result.plan;
  for (const plan::Plan& node_plan : compiled.result.node_plans) {
    *response.add_node_plans() = node_plan;
  }
  return response;
}

void KeepOnlyNodePlan(int node, v1::GetPlanResponse* response) {
  plan::Plan kept = std::move(*response->mutable_node_plans(node));
  response->Clear();
  *response->add_node_plans() = std::move(kept);
}

absl::StatusOr<std::string> SerializedPlanResponse(const compiler::CompiledJob& compiled,
                                                   bool compressed) {
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream output(&bytes);
    std::optional<google::protobuf::io::GzipOutputStream> gzip;
    if (compressed) gzip.emplace(&output, CompressedMessageOptions());
    google::protobuf::io::CodedOutputStream coded(
        gzip.has_value() ? static_cast<google::protobuf::io::ZeroCopyOutputStream*>(&*gzip)
                         : &output);
    // Each plan as the response's field would be: its tag, its length, its bytes.
    auto write = [&](int field, const plan::Plan& plan) -> absl::Status {
      const size_t size = plan.ByteSizeLong();  // caches the sizes SerializeWithCachedSizes uses
      if (size > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
        return absl::ResourceExhaustedError(absl::StrCat("plan '", plan.job_name(), "' of node ",
                                                         plan.node(), " takes ", size,
                                                         " bytes, over protobuf's 2 GiB"));
      }
      WireFormatLite::WriteTag(field, WireFormatLite::WIRETYPE_LENGTH_DELIMITED, &coded);
      coded.WriteVarint32(static_cast<uint32_t>(size));
      plan.SerializeWithCachedSizes(&coded);
      return absl::OkStatus();
    };
    absl::Status status = write(v1::GetPlanResponse::kPlanFieldNumber, compiled.result.plan);
    for (const plan::Plan& node_plan : compiled.result.node_plans) {
      if (status.ok()) status = write(v1::GetPlanResponse::kNodePlansFieldNumber, node_plan);
    }
    if (!status.ok()) return status;
    coded.Trim();
  }
  bytes.shrink_to_fit();
  return bytes;
}

}  // namespace loom::daemon
