#include "compiler/token_inputs.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "compiler/kernel_attributes.h"

namespace loom::compiler {
namespace {

bool KnownFormat(const std::string& format) {
  return format.empty() || format == "bytes" || format == "uint16" || format == "uint32";
}

std::string FormatOrBytes(const std::string& format) { return format.empty() ? "bytes" : format; }

absl::Status CheckDataset(const job::TokenDataset& dataset, const std::string& who) {
  if (dataset.sources().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": token_dataset has no source"));
  }
  for (int index = 0; index < dataset.sources_size(); ++index) {
    const job::TokenSource& source = dataset.sources(index);
    const std::string where = absl::StrCat(who, ": token_dataset source ", index);
    if (source.paths().empty())
      return absl::InvalidArgumentError(absl::StrCat(where, " has no path"));
    for (const std::string& path : source.paths()) {
      if (path.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(where, " has an empty path"));
      }
    }
    if (!KnownFormat(source.format())) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": format '", source.format(), "' is not \"bytes\", \"uint16\" or \"uint32\""));
    }
    if (!std::isfinite(source.weight()) || source.weight() < 0) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": weight ", source.weight(),
                                                     " is not a finite number > 0 (0 means 1)"));
    }
  }
  if (dataset.has_end_of_text() && dataset.end_of_text() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": token_dataset end_of_text ", dataset.end_of_text(), " is negative"));
  }
  return absl::OkStatus();
}

}  // namespace

bool IsTokenInput(const job::Input& input) {
  return input.source_case() == job::Input::kTokenFile ||
         input.source_case() == job::Input::kTokenDataset;
}

absl::Status CheckTokenInput(const job::Input& input, const std::string& who) {
  if (input.data_type() != plan::INT32 && input.data_type() != plan::INT64) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": token ids need data_type INT32 or INT64"));
  }
  if (input.shape_size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": a token input is [batch, sequence], not rank ", input.shape_size()));
  }
  if (input.source_case() == job::Input::kTokenDataset) {
    return CheckDataset(input.token_dataset(), who);
  }
  const job::TokenFile& file = input.token_file();
  if (file.path().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": token_file has no path"));
  }
  if (!KnownFormat(file.format())) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": token_file format '", file.format(),
                                                   "' is not \"bytes\", \"uint16\" or \"uint32\""));
  }
  return absl::OkStatus();
}

plan::KernelConf TokenInputKernel(const job::Input& input) {
  auto attributes = [](plan::KernelConf & conf) -> auto& { return *conf.mutable_attributes(); };
  if (input.source_case() == job::Input::kTokenFile) {
    plan::KernelConf conf = KernelOfType("token_batch");
    const job::TokenFile& file = input.token_file();
    attributes(conf)["path"].set_string_value(file.path());
    attributes(conf)["format"].set_string_value(FormatOrBytes(file.format()));
    attributes(conf)["targets"].set_bool_value(file.targets());
    return conf;
  }
  plan::KernelConf conf = KernelOfType("token_dataset");
  const job::TokenDataset& dataset = input.token_dataset();
  plan::AttributeValue& paths = attributes(conf)["paths"];
  plan::AttributeValue& counts = attributes(conf)["path_counts"];
  plan::AttributeValue& formats = attributes(conf)["formats"];
  plan::AttributeValue& weights = attributes(conf)["weights"];
  for (const job::TokenSource& source : dataset.sources()) {
    for (const std::string& path : source.paths()) {
      paths.mutable_string_list()->add_values(path);
    }
    counts.mutable_int_list()->add_values(source.paths_size());
    formats.mutable_string_list()->add_values(FormatOrBytes(source.format()));
    weights.mutable_float_list()->add_values(source.weight() == 0 ? 1.0 : source.weight());
  }
  if (dataset.has_end_of_text()) SetInt(&conf, "end_of_text", dataset.end_of_text());
  attributes(conf)["in_order"].set_bool_value(dataset.in_order());
  attributes(conf)["targets"].set_bool_value(dataset.targets());
  SetInt(&conf, "seed", input.seed());
  return conf;
}

}  // namespace loom::compiler
