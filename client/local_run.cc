#include "client/local_run.h"

#include "absl/strings/str_cat.h"
#include "actors/actor_factory.h"
#include "actors/sink_actor.h"
#include "client/fetch_assembly.h"

namespace loom {

absl::StatusOr<LocalRunResult> RunPlanLocally(const plan::Plan& plan,
                                              const KernelRegistry& kernels, JobOptions options) {
  LocalRunResult result;
  absl::StatusOr<std::unique_ptr<JobRuntime>> runtime =
      JobRuntime::Create(plan, &kernels, MakeActorFactory(), std::move(options));
  if (!runtime.ok()) return runtime.status();
  result.runtime = std::move(*runtime);
  if (absl::Status status = result.runtime->Run(); !status.ok()) return status;
  for (const plan::Fetch& fetch : plan.fetches()) {
    std::vector<const std::vector<HostTensor>*> per_rank;
    size_t steps = 0;
    for (const std::string& sink : fetch.sinks()) {
      auto pieces = FetchedPieces(*result.runtime, sink);
      if (!pieces.ok()) return pieces.status();
      const std::vector<HostTensor>* received =
          (*pieces)->empty() ? nullptr : &(**pieces)[0];
      static const std::vector<HostTensor> kNone;
      per_rank.push_back(received == nullptr ? &kNone : received);
      steps = per_rank.size() == 1 ? per_rank.back()->size()
                                   : std::min(steps, per_rank.back()->size());
    }
    std::vector<HostTensor>& assembled = result.fetched[fetch.tensor()];
    for (size_t step = 0; step < steps; ++step) {
      std::vector<const HostTensor*> pieces;
      for (const auto* rank_pieces : per_rank) pieces.push_back(&(*rank_pieces)[step]);
      absl::StatusOr<HostTensor> tensor = AssembleFetch(fetch, pieces);
      if (!tensor.ok()) return tensor.status();
      assembled.push_back(std::move(*tensor));
    }
  }
  return result;
}

}  // namespace loom
