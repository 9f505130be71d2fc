#ifndef LOOM_TESTS_COMPILER_RUN_UTIL_H_
#define LOOM_TESTS_COMPILER_RUN_UTIL_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "proto/job.pb.h"

namespace loom::compiler::testing {

// Compiles `job` onto `cpus` CPU devices, runs it in this process, and returns every fetched
// logical tensor per step.
absl::StatusOr<std::map<std::string, std::vector<HostTensor>>> CompileAndRun(const job::Job& job,
                                                                             int cpus);

// Fails the test (with the first differing element) unless every fetched tensor of every step
// matches within relative `tolerance`.
void ExpectSameFetches(const std::map<std::string, std::vector<HostTensor>>& expected,
                       const std::map<std::string, std::vector<HostTensor>>& actual,
                       double tolerance, const std::string& what);

}  // namespace loom::compiler::testing

#endif  // LOOM_TESTS_COMPILER_RUN_UTIL_H_
