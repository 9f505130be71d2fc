#include "compiler/activation_offload.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "compiler/job_names.h"

namespace loom::compiler {

bool OffloadedBySettings(const job::Job& job, const job::Op& producer) {
  switch (producer.offload()) {
    case job::OP_OFFLOAD_ALWAYS:
      return true;
    case job::OP_OFFLOAD_NEVER:
      return false;
    default:
      return job.offload_activations() == job::OFFLOAD_ALL;
  }
}

namespace {

// One tensor's copy in host memory for the backward readers on one placement and stage.
struct Offload {
  std::string tensor;
  int producer = 0;  // op positions in the job
  int first_reader = 0;
  std::string offloaded;  // the names of the two copies (and of the ops making them)
  std::string reloaded;
  bool weight_gradient = true;  // every reader is a weight gradient (Op.weight_gradient)
};

}  // namespace

job::Job OffloadActivations(
    const job::Job& job,
    absl::FunctionRef<bool(const job::Op& producer, const job::Op& reader)> chosen) {
  // What forward ops make from the data: what they make from variables alone (a weight's
  // bfloat16 copy) is no activation, and stays, as recomputation keeps it.
  absl::flat_hash_set<std::string> variables;
  for (const job::Variable& variable : job.variables()) variables.insert(variable.name());
  absl::flat_hash_map<std::string, int> forward_producer;
  for (int i = 0; i < job.ops_size(); ++i) {
    const job::Op& op = job.ops(i);
    if (op.backward() || op.evaluation() ||
        std::all_of(op.inputs().begin(), op.inputs().end(),
                    [&](const std::string& input) { return variables.contains(input); })) {
      continue;
    }
    for (const std::string& output : op.outputs()) forward_producer[output] = i;
  }
  std::vector<Offload> offloads;
  absl::flat_hash_map<std::string, int> offload_of_key;
  // (reader, input position) -> its offload.
  absl::flat_hash_map<std::pair<int, int>, int> rewired;
  for (int i = 0; i < job.ops_size(); ++i) {
    const job::Op& reader = job.ops(i);
    if (!reader.backward()) continue;
    for (int j = 0; j < reader.inputs_size(); ++j) {
      auto producer = forward_producer.find(reader.inputs(j));
      if (producer == forward_producer.end() || !chosen(job.ops(producer->second), reader)) {
        continue;
      }
      const std::string key =
          absl::StrCat(reader.inputs(j), "|", reader.placement().ShortDebugString(), "|",
                       reader.has_stage() ? reader.stage() : -1);
      auto [found, inserted] = offload_of_key.try_emplace(key, static_cast<int>(offloads.size()));
      if (inserted) {
        Offload& offload = offloads.emplace_back();
        offload.tensor = reader.inputs(j);
        offload.producer = producer->second;
        offload.first_reader = i;
      }
      offloads[found->second].weight_gradient =
          offloads[found->second].weight_gradient && reader.weight_gradient();
      rewired[{i, j}] = found->second;
    }
  }
  if (offloads.empty()) return job;

  JobNames names(job);
  absl::flat_hash_map<int, std::vector<int>> after_producer;
  absl::flat_hash_map<int, std::vector<int>> before_reader;
  for (int k = 0; k < static_cast<int>(offloads.size()); ++k) {
    Offload& offload = offloads[k];
    offload.offloaded = names.Take(absl::StrCat("offload/", offload.tensor));
    offload.reloaded = names.Take(absl::StrCat("reload/", offload.tensor));
    after_producer[offload.producer].push_back(k);
    before_reader[offload.first_reader].push_back(k);
  }

  // A copy op on its readers' placement and stage.
  auto copy_op = [&](const Offload& offload, const char* type, const std::string& input,
                     const std::string& output) {
    const job::Op& reader = job.ops(offload.first_reader);
    job::Op op;
    op.set_name(output);
    op.set_type(type);
    op.add_inputs(input);
    op.add_outputs(output);
    if (reader.has_placement()) *op.mutable_placement() = reader.placement();
    if (reader.has_stage()) op.set_stage(reader.stage());
    return op;
  };
  job::Job result = job;
  result.clear_ops();
  for (int i = 0; i < job.ops_size(); ++i) {
    if (auto found = before_reader.find(i); found != before_reader.end()) {
      for (int k : found->second) {
        job::Op reload =
            copy_op(offloads[k], kReloadOpType, offloads[k].offloaded, offloads[k].reloaded);
        reload.set_backward(true);
        reload.set_weight_gradient(offloads[k].weight_gradient);
        *result.add_ops() = std::move(reload);
      }
    }
    job::Op* op = result.add_ops();
    *op = job.ops(i);
    for (int j = 0; j < op->inputs_size(); ++j) {
      if (auto found = rewired.find({i, j}); found != rewired.end()) {
        op->set_inputs(j, offloads[found->second].reloaded);
      }
    }
    if (auto found = after_producer.find(i); found != after_producer.end()) {
      for (int k : found->second) {
        *result.add_ops() =
            copy_op(offloads[k], kOffloadOpType, offloads[k].tensor, offloads[k].offloaded);
      }
    }
  }
  return result;
}

}  // namespace loom::compiler
