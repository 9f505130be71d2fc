#ifndef LOOM_COMPILER_REGISTER_LIFETIMES_H_
#define LOOM_COMPILER_REGISTER_LIFETIMES_H_

// Which registers of a job can never be live at the same time. RegisterLifetimes builds the act
// graph of a job's node plans (every edge by which one act waits for another: data, credits, a
// variable's loop-carried gradient, a SEND's RECEIVE), bounds from it when acts must follow
// others in every execution, and answers for two registers of one stream whether every
// execution keeps their lives apart. The argument is in docs/ARCHITECTURE.md, "Registers share
// memory"; compiler/memory_sharing.h places registers by it.

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "proto/plan.pb.h"

namespace loom::compiler {

// A register of one node plan: its plan's and its own position.
struct RegisterRef {
  int plan = 0;
  int reg = 0;
};

// The registers of one stream that may share memory: each has one slot, lives on a CPU device
// (not in host memory, RegisterDesc.host_memory), is written by a task that fills it in its act
// (COMPUTE, UNPACK, REPEAT, ACCUMULATE, COLLECTIVE) and read only by tasks that return it by the
// end of their act (those, SINK, and a VARIABLE its gradient), every one of them but collectives
// on that stream (collectives run on the device's communication streams).
struct SharingGroup {
  int plan = 0;
  plan::Stream stream;
  std::vector<RegisterRef> registers;
  std::vector<int64_t> slot_bytes;  // by position in `registers`
};

class RegisterLifetimes {
 public:
  // Analyzes the node plans of one job (SplitByNode's; a one-node job's plan alone will do),
  // searching from up to `threads` threads. The plans must outlive the result.
  static RegisterLifetimes Analyze(absl::Span<const plan::Plan> node_plans, int threads = 1);

  const std::vector<SharingGroup>& groups() const { return groups_; }

  // Whether registers `a` and `b` (positions in group `group`) are never live at once in any
  // execution of the plans: one is always returned by all its readers before the other's
  // producer starts the act that writes it, piece after piece. Not for a == b.
  bool Disjoint(int group, int a, int b) const;

 private:
  // What one register of a group needs for Disjoint, in ticks (the least common multiple of the
  // tasks' pieces per step divides a step into ticks; a task with r pieces per step acts every
  // U / r ticks).
  struct Lifetime {
    int64_t piece_ticks = 0;  // ticks between two pieces of the register
    int64_t write_ticks = 0;  // from the piece's start to the act that writes it
    int writer = 0;           // its producer's position among the group's writers
  };
  struct GroupLifetimes {
    std::vector<Lifetime> registers;
    // release[r * writers + w]: the least L (in ticks) such that every act of the group's
    // writer w that starts L or more ticks after piece n of register r starts, starts after
    // every reader of that piece returned it; kNever when the act graph bounds none.
    std::vector<int16_t> release;
    int writers = 0;
  };

  std::vector<SharingGroup> groups_;
  std::vector<GroupLifetimes> lifetimes_;
};

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_REGISTER_LIFETIMES_H_
