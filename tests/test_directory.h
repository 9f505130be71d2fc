#ifndef LOOM_TESTS_TEST_DIRECTORY_H_
#define LOOM_TESTS_TEST_DIRECTORY_H_

#include <unistd.h>

#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "gtest/gtest.h"

namespace loom::testing {

// A path of the running test's own under the test temporary directory, "PREFIX-PID-TEST", with
// nothing there (an earlier run's leftovers removed; the pid keeps concurrent runs apart). The
// directory itself is not created: some tests check that the code under test creates it.
inline std::string FreshTestDirectory(absl::string_view prefix) {
  std::string directory =
      absl::StrCat(::testing::TempDir(), "/", prefix, "-", getpid(), "-",
                   ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::filesystem::remove_all(directory);
  return directory;
}

}  // namespace loom::testing

#endif  // LOOM_TESTS_TEST_DIRECTORY_H_
