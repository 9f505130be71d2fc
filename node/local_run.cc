#include "node/local_run.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "actors/actor_factory.h"
#include "actors/sink_actor.h"
#include "node/fetch_assembly.h"

namespace loom {

absl::StatusOr<std::map<std::string, std::vector<HostTensor>>> AssembleFetches(
    const plan::Plan& plan, const SinkPiecesSource& pieces_of) {
  std::map<std::string, std::vector<HostTensor>> fetched;
  for (const plan::Fetch& fetch : plan.fetches()) {
    std::vector<const std::vector<HostTensor>*> per_rank;
    size_t steps = 0;
    for (const std::string& sink : fetch.sinks()) {
      absl::StatusOr<const std::vector<HostTensor>*> pieces = pieces_of(sink);
      if (!pieces.ok()) return pieces.status();
      per_rank.push_back(*pieces);
      steps = per_rank.size() == 1 ? (*pieces)->size() : std::min(steps, (*pieces)->size());
    }
    std::vector<HostTensor>& assembled = fetched[fetch.tensor()];
    for (size_t step = 0; step < steps; ++step) {
      std::vector<const HostTensor*> pieces;
      for (const auto* rank_pieces : per_rank) pieces.push_back(&(*rank_pieces)[step]);
      absl::StatusOr<HostTensor> tensor = AssembleFetch(fetch, pieces);
      if (!tensor.ok()) return tensor.status();
      assembled.push_back(std::move(*tensor));
    }
  }
  return fetched;
}

absl::StatusOr<const std::vector<HostTensor>*> KeptPieces(const JobRuntime& runtime,
                                                          const std::string& sink) {
  static const std::vector<HostTensor> kNone;
  auto pieces = FetchedPieces(runtime, sink);
  if (!pieces.ok()) return pieces.status();
  return (*pieces)->empty() ? &kNone : &(**pieces)[0];
}

absl::StatusOr<LocalRunResult> RunPlanLocally(const plan::Plan& plan, const KernelRegistry& kernels,
                                              JobOptions options) {
  LocalRunResult result;
  if (options.files == nullptr) {
    result.files = std::make_unique<FileRoots>(FileRoots::Unrestricted());
    options.files = result.files.get();
  }
  absl::StatusOr<std::unique_ptr<JobRuntime>> runtime =
      JobRuntime::Create(plan, &kernels, MakeActorFactory(), std::move(options));
  if (!runtime.ok()) return runtime.status();
  result.runtime = std::move(*runtime);
  if (absl::Status status = result.runtime->Run(); !status.ok()) return status;
  const JobRuntime& finished = *result.runtime;
  absl::StatusOr<std::map<std::string, std::vector<HostTensor>>> fetched =
      AssembleFetches(plan, [&](const std::string& sink) { return KeptPieces(finished, sink); });
  if (!fetched.ok()) return fetched.status();
  result.fetched = *std::move(fetched);
  return result;
}

}  // namespace loom
