#ifndef LOOM_COMPILER_RECOMPUTATION_H_
#define LOOM_COMPILER_RECOMPUTATION_H_

// Activation recomputation (Job.recompute, Op.block, Op.recompute): Recomputation decides which
// forward ops of a training job the backward recomputes, and rewrites the backward ops autodiff
// (compiler/autodiff.h) emits for one forward op so that they read recomputed copies instead of
// the forward's outputs. docs/ARCHITECTURE.md, "Recomputation", has the argument.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "compiler/logical_graph.h"
#include "proto/job.pb.h"

namespace loom::compiler {

// The op types RECOMPUTE_SELECTIVE recomputes: a few operations per element (elementwise ops,
// normalisations, reshapes, casts), against the matmuls and attention whose outputs it keeps.
bool IsCheapToRecompute(const std::string& op_type);

class Recomputation {
 public:
  // Reads the settings of `job`, whose logical graph (without backward) is `graph`; both must
  // outlive this. INVALID_ARGUMENT for an Op.recompute outside a block, or a Job.recompute other
  // than NONE in a job whose ops are in no block.
  static absl::StatusOr<Recomputation> Create(const job::Job& job, const LogicalGraph& graph);

  // Whether any op is recomputed.
  bool enabled() const { return enabled_; }

  // The ops of `job` from `first_op` on are the backward of graph node `node`, which acts once
  // `trigger` (one of the node's output gradients) is there, and `input_gradients` are the
  // gradients it returned (one per input, "" for none). Their inputs that are outputs of
  // recomputed ops of the node's block become recomputed copies: clones of those ops (and of the
  // recomputed ops of the block they read), marked backward, with Op.recomputes naming their
  // original, inserted before them. The first input of each clone that reads no other copy
  // passes through an "identity_after" gate on `trigger` and on the block whose backward came
  // just before on the same stage and placement (all its gradients that leave it: a barrier), so
  // that the block is recomputed when the backward reaches it and after the previous block's
  // copies are all read. Copies are made once and reused by the later backward ops of the block.
  // `unique_name` returns a name not yet used in the job, made from the one it is given.
  void RewriteBackward(int node, const std::string& trigger,
                       const std::vector<std::string>& input_gradients, int first_op, job::Job* job,
                       absl::FunctionRef<std::string(const std::string&)> unique_name);

 private:
  struct Gradient {
    std::string name;
    int64_t elements = 0;
  };

  Recomputation(const LogicalGraph& graph, std::vector<bool> recomputed, bool enabled)
      : graph_(&graph), recomputed_(std::move(recomputed)), enabled_(enabled) {}

  // Whether the backward of a node of `block` reads a recomputed copy of tensor `tensor`.
  bool Recomputes(int tensor, const std::string& block) const;
  // The name of the recomputed copy of `tensor` (whose producer Recomputes), emitting its ops
  // into `emitted` first if there is none yet; the tensor's own name when its op reads nothing a
  // gate could wait on (only variables), which keeps it. `after`: what gates wait on.
  std::string Copy(int tensor, const std::vector<std::string>& after, std::vector<job::Op>* emitted,
                   absl::FunctionRef<std::string(const std::string&)> unique_name);
  // A tensor that is there once every gradient leaving the block walked before `block` (on its
  // stage and placement) is: one of them, or an identity_after of the smallest on the others,
  // emitted into `emitted`. "" when there is no such block.
  std::string Barrier(const std::string& block, const LogicalNode& forward,
                      std::vector<job::Op>* emitted,
                      absl::FunctionRef<std::string(const std::string&)> unique_name);

  const LogicalGraph* graph_;
  std::vector<bool> recomputed_;  // by node
  bool enabled_;
  absl::flat_hash_map<int, std::string> copies_;  // tensor id -> its copy's name
  // The gates made: the names they wait on (joined) -> the gate's name.
  absl::flat_hash_map<std::string, std::string> gates_;
  // The walk over blocks: the block of the last node rewritten, the first node of each block
  // seen, the block walked before each (same stage and placement), the gradients leaving each,
  // and each block's barrier once made.
  std::string current_block_;
  absl::flat_hash_map<std::string, int> first_node_;
  absl::flat_hash_map<std::string, std::string> previous_block_;
  absl::flat_hash_map<std::string, std::vector<Gradient>> leaving_;
  absl::flat_hash_map<std::string, std::string> barriers_;
};

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_RECOMPUTATION_H_
