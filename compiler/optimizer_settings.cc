#include "compiler/optimizer_settings.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace loom::compiler {
namespace {

LearningRateDecay DecayOf(job::LearningRateSchedule::Decay decay) {
  switch (decay) {
    case job::LearningRateSchedule::DECAY_LINEAR:
      return LearningRateDecay::kLinear;
    case job::LearningRateSchedule::DECAY_COSINE:
      return LearningRateDecay::kCosine;
    default:
      return LearningRateDecay::kConstant;
  }
}

std::string GroupName(const job::Optimizer& optimizer, int group) {
  const std::string& name = optimizer.parameter_groups(group).name();
  return name.empty() ? absl::StrCat("parameter group ", group)
                      : absl::StrCat("parameter group '", name, "'");
}

}  // namespace

double LearningRateOf(const job::Optimizer& optimizer) {
  return optimizer.has_sgd() ? optimizer.sgd().learning_rate() : optimizer.adamw().learning_rate();
}

double WeightDecayOf(const job::Optimizer& optimizer) {
  return optimizer.has_sgd() ? optimizer.sgd().weight_decay() : optimizer.adamw().weight_decay();
}

absl::StatusOr<LearningRateSchedule> ScheduleOf(const job::Optimizer& optimizer) {
  const job::LearningRateSchedule& settings = optimizer.learning_rate_schedule();
  LearningRateSchedule schedule;
  schedule.warmup_steps = settings.warmup_steps();
  schedule.decay = DecayOf(settings.decay());
  schedule.decay_steps = settings.decay_steps();
  const double peak = LearningRateOf(optimizer);
  const double floor = settings.min_learning_rate();
  if (!std::isfinite(floor) || floor < 0 || floor > peak) {
    return absl::InvalidArgumentError(absl::StrCat(
        "optimizer: min_learning_rate ", floor, " must be between 0 and the learning rate ", peak));
  }
  schedule.min_ratio = peak > 0 ? floor / peak : 0.0;
  if (absl::Status status = ValidateLearningRateSchedule(schedule); !status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("optimizer: ", status.message()));
  }
  return schedule;
}

bool MatchesVariablePattern(const std::string& pattern, const std::string& name) {
  // Greedy matching with backtracking to the last '*'.
  size_t p = 0;
  size_t n = 0;
  size_t star = std::string::npos;
  size_t resume = 0;
  while (n < name.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = n;
    } else if (p < pattern.size() && pattern[p] == name[n]) {
      ++p;
      ++n;
    } else if (star != std::string::npos) {
      p = star + 1;
      n = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

absl::StatusOr<std::vector<int>> AssignParameterGroups(const job::Optimizer& optimizer,
                                                       const std::vector<std::string>& variables) {
  std::vector<int> group_of(variables.size(), -1);
  for (int group = 0; group < optimizer.parameter_groups_size(); ++group) {
    const job::ParameterGroup& settings = optimizer.parameter_groups(group);
    if (settings.has_learning_rate_scale() &&
        !(std::isfinite(settings.learning_rate_scale()) && settings.learning_rate_scale() >= 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat(GroupName(optimizer, group), ": learning_rate_scale ",
                       settings.learning_rate_scale(), " must be finite and >= 0"));
    }
    if (settings.has_weight_decay() &&
        !(std::isfinite(settings.weight_decay()) && settings.weight_decay() >= 0)) {
      return absl::InvalidArgumentError(absl::StrCat(GroupName(optimizer, group), ": weight_decay ",
                                                     settings.weight_decay(),
                                                     " must be finite and >= 0"));
    }
    for (const std::string& pattern : settings.variables()) {
      bool matched = false;
      for (size_t v = 0; v < variables.size(); ++v) {
        if (!MatchesVariablePattern(pattern, variables[v])) continue;
        matched = true;
        if (group_of[v] >= 0 && group_of[v] != group) {
          return absl::InvalidArgumentError(absl::StrCat(
              "variable '", variables[v], "' is in ", GroupName(optimizer, group_of[v]), " and in ",
              GroupName(optimizer, group), " (pattern '", pattern, "')"));
        }
        group_of[v] = group;
      }
      if (!matched) {
        return absl::InvalidArgumentError(absl::StrCat(GroupName(optimizer, group), ": pattern '",
                                                       pattern, "' names no variable of the job"));
      }
    }
  }
  return group_of;
}

}  // namespace loom::compiler
