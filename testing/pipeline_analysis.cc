#include "testing/pipeline_analysis.h"

#include <algorithm>
#include <limits>
#include <map>
#include <utility>

namespace loom {
namespace {

struct PieceSpan {
  int64_t forward_start = std::numeric_limits<int64_t>::max();
  int64_t backward_start = std::numeric_limits<int64_t>::max();
  int64_t weight_gradient_start = std::numeric_limits<int64_t>::max();
  int64_t end = std::numeric_limits<int64_t>::min();
};

}  // namespace

std::vector<StageSchedule> AnalyzePipeline(const std::vector<ActEvent>& events,
                                           const std::vector<PipelineRole>& roles, int num_stages) {
  std::vector<StageSchedule> schedules(num_stages);
  // By (round, micro-batch).
  std::vector<std::map<std::pair<int, int64_t>, PieceSpan>> pieces(num_stages);
  std::vector<std::vector<std::pair<int64_t, int64_t>>> intervals(num_stages);
  for (const ActEvent& event : events) {
    if (event.task_index >= roles.size()) continue;
    const PipelineRole& role = roles[event.task_index];
    if (role.stage < 0 || role.stage >= num_stages) continue;
    PieceSpan& span = pieces[role.stage][{role.round, event.piece}];
    int64_t& start = role.weight_gradient ? span.weight_gradient_start
                     : role.backward      ? span.backward_start
                                          : span.forward_start;
    start = std::min(start, event.start_nanoseconds);
    span.end = std::max(span.end, event.end_nanoseconds);
    intervals[role.stage].emplace_back(event.start_nanoseconds, event.end_nanoseconds);
  }
  for (int stage = 0; stage < num_stages; ++stage) {
    StageSchedule& schedule = schedules[stage];
    // +1 when a micro-batch is taken in, -1 when it is let go.
    std::vector<std::pair<int64_t, int>> changes;
    std::vector<std::pair<int64_t, char>> passes;
    for (const auto& [piece, span] : pieces[stage]) {
      if (span.forward_start != std::numeric_limits<int64_t>::max()) {
        changes.emplace_back(span.forward_start, +1);
        changes.emplace_back(span.end, -1);
        passes.emplace_back(span.forward_start, 'F');
      }
      if (span.backward_start != std::numeric_limits<int64_t>::max()) {
        passes.emplace_back(span.backward_start, 'B');
      }
      if (span.weight_gradient_start != std::numeric_limits<int64_t>::max()) {
        passes.emplace_back(span.weight_gradient_start, 'W');
      }
    }
    schedule.peak_in_flight = PeakHeld(std::move(changes));
    std::stable_sort(passes.begin(), passes.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [time, pass] : passes) schedule.order.push_back(pass);

    std::vector<std::pair<int64_t, int64_t>>& acts = intervals[stage];
    if (acts.empty()) continue;
    std::sort(acts.begin(), acts.end());
    int64_t covered_end = acts.front().first;
    for (const auto& [start, end] : acts) {
      const int64_t from = std::max(start, covered_end);
      if (end > from) schedule.busy_nanoseconds += end - from;
      covered_end = std::max(covered_end, end);
    }
    schedule.first_start_nanoseconds = acts.front().first;
    schedule.last_end_nanoseconds = covered_end;
  }
  return schedules;
}

namespace {

// The role of a COMPUTE task of priority `priority` on device `device`; stage -1 for none.
PipelineRole RoleOf(int priority, int device, job::PipelineSchedule schedule, int virtual_stages) {
  switch (schedule) {
    case job::INTERLEAVED:
      if (priority >= virtual_stages) {
        return PipelineRole{.stage = device, .round = priority - virtual_stages};
      }
      if (priority < 0) {
        return PipelineRole{.stage = device, .backward = true, .round = priority + virtual_stages};
      }
      return PipelineRole{};
    case job::ZERO_BUBBLE_V:
      if (priority >= 2) return PipelineRole{.stage = device, .round = priority - 2};
      if (priority == -1 || priority == -2) {
        return PipelineRole{.stage = device, .backward = true, .round = -1 - priority};
      }
      if (priority == -3 || priority == -4) {
        return PipelineRole{
            .stage = device, .backward = true, .weight_gradient = true, .round = -3 - priority};
      }
      return PipelineRole{};
    default:
      return PipelineRole{
          .stage = device, .backward = priority != 0, .weight_gradient = priority < -1};
  }
}

}  // namespace

std::vector<PipelineRole> PipelineRolesByDevice(const plan::Plan& plan,
                                                job::PipelineSchedule schedule,
                                                int virtual_stages) {
  std::vector<PipelineRole> roles(plan.tasks_size());
  for (const plan::Task& task : plan.tasks()) {
    // A pass acts on every micro-batch: what acts once a step (a step barrier) has no stage.
    if (task.kind() != plan::COMPUTE || task.index() >= roles.size() ||
        std::max(task.pieces_per_step(), 1) != std::max(plan.num_micro_batches(), 1)) {
      continue;
    }
    roles[task.index()] =
        RoleOf(task.priority(), task.stream().device().index(), schedule, virtual_stages);
  }
  return roles;
}

int64_t PeakHeld(std::vector<std::pair<int64_t, int>> changes) {
  std::sort(changes.begin(), changes.end());
  int64_t held = 0;
  int64_t peak = 0;
  for (const auto& [time, change] : changes) {
    held += change;
    peak = std::max(peak, held);
  }
  return peak;
}

int64_t SpanNanoseconds(const std::vector<StageSchedule>& stages) {
  if (stages.empty()) return 0;
  int64_t begin = stages[0].first_start_nanoseconds;
  int64_t end = stages[0].last_end_nanoseconds;
  for (const StageSchedule& stage : stages) {
    begin = std::min(begin, stage.first_start_nanoseconds);
    end = std::max(end, stage.last_end_nanoseconds);
  }
  return end - begin;
}

double IdleFraction(const std::vector<StageSchedule>& stages) {
  const int64_t span = SpanNanoseconds(stages);
  if (span <= 0) return 0;
  double idle = 0;
  for (const StageSchedule& stage : stages) {
    idle += 1.0 - static_cast<double>(stage.busy_nanoseconds) / static_cast<double>(span);
  }
  return idle / static_cast<double>(stages.size());
}

std::string OneForwardOneBackwardOrder(int64_t in_flight, int64_t m) {
  std::string order;
  const int64_t warm_up = std::min(in_flight, m);
  order.append(static_cast<size_t>(warm_up), 'F');
  for (int64_t forward = warm_up; forward < m; ++forward) order += "BF";
  order.append(static_cast<size_t>(warm_up), 'B');
  return order;
}

}  // namespace loom
