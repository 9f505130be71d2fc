#include "compiler/sbp_inference.h"

#include <algorithm>
#include <limits>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/boxing.h"

namespace loom::compiler {
namespace {

// A tensor axis split by several hierarchy axes needs at least that many elements.
bool SplitsFit(const TensorType& type, const Placement& placement, const NdSbp& sbp) {
  std::vector<int64_t> parts(type.shape.rank(), 1);
  for (int h = 0; h < placement.num_axes(); ++h) {
    if (!sbp[h].is_split()) continue;
    parts[sbp[h].axis] *= placement.hierarchy()[h];
    if (type.shape.dimension(sbp[h].axis) < parts[sbp[h].axis]) return false;
  }
  return true;
}

// When several hierarchy axes split the same axis of some tensor, the split is nested: the op
// must support it at the combined degree (reshape, for one, needs exact divisibility). Sound and
// conservative: the axes must use the same 1-D signature, and that signature must be among those
// the definition gives for the product of their extents.
class NestedSplitCheck {
 public:
  NestedSplitCheck(const LogicalNode& node) : node_(node) {}

  bool Allows(const std::vector<std::vector<SbpSignature>>& per_axis,
              const std::vector<size_t>& choice) {
    const int axes = static_cast<int>(choice.size());
    for (int first = 0; first < axes; ++first) {
      int64_t degree = node_.placement.hierarchy()[first];
      bool nested = false;
      for (int second = first + 1; second < axes; ++second) {
        if (!SplitsSameAxis(per_axis[first][choice[first]], per_axis[second][choice[second]])) {
          continue;
        }
        if (choice[first] != choice[second]) return false;
        nested = true;
        degree *= node_.placement.hierarchy()[second];
      }
      if (nested && !Supports(per_axis[first][choice[first]], degree)) return false;
    }
    return true;
  }

 private:
  static bool SplitsSameAxis(const SbpSignature& a, const SbpSignature& b) {
    auto same = [](const std::vector<Sbp>& x, const std::vector<Sbp>& y) {
      for (size_t i = 0; i < x.size(); ++i) {
        if (x[i].is_split() && y[i].is_split() && x[i].axis == y[i].axis) return true;
      }
      return false;
    };
    return same(a.inputs, b.inputs) || same(a.outputs, b.outputs);
  }

  bool Supports(const SbpSignature& signature, int64_t degree) {
    auto [iterator, inserted] = by_degree_.try_emplace(degree);
    if (inserted) iterator->second = node_.definition->SbpSignatures(node_.context, degree);
    for (const SbpSignature& candidate : iterator->second) {
      if (candidate.inputs == signature.inputs && candidate.outputs == signature.outputs) {
        return true;
      }
    }
    return false;
  }

  const LogicalNode& node_;
  absl::flat_hash_map<int64_t, std::vector<SbpSignature>> by_degree_;
};

}  // namespace

// Less than any byte a conversion moves: it only breaks ties between signatures.
constexpr double kConversionTieBreak = 1e-3;

absl::Status InferSbp(LogicalGraph* graph) {
  for (LogicalNode& node : graph->nodes) {
    if (node.kind != LogicalNode::Kind::kOp) continue;
    if (node.recomputes >= 0) {
      // A recomputed copy runs with its original's signature (BuildLogicalGraph checked that
      // they match and that the original comes first).
      const LogicalNode& original = graph->nodes[node.recomputes];
      node.input_sbp = original.input_sbp;
      for (size_t o = 0; o < node.outputs.size(); ++o) {
        graph->tensors[node.outputs[o]].sbp = graph->tensors[original.outputs[o]].sbp;
      }
      continue;
    }
    const Placement& placement = node.placement;
    const int axes = placement.num_axes();
    std::vector<std::vector<SbpSignature>> per_axis(axes);
    for (int h = 0; h < axes; ++h) {
      per_axis[h] = node.definition->SbpSignatures(node.context, placement.hierarchy()[h]);
    }
    const size_t num_inputs = node.inputs.size();
    const size_t num_outputs = node.outputs.size();
    // Ordering inputs keep their SBP (broadcast from another placement, which is then boxed).
    const size_t signed_inputs = std::min(
        num_inputs,
        static_cast<size_t>(std::max(0, node.definition->OrderingInputsFrom(node.context))));
    std::vector<NdSbp> ordering_sbp;
    for (size_t i = signed_inputs; i < num_inputs; ++i) {
      const LogicalTensor& tensor = graph->tensors[node.inputs[i]];
      const bool same_placement = graph->nodes[tensor.producer].placement == placement;
      ordering_sbp.push_back(same_placement ? tensor.sbp : NdSbp(axes, Sbp::Broadcast()));
    }

    double best_cost = std::numeric_limits<double>::infinity();
    std::vector<NdSbp> best_inputs;
    std::vector<NdSbp> best_outputs;
    std::vector<size_t> choice(axes, 0);
    bool any_signature = false;
    NestedSplitCheck nested_check(node);
    while (true) {
      bool valid = true;
      std::vector<NdSbp> inputs(num_inputs, NdSbp(axes));
      std::vector<NdSbp> outputs(num_outputs, NdSbp(axes));
      for (int h = 0; h < axes && valid; ++h) {
        if (per_axis[h].empty()) {
          valid = false;
          break;
        }
        const SbpSignature& signature = per_axis[h][choice[h]];
        for (size_t i = 0; i < signed_inputs; ++i) inputs[i][h] = signature.inputs[i];
        for (size_t i = signed_inputs; i < num_inputs; ++i) {
          inputs[i][h] = ordering_sbp[i - signed_inputs][h];
        }
        for (size_t o = 0; o < num_outputs; ++o) outputs[o][h] = signature.outputs[o];
      }
      for (size_t o = 0; o < num_outputs && valid; ++o) {
        if (node.output_hints[o].has_value() && *node.output_hints[o] != outputs[o]) valid = false;
        if (valid && !SplitsFit(node.context.outputs[o], placement, outputs[o])) valid = false;
      }
      for (size_t i = 0; i < num_inputs && valid; ++i) {
        if (!SplitsFit(node.context.inputs[i], placement, inputs[i])) valid = false;
      }
      if (valid && axes > 1 && !nested_check.Allows(per_axis, choice)) valid = false;
      if (valid) {
        any_signature = true;
        double cost = 0;
        for (size_t i = 0; i < num_inputs && cost < best_cost; ++i) {
          const LogicalTensor& tensor = graph->tensors[node.inputs[i]];
          const Placement& from = graph->nodes[tensor.producer].placement;
          cost += BoxingCost(tensor.type, from, tensor.sbp, placement, inputs[i]);
          // Among signatures that move the same bytes, the one that keeps more inputs' SBPs: a
          // free slice of a broadcast input (a weight's cast on a data-parallel rank) would make
          // its readers gather what they could have read whole. (The SBP alone, not the
          // placement: where a pipeline's stages are cut must not change the choice.)
          if (tensor.sbp != inputs[i]) cost += kConversionTieBreak;
        }
        if (cost < best_cost) {
          best_cost = cost;
          best_inputs = std::move(inputs);
          best_outputs = std::move(outputs);
        }
      }
      // Next combination (the last axis varies fastest, so axis 0's preferences lead).
      int h = axes - 1;
      while (h >= 0 && ++choice[h] == per_axis[h].size()) {
        choice[h] = 0;
        --h;
      }
      if (h < 0) break;
    }
    if (!any_signature) {
      std::vector<std::string> hints;
      for (size_t o = 0; o < num_outputs; ++o) {
        if (node.output_hints[o].has_value()) {
          hints.push_back(absl::StrCat("'", graph->tensors[node.outputs[o]].name, "' ",
                                       NdSbpToString(*node.output_hints[o])));
        }
      }
      std::vector<std::string> possible;
      for (const SbpSignature& signature :
           per_axis.empty() ? std::vector<SbpSignature>{} : per_axis[0]) {
        possible.push_back(signature.ToString());
      }
      return absl::InvalidArgumentError(absl::StrCat(
          "op '", node.name, "' (", node.op_type, "): no SBP signature on ", placement.ToString(),
          hints.empty() ? std::string(" fits its tensors")
                        : absl::StrCat(" gives ", absl::StrJoin(hints, ", ")),
          " (a split must fit the axis, and some ops need it to divide evenly); signatures on "
          "one axis: ",
          absl::StrJoin(possible, "; ")));
    }
    node.input_sbp = std::move(best_inputs);
    for (size_t o = 0; o < num_outputs; ++o) graph->tensors[node.outputs[o]].sbp = best_outputs[o];
  }
  return absl::OkStatus();
}

}  // namespace loom::compiler
