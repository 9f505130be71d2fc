#include "actors/actor_factory.h"

#include "absl/strings/str_cat.h"
#include "actors/collective_actor.h"
#include "actors/compute_actor.h"
#include "actors/copy_actor.h"
#include "actors/micro_batch_actors.h"
#include "actors/network_actors.h"
#include "actors/sink_actor.h"
#include "actors/variable_actor.h"

namespace loom {

ActorFactory MakeActorFactory() {
  return [](const ActorInit& init) -> absl::StatusOr<std::unique_ptr<Actor>> {
    switch (init.task->kind()) {
      case plan::COMPUTE:
        return std::make_unique<ComputeActor>(init);
      case plan::SOURCE:
        return std::make_unique<SourceActor>(init);
      case plan::SINK:
        return std::make_unique<SinkActor>(init);
      case plan::COPY:
        return std::make_unique<CopyActor>(init);
      case plan::UNPACK:
        return std::make_unique<UnpackActor>(init);
      case plan::REPEAT:
        return std::make_unique<RepeatActor>(init);
      case plan::ACCUMULATE:
        return std::make_unique<AccumulateActor>(init);
      case plan::COLLECTIVE:
        return std::make_unique<CollectiveActor>(init);
      case plan::VARIABLE:
        return std::make_unique<VariableActor>(init);
      case plan::SEND:
        return std::make_unique<SendActor>(init);
      case plan::RECEIVE:
        return std::make_unique<ReceiveActor>(init);
      default:
        return absl::InvalidArgumentError(
            absl::StrCat("task '", init.task->name(), "' has an unknown kind ",
                         static_cast<int>(init.task->kind())));
    }
  };
}

}  // namespace loom
