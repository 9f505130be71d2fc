#ifndef LOOM_NODE_LOCAL_RUN_H_
#define LOOM_NODE_LOCAL_RUN_H_

// Running a whole plan in one process: RunPlanLocally runs every device's tasks here and returns
// the runtime with every fetch assembled per step (AssembleFetches), as `loomctl run` and the
// tests and benchmarks do. AssembleFetches also assembles fetches whose sinks ran in several
// runtimes (SinkPiecesSource).

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/file_roots.h"
#include "kernels/kernel_registry.h"
#include "proto/plan.pb.h"
#include "runtime/job_options.h"
#include "runtime/job_runtime.h"

namespace loom {

struct LocalRunResult {
  // Where the run's kernels opened files when JobOptions::files was null (FileRoots::Unrestricted);
  // declared first, so that it outlives the runtime.
  std::unique_ptr<FileRoots> files;
  std::unique_ptr<JobRuntime> runtime;
  // Every fetched logical tensor, one per step (piece), assembled from the ranks' pieces.
  std::map<std::string, std::vector<HostTensor>> fetched;
};

// The pieces a sink task kept of its first input (empty when it kept none); NOT_FOUND for an
// unknown sink.
using SinkPiecesSource =
    std::function<absl::StatusOr<const std::vector<HostTensor>*>(const std::string& sink)>;

// Every fetch of `plan`, one logical tensor per step (as many steps as every rank kept),
// assembled from the ranks' pieces (AssembleFetch). The sinks may run in different runtimes.
absl::StatusOr<std::map<std::string, std::vector<HostTensor>>> AssembleFetches(
    const plan::Plan& plan, const SinkPiecesSource& pieces_of);

// KeptPieces(runtime, sink): what `sink` kept in `runtime` (a SinkPiecesSource for one runtime).
absl::StatusOr<const std::vector<HostTensor>*> KeptPieces(const JobRuntime& runtime,
                                                          const std::string& sink);

// Runs a whole plan (every device in this process) and assembles its fetches. A local run opens
// the files its plan names anywhere (token files, initial states: the user's own) unless
// options.files says otherwise: null means FileRoots::Unrestricted().
absl::StatusOr<LocalRunResult> RunPlanLocally(const plan::Plan& plan, const KernelRegistry& kernels,
                                              JobOptions options);

}  // namespace loom

#endif  // LOOM_NODE_LOCAL_RUN_H_
