#ifndef LOOM_COMPILER_STEP_PROOF_H_
#define LOOM_COMPILER_STEP_PROOF_H_

// The compile-time proof that a plan finishes: ProveStepCompletes plays the act rule's token game
// (register slots as credits, the kinds' own rules, collectives firing together in their
// communicator's order) for one training step, without kernels, and refuses a plan in which some
// actor can never finish its step, naming a cycle of waits. Why one step suffices, and why the
// order in which the game fires actors does not matter: docs/ARCHITECTURE.md, "Plans are proven
// to finish"; the game itself is compiler/token_game.h.

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "proto/plan.pb.h"

namespace loom::compiler {

// OK when every task of `plans` completes one step (Task.pieces_per_step pieces, or where a
// hand-written plan leaves it unset the rate its factors give, over as many of its steps as make
// every count whole; a VARIABLE publishes and, with a gradient, updates once a step) under the act
// rule, whatever order the runtime's threads choose. Otherwise FAILED_PRECONDITION naming the tasks
// that cannot finish and one cycle of waits among them (task -> register -> task), or the chain of
// waits that ends at a task that finished without producing what its reader waits for. `plans` is a
// whole-job plan (before SplitByNode) or every node plan of one job; INVALID_ARGUMENT when a
// register or a SEND's peer is missing, rates disagree (a task reading registers of different
// pieces per step; an ACCUMULATE whose factor does not divide a declared step), a communicator's
// ranks are not all there, or one stream runs the collectives of two communicators (a rank would
// block in one while the others wait in the other: the game cannot tell, so the plan is refused).
// Up to `threads` threads look up the registers the tasks name.
absl::Status ProveStepCompletes(absl::Span<const plan::Plan> plans, int threads = 1);

// Proves a whole-job plan finishes; when it does not and a communicator's order of collectives
// is the cause, orders each communicator's collectives as the game first meets them (the order in
// which their ranks become ready in one execution of the first piece; later pieces keep it),
// proves the reordered plan and keeps it. Returns the first proof's error when the reordered plan
// does not finish either. Plans that finish as lowered are left as they are.
absl::Status OrderCollectivesToFinish(plan::Plan& plan, int threads = 1);

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_STEP_PROOF_H_
