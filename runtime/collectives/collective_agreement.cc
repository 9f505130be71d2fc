#include "runtime/collectives/collective_agreement.h"

#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/collective_shapes.h"
#include "core/data_type.h"

namespace loom {
namespace {

bool SameCollective(const plan::CollectiveConf& a, const plan::CollectiveConf& b) {
  return a.sequence() == b.sequence() && a.name() == b.name() && a.kind() == b.kind();
}

// The fields of a collective's settings that its kind uses, the others left out: settings compare
// equal exactly when they are described alike.
struct CollectiveSettings {
  plan::CollectiveKind kind = plan::COLLECTIVE_KIND_UNSPECIFIED;
  bool max = false;  // a reduction's operator: max, or else sum
  std::optional<int32_t> axis;
  std::optional<int32_t> concat_axis;
  bool operator==(const CollectiveSettings&) const = default;
};

CollectiveSettings SettingsOf(const plan::CollectiveConf& conf) {
  CollectiveSettings settings;
  settings.kind = conf.kind();
  if (IsReduction(conf.kind())) settings.max = conf.reduce() == plan::REDUCE_MAX;
  if (conf.kind() != plan::ALL_REDUCE) settings.axis = conf.axis();
  if (conf.kind() == plan::ALL_TO_ALL) settings.concat_axis = conf.concat_axis();
  return settings;
}

}  // namespace

std::string DescribeCollectiveSettings(const plan::CollectiveConf& conf) {
  const CollectiveSettings settings = SettingsOf(conf);
  std::string text = CollectiveKindName(settings.kind);
  if (IsReduction(settings.kind)) absl::StrAppend(&text, settings.max ? " max" : " sum");
  if (settings.axis.has_value()) absl::StrAppend(&text, " axis ", *settings.axis);
  if (settings.concat_axis.has_value()) {
    absl::StrAppend(&text, " concat_axis ", *settings.concat_axis);
  }
  return text;
}

bool SameCollectiveSettings(const plan::CollectiveConf& a, const plan::CollectiveConf& b) {
  return SettingsOf(a) == SettingsOf(b);
}

absl::Status CheckCollectiveAgreement(absl::string_view communicator, int num_collectives,
                                      int64_t position,
                                      absl::Span<const CollectiveSignature> ranks) {
  const int size = static_cast<int>(ranks.size());
  const plan::CollectiveConf& first = *ranks[0].conf;
  const std::string prefix = absl::StrCat("communicator '", communicator, "': ");
  for (int rank = 1; rank < size; ++rank) {
    const plan::CollectiveConf& other = *ranks[rank].conf;
    if (!SameCollective(first, other)) {
      std::string first_text = DescribeCollective(first);
      std::string other_text = DescribeCollective(other);
      if (first.kind() != other.kind()) {
        absl::StrAppend(&first_text, ", kind ", CollectiveKindName(first.kind()), ",");
        absl::StrAppend(&other_text, ", kind ", CollectiveKindName(other.kind()));
      }
      return absl::InternalError(absl::StrCat(
          prefix, "rank 0 runs collective ", first_text, " while rank ", rank, " runs ", other_text,
          ": the ranks left the communicator's global order (a plan bug)"));
    }
    if (!SameCollectiveSettings(first, other)) {
      return absl::InternalError(
          absl::StrCat(prefix, "ranks 0 and ", rank, " run collective ", DescribeCollective(first),
                       " with different settings: ", DescribeCollectiveSettings(first), " vs ",
                       DescribeCollectiveSettings(other)));
    }
  }
  if (num_collectives > 0 && first.sequence() != position % num_collectives) {
    return absl::InternalError(absl::StrCat(
        prefix, "every rank runs collective ", DescribeCollective(first), " as the communicator's ",
        "collective number ", position, ", where its global order of ", num_collectives,
        " collectives puts sequence ", position % num_collectives));
  }
  const std::string where = absl::StrCat(prefix, "collective ", DescribeCollective(first), ": ");
  const plan::DataType data_type = ranks[0].input_type;
  std::vector<Shape> inputs;
  inputs.reserve(size);
  for (int rank = 0; rank < size; ++rank) {
    const CollectiveSignature& signature = ranks[rank];
    if (signature.input_type != data_type || signature.output_type != data_type) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, "rank ", rank, " has input ", DataTypeName(signature.input_type), " and output ",
          DataTypeName(signature.output_type), " while rank 0's input is ", DataTypeName(data_type),
          ": every buffer of a collective has one data type"));
    }
    inputs.push_back(signature.input_shape);
  }
  if (IsReduction(first.kind()) && data_type != plan::FLOAT32) {
    return absl::InvalidArgumentError(absl::StrCat(where, CollectiveKindName(first.kind()),
                                                   " reduces float32 only, not ",
                                                   DataTypeName(data_type)));
  }
  for (int rank = 0; rank < size; ++rank) {
    absl::StatusOr<Shape> expected = CollectiveOutputShape(first, inputs, rank);
    if (!expected.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(where, expected.status().message()));
    }
    if (*expected != ranks[rank].output_shape) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "rank ", rank, "'s output is ", ranks[rank].output_shape.ToString(),
                       " but the inputs give it ", expected->ToString()));
    }
  }
  return absl::OkStatus();
}

}  // namespace loom
