#ifndef LOOM_CLIENT_LOCAL_RUN_H_
#define LOOM_CLIENT_LOCAL_RUN_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/kernel_registry.h"
#include "proto/plan.pb.h"
#include "runtime/job_options.h"
#include "runtime/job_runtime.h"

namespace loom {

struct LocalRunResult {
  std::unique_ptr<JobRuntime> runtime;
  // Every fetched logical tensor, one per step (piece), assembled from the ranks' pieces.
  std::map<std::string, std::vector<HostTensor>> fetched;
};

// Runs a whole plan (every device in this process) and assembles its fetches.
absl::StatusOr<LocalRunResult> RunPlanLocally(const plan::Plan& plan,
                                              const KernelRegistry& kernels, JobOptions options);

}  // namespace loom

#endif  // LOOM_CLIENT_LOCAL_RUN_H_
