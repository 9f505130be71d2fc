#ifndef LOOM_COMPILER_ACTIVATION_OFFLOAD_H_
#define LOOM_COMPILER_ACTIVATION_OFFLOAD_H_

// Activation offload (Job.offload_activations, Op.offload): OffloadActivations rewrites a training
// job with its backward so that the backward reads chosen stashed activations from host memory,
// through an "offload" op after the forward and a "reload" op before the backward.
// docs/ARCHITECTURE.md, "Activation offload", has the argument.

#include <string>

#include "absl/functional/function_ref.h"
#include "proto/job.pb.h"

namespace loom::compiler {

// The op types the rewrite adds. Both copy their input; an offload op's output lies in its
// node's host memory (RegisterDesc.host_memory), a reload op's on its device again.
inline constexpr char kOffloadOpType[] = "offload";
inline constexpr char kReloadOpType[] = "reload";

// Whether the job's own settings offload the stashes of `producer`'s outputs: Op.offload, else
// Job.offload_activations ALL (OVER_BUDGET offloads nothing here: Compile chooses for it).
bool OffloadedBySettings(const job::Job& job, const job::Op& producer);

// Returns `job` (a training job with its backward ops, compiler/autodiff.h) where every tensor
// that a forward op makes from the data (not from variables alone: a weight's bfloat16 copy is no
// activation) and backward ops read, for which `chosen(producer, reader)` holds, is
// read by those backward ops from a copy in host memory: an op "offload/<tensor>" right after its
// producer copies it out, and an op "reload/<tensor>" right before the first of the readers
// copies it back; the readers then read the reload's output. Each copy runs on the placement and
// stage of its readers (one pair per placement and stage the readers are on), marked forward and
// backward as the producer and the readers are, so that the slots of the pipeline stash
// (compiler/slot_assignment.h) fall on the host copy and the device keeps the two copies in
// flight. The forward readers keep reading the tensor itself.
job::Job OffloadActivations(
    const job::Job& job,
    absl::FunctionRef<bool(const job::Op& producer, const job::Op& reader)> chosen);

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_ACTIVATION_OFFLOAD_H_
