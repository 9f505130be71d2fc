#include "compiler/step_proof.h"

#include <cstdint>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "compiler/token_game.h"

namespace loom::compiler {

using step_proof_internal::TokenGame;

absl::Status ProveStepCompletes(absl::Span<const plan::Plan> plans, int threads) {
  TokenGame game;
  if (absl::Status status = game.Build(plans, threads); !status.ok()) return status;
  game.Play();
  return game.Verdict();
}

absl::Status OrderCollectivesToFinish(plan::Plan& plan, int threads) {
  absl::Status proof = ProveStepCompletes(absl::MakeConstSpan(&plan, 1), threads);
  if (proof.ok() || !absl::IsFailedPrecondition(proof)) return proof;
  TokenGame game;
  if (absl::Status status = game.Build(absl::MakeConstSpan(&plan, 1), threads); !status.ok()) {
    return status;
  }
  game.ChooseOrder();
  game.Play();
  const absl::flat_hash_map<std::string, int64_t> sequences = game.ChosenSequences();
  if (sequences.empty()) return proof;
  plan::Plan reordered = plan;
  for (plan::Task& task : *reordered.mutable_tasks()) {
    if (task.kind() == plan::COLLECTIVE) {
      task.mutable_collective()->set_sequence(sequences.at(task.name()));
    }
  }
  if (!ProveStepCompletes(absl::MakeConstSpan(&reordered, 1), threads).ok()) return proof;
  plan = std::move(reordered);
  return absl::OkStatus();
}

}  // namespace loom::compiler
