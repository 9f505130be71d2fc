#ifndef LOOM_COMPILER_SBP_INFERENCE_H_
#define LOOM_COMPILER_SBP_INFERENCE_H_

// Pass 4, SBP inference (InferSbp): every op of the logical graph gets one SBP signature, the one
// whose inputs need the fewest bytes of boxing (BoxingCost, compiler/boxing.h). Compile
// (compiler/compiler.h) runs it on the logical graph before lowering.

#include "absl/status/status.h"
#include "compiler/logical_graph.h"

namespace loom::compiler {

// Pass 4. In topological order, every op picks, among the nd signatures its definition allows on
// its placement (the product of its 1-D signatures over the hierarchy axes) and that satisfy its
// output hints, the one whose inputs need the fewest bytes of boxing; among those, the one that
// converts the fewest inputs (a free slice counts); then the signature the definition lists first. Sets every op's input_sbp and every tensor's sbp. An op whose hints no
// signature satisfies is an INVALID_ARGUMENT error naming the op.
absl::Status InferSbp(LogicalGraph* graph);

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_SBP_INFERENCE_H_
