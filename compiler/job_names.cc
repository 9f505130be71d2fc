#include "compiler/job_names.h"

#include "absl/strings/str_cat.h"

namespace loom::compiler {

JobNames::JobNames(const job::Job& job) {
  for (const job::Variable& variable : job.variables()) taken_.insert(variable.name());
  for (const job::Input& input : job.inputs()) taken_.insert(input.name());
  for (const job::Op& op : job.ops()) {
    taken_.insert(op.name());
    for (const std::string& output : op.outputs()) taken_.insert(output);
  }
}

std::string JobNames::Take(const std::string& base) {
  for (int n = 0;; ++n) {
    std::string name = n == 0 ? base : absl::StrCat(base, "_", n);
    if (taken_.insert(name).second) return name;
  }
}

}  // namespace loom::compiler
