#ifndef LOOM_COMPILER_OPS_ELEMENTWISE_OPS_H_
#define LOOM_COMPILER_OPS_ELEMENTWISE_OPS_H_

// The element-wise ops on float32 tensors: add, subtract, multiply and divide with NumPy
// broadcasting (MakeBinaryOp), and relu, gelu, tanh, scale and identity (MakeUnaryOp). Among the
// op definitions that RegisterStandardOps (compiler/ops/standard_ops.cc) puts in the op table.

#include <memory>

#include "compiler/op_definition.h"

namespace loom::compiler {

// add, subtract, multiply, divide: two float32 inputs with NumPy broadcasting.
std::unique_ptr<OpDefinition> MakeBinaryOp(const std::string& op_type);
// relu, gelu, tanh (nonlinear: no partial signature; float32 only); identity (linear: P -> P;
// any type).
std::unique_ptr<OpDefinition> MakeUnaryOp(bool linear);
// scale: float32 x * attribute "scale" (a finite float, required), linear like identity.
std::unique_ptr<OpDefinition> MakeScaleOp();

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_OPS_ELEMENTWISE_OPS_H_
