#include "runtime/input_order_validation.h"

#include "absl/strings/str_cat.h"

namespace loom {
namespace {

absl::Status Invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

}  // namespace

absl::Status CheckLookahead(const plan::Task& task, const plan::Plan& plan,
                            const absl::flat_hash_map<std::string, int>& register_position) {
  if (task.input_lookahead().empty()) return absl::OkStatus();
  const std::string who = absl::StrCat("task '", task.name(), "'");
  if (task.kind() != plan::COMPUTE) {
    return Invalid(absl::StrCat(who, ": only COMPUTE tasks may look ahead on their inputs (a ",
                                plan::TaskKind_Name(task.kind()), " task does)"));
  }
  if (task.input_lookahead_size() != task.inputs_size()) {
    return Invalid(absl::StrCat(who, ": ", task.input_lookahead_size(),
                                " input_lookahead counts for ", task.inputs_size(), " inputs"));
  }
  for (int i = 0; i < task.inputs_size(); ++i) {
    const int32_t lookahead = task.input_lookahead(i);
    const plan::RegisterDesc& reg = plan.registers(register_position.at(task.inputs(i)));
    if (lookahead < 0 || lookahead >= reg.num_slots()) {
      return Invalid(absl::StrCat(who, ": input_lookahead ", lookahead, " on input '",
                                  task.inputs(i), "' must be >= 0 and below its ", reg.num_slots(),
                                  " slots"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckOrderingInputs(const plan::Task& task) {
  if (task.ordering_inputs() == 0) return absl::OkStatus();
  const std::string who = absl::StrCat("task '", task.name(), "'");
  if (task.kind() != plan::COMPUTE && task.kind() != plan::COLLECTIVE) {
    return Invalid(absl::StrCat(who,
                                ": only COMPUTE and COLLECTIVE tasks may have ordering inputs (a ",
                                plan::TaskKind_Name(task.kind()), " task does)"));
  }
  if (task.ordering_inputs() < 0 || task.ordering_inputs() > task.inputs_size()) {
    return Invalid(absl::StrCat(who, ": ordering_inputs ", task.ordering_inputs(),
                                " must be >= 0 and at most its ", task.inputs_size(), " inputs"));
  }
  return absl::OkStatus();
}

}  // namespace loom
