#ifndef LOOM_TESTS_COMPILER_RUN_UTIL_H_
#define LOOM_TESTS_COMPILER_RUN_UTIL_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/compiler.h"
#include "core/tensor.h"
#include "proto/job.pb.h"

namespace loom::compiler::testing {

// A compiled job run in this process: every fetched logical tensor per piece, and by device name
// what each device allocated beside what the compiler estimated it would (EstimateMemory).
struct MeasuredRun {
  std::map<std::string, std::vector<HostTensor>> fetched;
  std::map<std::string, int64_t> allocated_bytes;  // by device, after the run
  std::map<std::string, int64_t> peak_bytes;       // by device, at its most
  std::map<std::string, int64_t> estimated_bytes;
  // The node's host memory (offloaded activations): allocated after the run, at its most, and
  // the compiler's estimate (MemoryParts::offloaded over the devices).
  int64_t host_allocated_bytes = 0;
  int64_t host_peak_bytes = 0;
  int64_t host_estimated_bytes = 0;
};

// Runs `compiled` (its whole plan) in this process on the CPU kernels.
absl::StatusOr<MeasuredRun> RunMeasured(const CompileResult& compiled);

// Compiles `job` onto `cpus` CPU devices, runs it in this process, and returns every fetched
// logical tensor per step.
absl::StatusOr<std::map<std::string, std::vector<HostTensor>>> CompileAndRun(const job::Job& job,
                                                                             int cpus);

// Fails the test (with the first differing element) unless every fetched tensor of every step
// matches within relative `tolerance`.
void ExpectSameFetches(const std::map<std::string, std::vector<HostTensor>>& expected,
                       const std::map<std::string, std::vector<HostTensor>>& actual,
                       double tolerance, const std::string& what);

// Fails the test unless every fetched tensor of every piece has the same bytes.
void ExpectBitIdentical(const std::map<std::string, std::vector<HostTensor>>& expected,
                        const std::map<std::string, std::vector<HostTensor>>& actual,
                        const std::string& what);

}  // namespace loom::compiler::testing

#endif  // LOOM_TESTS_COMPILER_RUN_UTIL_H_
