#ifndef LOOM_COMPILER_MEMORY_SHARING_H_
#define LOOM_COMPILER_MEMORY_SHARING_H_

// Registers share memory, between the node split and the memory check: ShareRegisterMemory
// places the registers of each stream whose lifetimes RegisterLifetimes
// (compiler/register_lifetimes.h) proves disjoint at overlapping offsets of one memory pool
// (Plan.memory_pools, RegisterDesc.pool); CopyRegisterPlacement gives the whole-job plan the node
// plans' placement. Compile runs both unless the job asks for REGISTER_MEMORY_SEPARATE; the
// memory check then counts pools, not their registers.

#include <vector>

#include "absl/types/span.h"
#include "proto/plan.pb.h"

namespace loom::compiler {

// Places the registers that may share in pools, one per stream that gains from it (a pool
// smaller than its registers apart), greedily, largest register first, each at the lowest offset
// (a multiple of 64) where it overlaps no placed register it may be live with. Registers already
// in a pool are left as they are. Analyzes on up to `threads` threads.
void ShareRegisterMemory(std::vector<plan::Plan>& node_plans, int threads = 1);

// Gives `whole_plan`'s registers the pool and offset their namesakes have in the node plans, and
// it the node plans' pools.
void CopyRegisterPlacement(absl::Span<const plan::Plan> node_plans, plan::Plan& whole_plan);

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_MEMORY_SHARING_H_
