#ifndef LOOM_COMPILER_NODE_SPLIT_H_
#define LOOM_COMPILER_NODE_SPLIT_H_

#include <vector>

#include "proto/plan.pb.h"

namespace loom::compiler {

// Pass 9: one plan per node (index = node). A node's plan has its devices, its tasks (keeping
// their job-wide indices), the registers they produce or read, the communicators with a member on
// the node, and the fetches whose sinks run there. A register read on another node than its
// producer's is declared in both plans: moving it between nodes is the cluster's send/recv.
std::vector<plan::Plan> SplitByNode(const plan::Plan& plan);

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_NODE_SPLIT_H_
