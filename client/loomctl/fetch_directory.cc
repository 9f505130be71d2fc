#include "client/loomctl/fetch_directory.h"

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"

namespace loom::loomctl {

absl::Status CreateFetchDirectory(const std::string& directory) {
  std::error_code error_code;
  std::filesystem::create_directories(directory, error_code);
  if (error_code) {
    return absl::UnavailableError(absl::StrCat("cannot create the fetch directory '", directory,
                                               "': ", error_code.message()));
  }
  return absl::OkStatus();
}

}  // namespace loom::loomctl
