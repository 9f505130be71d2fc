#ifndef LOOM_COMPILER_OPS_GRADIENTS_H_
#define LOOM_COMPILER_OPS_GRADIENTS_H_

// The gradient functions of the forward ops, in one table rather than in every op's file:
// WithGradient gives an op definition the Gradient that its op type's entry emits.
// RegisterStandardOps (compiler/ops/standard_ops.cc) wraps every definition with it, and autodiff
// (compiler/autodiff.h) calls the Gradient.

#include <memory>
#include <string>

#include "compiler/op_definition.h"

namespace loom::compiler {

// Gradient functions of the forward ops, kept in one table (compiler/ops/gradients.cc) rather
// than in every op's file: `definition` with OpDefinition::Gradient answered by the table's entry
// for `op_type`. Returns `definition` unchanged when the table has none.
std::unique_ptr<OpDefinition> WithGradient(const std::string& op_type,
                                           std::unique_ptr<OpDefinition> definition);

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_OPS_GRADIENTS_H_
