#include "compiler/pipeline_rounds.h"

#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "core/device_key.h"

namespace loom::compiler {
namespace {

absl::Status Invalid(job::PipelineSchedule schedule, const std::string& message) {
  return absl::InvalidArgumentError(
      absl::StrCat("pipeline_schedule ", job::PipelineSchedule_Name(schedule), ": ", message));
}

// The first `groups` stages (one per group) share no device.
absl::Status CheckGroupsApart(job::PipelineSchedule schedule,
                              const std::vector<Placement>& placements, int groups,
                              const std::string& rule) {
  absl::flat_hash_set<DeviceKey> seen;
  for (int stage = 0; stage < groups; ++stage) {
    for (const plan::Device& device : placements[stage].devices()) {
      if (!seen.insert(DeviceKey::Of(device)).second) {
        return Invalid(schedule, absl::StrCat("stage ", stage,
                                              " shares a device with an earlier stage of its "
                                              "round (",
                                              rule, ", here p = ", groups, ")"));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int> RoundRobin(const std::vector<Placement>& placements, int num_stages) {
  const job::PipelineSchedule schedule = job::INTERLEAVED;
  const std::string rule =
      "an interleaved pipeline places stage k on the placement of stage k mod p, for p groups of "
      "devices that each hold at least two stages";
  int groups = 1;
  while (groups < num_stages && placements[groups] != placements[0]) ++groups;
  if (groups == num_stages) {
    return Invalid(schedule, absl::StrCat(rule, "; no stage but stage 0 has stage 0's placement"));
  }
  if (num_stages % groups != 0) {
    return Invalid(schedule, absl::StrCat(rule, "; stage 0's placement repeats at stage ", groups,
                                          ", which does not divide the ", num_stages, " stages"));
  }
  for (int stage = groups; stage < num_stages; ++stage) {
    if (placements[stage] != placements[stage % groups]) {
      return Invalid(schedule,
                     absl::StrCat("stage ", stage, "'s placement differs from stage ",
                                  stage % groups, "'s (", rule, ", here p = ", groups, ")"));
    }
  }
  if (absl::Status apart = CheckGroupsApart(schedule, placements, groups, rule); !apart.ok()) {
    return apart;
  }
  return num_stages / groups;
}

absl::StatusOr<int> VShape(const std::vector<Placement>& placements, int num_stages) {
  const job::PipelineSchedule schedule = job::ZERO_BUBBLE_V;
  const std::string rule =
      "a V-shaped pipeline of 2p stages places stage 2p - 1 - k on the placement of stage k, so "
      "that each of p groups of devices holds two stages";
  if (num_stages % 2 != 0) {
    return Invalid(schedule, absl::StrCat(rule, "; the job's ops use ", num_stages, " stages"));
  }
  const int groups = num_stages / 2;
  for (int stage = groups; stage < num_stages; ++stage) {
    const int mirror = num_stages - 1 - stage;
    if (placements[stage] != placements[mirror]) {
      return Invalid(schedule, absl::StrCat("stage ", stage, "'s placement differs from stage ",
                                            mirror, "'s (", rule, ")"));
    }
  }
  if (absl::Status apart = CheckGroupsApart(schedule, placements, groups, rule); !apart.ok()) {
    return apart;
  }
  return 2;
}

}  // namespace

absl::StatusOr<int> StagesPerGroup(job::PipelineSchedule schedule,
                                   const std::vector<Placement>& placements, int num_stages) {
  if (schedule != job::INTERLEAVED && schedule != job::ZERO_BUBBLE_V) return 1;
  if (num_stages < 2) {
    return Invalid(schedule, absl::StrCat("needs groups of devices that each hold several "
                                          "pipeline stages; the job's ops use ",
                                          num_stages, " stage(s)"));
  }
  return schedule == job::INTERLEAVED ? RoundRobin(placements, num_stages)
                                      : VShape(placements, num_stages);
}

}  // namespace loom::compiler
