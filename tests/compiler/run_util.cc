#include "tests/compiler/run_util.h"

#include <cmath>

#include "compiler/memory_plan.h"
#include "core/device_name.h"
#include "glog/logging.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_kernels.h"
#include "node/local_run.h"
#include "tests/compiler/compiler_test_util.h"

namespace loom::compiler::testing {

absl::StatusOr<MeasuredRun> RunMeasured(const CompileResult& compiled) {
  MeasuredRun measured;
  for (const DeviceMemoryEstimate& estimate : EstimateMemory(compiled.node_plans)) {
    measured.estimated_bytes[DeviceName(estimate.device)] = estimate.total_bytes();
    measured.host_estimated_bytes += estimate.parts.offloaded;
  }
  KernelRegistry kernels;
  if (absl::Status status = RegisterCpuKernels(&kernels); !status.ok()) return status;
  JobOptions options;
  options.stall_timeout = absl::Seconds(60);
  absl::StatusOr<LocalRunResult> run = RunPlanLocally(compiled.plan, kernels, options);
  if (!run.ok()) return run.status();
  for (const auto& memory : run->runtime->device_memories()) {
    measured.allocated_bytes[memory->device_name()] = memory->allocated_bytes();
    measured.peak_bytes[memory->device_name()] = memory->peak_bytes();
  }
  measured.host_allocated_bytes = run->runtime->host_memory().allocated_bytes();
  measured.host_peak_bytes = run->runtime->host_memory().peak_bytes();
  measured.fetched = std::move(run->fetched);
  return measured;
}

absl::StatusOr<std::map<std::string, std::vector<HostTensor>>> CompileAndRun(const job::Job& job,
                                                                             int cpus) {
  absl::StatusOr<CompileResult> compiled = CompileOn(job, cpus);
  if (!compiled.ok()) return compiled.status();
  absl::StatusOr<MeasuredRun> run = RunMeasured(*compiled);
  if (!run.ok()) return run.status();
  return std::move(run->fetched);
}

void ExpectBitIdentical(const std::map<std::string, std::vector<HostTensor>>& expected,
                        const std::map<std::string, std::vector<HostTensor>>& actual,
                        const std::string& what) {
  ASSERT_EQ(expected.size(), actual.size()) << what;
  for (const auto& [name, pieces] : expected) {
    auto found = actual.find(name);
    ASSERT_NE(found, actual.end()) << what << ": no fetch of '" << name << "'";
    ASSERT_EQ(pieces.size(), found->second.size()) << what << ": '" << name << "'";
    for (size_t piece = 0; piece < pieces.size(); ++piece) {
      EXPECT_EQ(pieces[piece].bytes, found->second[piece].bytes)
          << what << ": '" << name << "' differs at piece " << piece;
    }
  }
}

void ExpectSameFetches(const std::map<std::string, std::vector<HostTensor>>& expected,
                       const std::map<std::string, std::vector<HostTensor>>& actual,
                       double tolerance, const std::string& what) {
  ASSERT_EQ(expected.size(), actual.size()) << what;
  for (const auto& [name, steps] : expected) {
    auto found = actual.find(name);
    ASSERT_NE(found, actual.end()) << what << ": no fetch of '" << name << "'";
    ASSERT_EQ(steps.size(), found->second.size()) << what << ": steps of '" << name << "'";
    ASSERT_GT(steps.size(), 0u) << what;
    for (size_t step = 0; step < steps.size(); ++step) {
      const HostTensor& want = steps[step];
      const HostTensor& got = found->second[step];
      ASSERT_EQ(want.shape, got.shape) << what << ": '" << name << "' step " << step;
      absl::Span<const float> a = want.Values<float>();
      absl::Span<const float> b = got.Values<float>();
      for (size_t i = 0; i < a.size(); ++i) {
        double difference = std::fabs(static_cast<double>(a[i]) - b[i]);
        ASSERT_LE(difference, tolerance * std::max(1.0, std::fabs(static_cast<double>(a[i]))))
            << what << ": '" << name << "' step " << step << " element " << i << ": expected "
            << a[i] << ", got " << b[i];
      }
    }
  }
}

}  // namespace loom::compiler::testing
