#ifndef LOOM_COMPILER_KERNEL_ATTRIBUTES_H_
#define LOOM_COMPILER_KERNEL_ATTRIBUTES_H_

// Small builders of plan::KernelConf values that the lowering writes for its own tasks (sources,
// variables, boxing and gradient buckets; ops lower themselves): a kernel of an op type, and
// setters of one integer, float or integer-list attribute.

#include <cstdint>
#include <string>
#include <vector>

#include "proto/plan.pb.h"

namespace loom::compiler {

inline plan::KernelConf KernelOfType(const std::string& op_type) {
  plan::KernelConf kernel;
  kernel.set_op_type(op_type);
  return kernel;
}

inline void SetInt(plan::KernelConf* conf, const std::string& name, int64_t value) {
  (*conf->mutable_attributes())[name].set_int_value(value);
}
inline void SetFloat(plan::KernelConf* conf, const std::string& name, double value) {
  (*conf->mutable_attributes())[name].set_float_value(value);
}
inline void SetIntList(plan::KernelConf* conf, const std::string& name,
                       const std::vector<int64_t>& values) {
  auto* list = (*conf->mutable_attributes())[name].mutable_int_list();
  for (int64_t value : values) list->add_values(value);
}

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_KERNEL_ATTRIBUTES_H_
