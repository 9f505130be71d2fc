// Issue 56, finding 1: a job reads files only beneath the daemon's --data-root directories. Any
// other path (outside, through a symbolic link, a FIFO, a device) fails the job with an error that
// names the path and holds none of the file's bytes; a file beneath a root is read.
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/daemon/daemon_test_util.h"

namespace loom::daemon::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A job that fetches one [1, 8] batch of tokens from `path`.
job::Job TokenJob(const std::string& path) {
  return ParseJob(absl::StrCat(R"pb(
    name: "tokens"
    placement { devices: [ "cpu:0" ] }
    inputs {
      name: "tokens"
      shape: [ 1, 8 ]
      data_type: INT32
      token_file { path: ")pb",
                               path, R"pb(" }
    }
    fetch: "tokens"
  )pb"));
}

class DataRootsTest : public DaemonTest {
 protected:
  // The error the job ended with (OK when it succeeded).
  v1::JobError Outcome(const std::string& path) {
    v1::SubmitJobResponse response;
    grpc::Status submitted = Submit(TokenJob(path), &response);
    if (!submitted.ok()) {
      v1::JobError refused;
      refused.set_code(submitted.error_code());
      refused.set_message(submitted.error_message());
      return refused;
    }
    std::vector<v1::JobEvent> events = WatchToEnd(response.job().job_id());
    if (events.empty()) return v1::JobError();
    return events.back().state_change().error();
  }
};

TEST_F(DataRootsTest, AFileBeneathARootIsRead) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/tokens.txt");
  std::ofstream(path) << "the tokens of a test, more than eight bytes";
  EXPECT_EQ(Outcome(path).code(), 0) << Outcome(path).message();
}

TEST_F(DataRootsTest, PathsOutsideTheRootsAreRefusedWithoutTheirBytes) {
  const std::string directory = ::testing::TempDir();
  const std::string link = absl::StrCat(directory, "/link_to_passwd");
  std::filesystem::remove(link);
  std::filesystem::create_symlink("/etc/passwd", link);
  const std::string fifo = absl::StrCat(directory, "/a_fifo");
  std::filesystem::remove(fifo);
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& path :
       {std::string("/etc/passwd"), absl::StrCat(directory, "/../../etc/passwd"), link,
        std::string("/dev/zero"), fifo}) {
    const v1::JobError error = Outcome(path);
    EXPECT_TRUE(error.code() == static_cast<int>(grpc::StatusCode::PERMISSION_DENIED) ||
                error.code() == static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT))
        << path << ": " << error.message();
    EXPECT_THAT(error.message(), HasSubstr(path));
    // /etc/passwd begins "root:"; no error quotes a byte of it.
    EXPECT_THAT(error.message(), Not(HasSubstr("root:"))) << path;
  }
  // Outside: the roots are named.
  EXPECT_THAT(Outcome("/etc/passwd").message(), HasSubstr("--data-root"));
}

TEST_F(DataRootsTest, WithoutRootsEveryFileIsRefused) {
  DaemonOptions options = TestOptions();
  options.data_roots.clear();
  options.checkpoint_roots.clear();
  StartDaemon(options);
  const std::string path = absl::StrCat(::testing::TempDir(), "/tokens.txt");
  std::ofstream(path) << "the tokens of a test, more than eight bytes";
  const v1::JobError error = Outcome(path);
  EXPECT_EQ(error.code(), static_cast<int>(grpc::StatusCode::PERMISSION_DENIED))
      << error.message();
  EXPECT_THAT(error.message(), HasSubstr("--data-root"));
}

}  // namespace
}  // namespace loom::daemon::testing
