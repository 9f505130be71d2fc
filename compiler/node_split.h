#ifndef LOOM_COMPILER_NODE_SPLIT_H_
#define LOOM_COMPILER_NODE_SPLIT_H_

// Pass 8 (SplitByNode): the whole job's plan cut into one plan per node, with a SEND and RECEIVE
// task pair (through the hosts' memory for a GPU's register) wherever a register is read on
// another node than its producer's. Compile (compiler/compiler.h) runs it after lowering; the
// memory check then reads the node plans.

#include <vector>

#include "proto/plan.pb.h"

namespace loom::compiler {

// Pass 8: one plan per node (index = node). A node's plan has its devices, its tasks (keeping their
// job-wide indices), the registers they produce or read, the communicators with a member on the
// node, and the fetches whose sinks run there. The variable layouts stay in the whole-job plan
// only: the coordinator assembles checkpoints from it, the runtime reads none (at 1,024 devices
// every layout names 256 tasks, and copying them to each node of their stage was a quarter of a
// compile). A register read on another node than its producer's (a pipeline stage boundary across
// nodes) moves with a pair of tasks added here: a SEND ("send:<register>@node<B>") on the
// producer's node, reading the register, and a RECEIVE ("receive:<register>@node<B>") on each
// reading node B, producing B's copy "<register>@node<B>" with the register's slots; B's tasks read
// the copy. The network moves host memory only, so a register of a GPU goes through its host (the
// CPU device of the same node and index, added to the node's plan with the GPU's memory budget when
// the plan lacks it): a COPY ("to-host:<register>", on the host's copy-out stream) into
// "<register>@host", which the SENDs read; and on B, when its first reader is on a GPU, the RECEIVE
// runs on that GPU's host into "<register>@node<B>@host" and a COPY
// ("to-device:<register>@node<B>", on the GPU's copy-in stream) makes the copy. The added tasks get
// job-wide task indices after the plan's. The whole-job plan keeps none of them. The nodes' plans
// are built on up to `threads` threads (1: on the caller's alone), the same whatever the number.
std::vector<plan::Plan> SplitByNode(const plan::Plan& plan, int threads = 1);

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_NODE_SPLIT_H_
