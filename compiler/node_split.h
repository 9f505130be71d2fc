#ifndef LOOM_COMPILER_NODE_SPLIT_H_
#define LOOM_COMPILER_NODE_SPLIT_H_

#include <vector>

#include "proto/plan.pb.h"

namespace loom::compiler {

// Pass 9: one plan per node (index = node). A node's plan has its devices, its tasks (keeping
// their job-wide indices), the registers they produce or read, the communicators with a member on
// the node, and the fetches and variables whose tasks run there. A register read on another node
// than its producer's (a pipeline stage boundary across nodes) moves with a pair of tasks added
// here: a SEND ("send:<register>@node<B>") on the producer's node, reading the register, and a
// RECEIVE ("receive:<register>@node<B>") on each reading node B, producing B's copy
// "<register>@node<B>" with the register's slots; B's tasks read the copy. The pairs get job-wide
// task indices after the plan's. The whole-job plan keeps no such pairs.
std::vector<plan::Plan> SplitByNode(const plan::Plan& plan);

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_NODE_SPLIT_H_
