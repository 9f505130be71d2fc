#ifndef LOOM_COMPILER_PIECES_PER_STEP_H_
#define LOOM_COMPILER_PIECES_PER_STEP_H_

// Pieces per step: how many pieces of a task make one step (num_micro_batches for a task that acts
// on every micro-batch, else one). Compile (compiler/compiler.h) sets them on the whole plan after
// lowering (SetPiecesPerStep); the node split gives its SEND and RECEIVE tasks the pieces of the
// register they move (OutputPiecesPerStep).

#include <cstdint>

#include "proto/plan.pb.h"

namespace loom::compiler {

// Sets Task.pieces_per_step on the tasks of a whole plan (before SplitByNode) that act on every
// micro-batch: num_micro_batches of their pieces make a step. Tasks that act once per step keep
// it unset (1), as does every task of a plan without micro-batches.
void SetPiecesPerStep(plan::Plan& plan);

// How many pieces of the registers `task` writes make a step: one for an ACCUMULATE (it sums a
// step's micro-batches into one), else the task's own pieces per step.
int64_t OutputPiecesPerStep(const plan::Task& task);

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_PIECES_PER_STEP_H_
