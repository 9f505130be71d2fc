#ifndef LOOM_KERNELS_ATTRIBUTES_H_
#define LOOM_KERNELS_ATTRIBUTES_H_

// Attributes: typed access (int, float, bool, string, int, float and string lists, with or without
// a default) to the attributes of a kernel's configuration (plan::KernelConf). The kernel factories
// of every device read their attributes through it; errors name the attribute and what was
// expected.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/plan.pb.h"

namespace loom {

// Typed access to a kernel's attributes. Errors name the attribute and what was expected; the
// registry adds the task and op.
class Attributes {
 public:
  explicit Attributes(const plan::KernelConf& conf) : conf_(conf) {}

  bool Has(const std::string& name) const { return conf_.attributes().contains(name); }

  absl::StatusOr<int64_t> GetInt(const std::string& name) const;
  absl::StatusOr<int64_t> GetInt(const std::string& name, int64_t default_value) const;
  absl::StatusOr<double> GetFloat(const std::string& name) const;
  absl::StatusOr<double> GetFloat(const std::string& name, double default_value) const;
  absl::StatusOr<bool> GetBool(const std::string& name, bool default_value) const;
  absl::StatusOr<std::string> GetString(const std::string& name) const;
  absl::StatusOr<std::string> GetString(const std::string& name,
                                        const std::string& default_value) const;
  absl::StatusOr<std::vector<int64_t>> GetIntList(const std::string& name) const;
  absl::StatusOr<std::vector<double>> GetFloatList(const std::string& name) const;
  absl::StatusOr<std::vector<std::string>> GetStringList(const std::string& name) const;

 private:
  const plan::KernelConf& conf_;
};

}  // namespace loom

#endif  // LOOM_KERNELS_ATTRIBUTES_H_
