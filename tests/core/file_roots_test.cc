// FileRoots (issue 56): files are opened only beneath the roots, without following symbolic links
// or ".." out of them, as regular files only (never blocking on a FIFO), read with pread (a
// truncated file is DATA_LOSS), and no error holds a byte of a file.
#include "core/file_roots.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kSecret[] = "SECRET-BYTES-0123456789";

class FileRootsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    base_ = std::filesystem::path(absl::StrCat(::testing::TempDir(), "/loom_file_roots_",
                                               ::getpid(), "_", info->name()))
                .lexically_normal()
                .string();
    std::filesystem::remove_all(base_);
    root_ = base_ + "/root";
    outside_ = base_ + "/outside";
    std::filesystem::create_directories(root_ + "/sub");
    std::filesystem::create_directories(outside_);
    Write(root_ + "/data.bin", "0123456789");
    Write(root_ + "/sub/inner.bin", "inner");
    Write(outside_ + "/secret", kSecret);
  }
  void TearDown() override { std::filesystem::remove_all(base_); }

  static void Write(const std::string& path, const std::string& contents) {
    std::ofstream stream(path, std::ios::binary | std::ios::trunc);
    stream << contents;
    ASSERT_TRUE(stream.good()) << path;
  }

  FileRoots Roots() const {
    absl::StatusOr<FileRoots> roots = FileRoots::Beneath({root_}, "--data-root");
    EXPECT_TRUE(roots.ok()) << roots.status();
    return *std::move(roots);
  }

  // Opening `path` beneath the roots is refused, naming it, the root and the flag, without a byte
  // of any file.
  void ExpectRefused(const std::string& path) {
    SCOPED_TRACE(path);
    absl::StatusOr<ReadableFile> file = Roots().OpenForReading(path);
    ASSERT_FALSE(file.ok());
    EXPECT_EQ(file.status().code(), absl::StatusCode::kPermissionDenied) << file.status();
    EXPECT_THAT(file.status().message(), HasSubstr(path));
    EXPECT_THAT(file.status().message(), HasSubstr(root_));
    EXPECT_THAT(file.status().message(), HasSubstr("--data-root"));
    EXPECT_THAT(file.status().message(), Not(HasSubstr(kSecret)));
  }

  std::string base_;
  std::string root_;
  std::string outside_;
};

TEST_F(FileRootsTest, ReadsAFileBeneathTheRoot) {
  absl::StatusOr<ReadableFile> file = Roots().OpenForReading(root_ + "/sub/inner.bin");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->size(), 5);
  std::string bytes(5, '\0');
  ASSERT_TRUE(file->ReadAt(0, absl::Span<char>(bytes.data(), bytes.size())).ok());
  EXPECT_EQ(bytes, "inner");
  // ".." that stays beneath the root, and doubled slashes, are fine.
  EXPECT_TRUE(Roots().OpenForReading(root_ + "/sub/../data.bin").ok());
  EXPECT_TRUE(Roots().OpenForReading(root_ + "//sub//inner.bin").ok());
}

TEST_F(FileRootsTest, DirectPathOutsideIsRefused) {
  ExpectRefused(outside_ + "/secret");
  ExpectRefused("/etc/passwd");
  // A sibling whose name starts with the root's is not beneath it.
  std::filesystem::create_directories(root_ + "2");
  Write(root_ + "2/file", "x");
  ExpectRefused(root_ + "2/file");
}

TEST_F(FileRootsTest, RelativePathIsRefused) {
  absl::StatusOr<ReadableFile> file = Roots().OpenForReading("data.bin");
  EXPECT_EQ(file.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(file.status().message(), HasSubstr("not an absolute path"));
}

TEST_F(FileRootsTest, DotDotOutOfTheRootIsRefused) {
  ExpectRefused(root_ + "/../outside/secret");
  ExpectRefused(root_ + "/sub/../../outside/secret");
  ExpectRefused(root_ + "/../../../../../../../../etc/passwd");
}

TEST_F(FileRootsTest, SymlinkInsidePointingOutIsRefused) {
  std::filesystem::create_symlink(outside_ + "/secret", root_ + "/link");
  ExpectRefused(root_ + "/link");
  std::filesystem::create_symlink("../outside/secret", root_ + "/relative_link");
  ExpectRefused(root_ + "/relative_link");
}

TEST_F(FileRootsTest, SymlinkComponentIsRefusedEvenWhenItStaysInside) {
  std::filesystem::create_directory_symlink(root_ + "/sub", root_ + "/alias");
  ExpectRefused(root_ + "/alias/inner.bin");
  std::filesystem::create_directory_symlink(outside_, root_ + "/escape");
  ExpectRefused(root_ + "/escape/secret");
}

TEST_F(FileRootsTest, FifoIsRefusedWithoutBlocking) {
  const std::string fifo = root_ + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const FileRoots& roots : {Roots(), FileRoots::Unrestricted()}) {
    absl::StatusOr<ReadableFile> file = roots.OpenForReading(fifo);
    EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument) << file.status();
    EXPECT_THAT(file.status().message(), HasSubstr(fifo));
    EXPECT_THAT(file.status().message(), HasSubstr("not a regular file (it is a FIFO)"));
  }
}

TEST_F(FileRootsTest, DeviceFileIsRefused) {
  absl::StatusOr<FileRoots> dev = FileRoots::Beneath({"/dev"}, "--data-root");
  ASSERT_TRUE(dev.ok()) << dev.status();
  const FileRoots anywhere = FileRoots::Unrestricted();
  for (const FileRoots* roots : std::vector<const FileRoots*>{&*dev, &anywhere}) {
    absl::StatusOr<ReadableFile> file = roots->OpenForReading("/dev/null");
    EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument) << file.status();
    EXPECT_THAT(file.status().message(), HasSubstr("a character device"));
  }
}

TEST_F(FileRootsTest, DirectoryIsRefused) {
  absl::StatusOr<ReadableFile> file = Roots().OpenForReading(root_ + "/sub");
  EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument) << file.status();
  EXPECT_THAT(file.status().message(), HasSubstr("a directory"));
  file = Roots().OpenForReading(root_);
  EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument) << file.status();
}

TEST_F(FileRootsTest, MissingFileIsNotFound) {
  absl::StatusOr<ReadableFile> file = Roots().OpenForReading(root_ + "/missing.bin");
  EXPECT_EQ(file.status().code(), absl::StatusCode::kNotFound) << file.status();
  EXPECT_THAT(file.status().message(), HasSubstr(root_ + "/missing.bin"));
  file = FileRoots::Unrestricted().OpenForReading(root_ + "/missing.bin");
  EXPECT_EQ(file.status().code(), absl::StatusCode::kNotFound) << file.status();
}

TEST_F(FileRootsTest, TruncationDuringReadIsDataLossNamingTheFile) {
  absl::StatusOr<ReadableFile> file = Roots().OpenForReading(root_ + "/data.bin");
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ(::truncate((root_ + "/data.bin").c_str(), 4), 0);
  std::string bytes(8, '\0');
  absl::Status status = file->ReadAt(2, absl::Span<char>(bytes.data(), bytes.size()));
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_THAT(status.message(), HasSubstr(root_ + "/data.bin"));
  EXPECT_THAT(status.message(), HasSubstr("truncated"));
  EXPECT_THAT(status.message(), Not(HasSubstr("0123")));
}

TEST_F(FileRootsTest, LongReadStopsOnceEnding) {
  absl::StatusOr<ReadableFile> file = Roots().OpenForReading(root_ + "/data.bin");
  ASSERT_TRUE(file.ok()) << file.status();
  std::atomic<bool> ending{true};
  std::string bytes(4, '\0');
  absl::Status status = file->ReadAt(0, absl::Span<char>(bytes.data(), bytes.size()), &ending);
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
  ending = false;
  EXPECT_TRUE(file->ReadAt(0, absl::Span<char>(bytes.data(), bytes.size()), &ending).ok());
  EXPECT_EQ(bytes, "0123");
}

TEST_F(FileRootsTest, NoRootsRefusesEveryPathNamingTheFlag) {
  absl::StatusOr<FileRoots> none = FileRoots::Beneath({}, "--data-root");
  ASSERT_TRUE(none.ok());
  absl::StatusOr<ReadableFile> file = none->OpenForReading(root_ + "/data.bin");
  EXPECT_EQ(file.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(file.status().message(), HasSubstr("--data-root"));
  EXPECT_EQ(none->Describe(), "nowhere (no --data-root given)");
}

TEST_F(FileRootsTest, BadRootIsInvalidArgumentNamingItAndTheFlag) {
  absl::StatusOr<FileRoots> roots = FileRoots::Beneath({base_ + "/nope"}, "--checkpoint-root");
  EXPECT_EQ(roots.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(roots.status().message(), HasSubstr("--checkpoint-root"));
  EXPECT_THAT(roots.status().message(), HasSubstr(base_ + "/nope"));
  roots = FileRoots::Beneath({root_ + "/data.bin"}, "--data-root");
  EXPECT_EQ(roots.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(FileRootsTest, RootNamedThroughASymlinkAcceptsBothSpellings) {
  std::filesystem::create_directory_symlink(root_, base_ + "/root_link");
  absl::StatusOr<FileRoots> roots = FileRoots::Beneath({base_ + "/root_link/"}, "--data-root");
  ASSERT_TRUE(roots.ok()) << roots.status();
  EXPECT_TRUE(roots->OpenForReading(base_ + "/root_link/data.bin").ok());
  EXPECT_TRUE(roots->OpenForReading(root_ + "/data.bin").ok());
  EXPECT_EQ(roots->Describe(), absl::StrCat("beneath ", base_, "/root_link (--data-root)"));
}

TEST_F(FileRootsTest, UnionKeepsEachFlag) {
  absl::StatusOr<FileRoots> data = FileRoots::Beneath({root_ + "/sub"}, "--data-root");
  absl::StatusOr<FileRoots> checkpoints = FileRoots::Beneath({outside_}, "--checkpoint-root");
  ASSERT_TRUE(data.ok() && checkpoints.ok());
  absl::StatusOr<FileRoots> both = FileRoots::Union(*data, *checkpoints);
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_TRUE(both->OpenForReading(root_ + "/sub/inner.bin").ok());
  EXPECT_TRUE(both->OpenForReading(outside_ + "/secret").ok());
  absl::StatusOr<ReadableFile> refused = both->OpenForReading(root_ + "/data.bin");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(both->Describe(), absl::StrCat("beneath ", root_, "/sub (--data-root), ", outside_,
                                           " (--checkpoint-root)"));
  EXPECT_TRUE(FileRoots::Union(*data, FileRoots::Unrestricted())->unrestricted());
}

TEST_F(FileRootsTest, OpenForWritingOpensTheDirectoryBeneathARoot) {
  absl::StatusOr<WritableDirectory> directory = Roots().OpenForWriting(root_ + "/sub/new.bin");
  ASSERT_TRUE(directory.ok()) << directory.status();
  EXPECT_EQ(directory->name(), "new.bin");
  EXPECT_EQ(directory->directory(), root_ + "/sub");
  const int descriptor =
      ::openat(directory->descriptor(), "new.bin", O_WRONLY | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(descriptor, 0);
  ::close(descriptor);
  EXPECT_TRUE(std::filesystem::exists(root_ + "/sub/new.bin"));
  // The root itself holds files too.
  EXPECT_TRUE(Roots().OpenForWriting(root_ + "/top.bin").ok());

  for (const std::string& path : {outside_ + "/x.bin", root_ + "/../outside/x.bin"}) {
    absl::StatusOr<WritableDirectory> refused = Roots().OpenForWriting(path);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied) << path;
    EXPECT_THAT(refused.status().message(), HasSubstr(path));
  }
  std::filesystem::create_directory_symlink(outside_, root_ + "/escape");
  EXPECT_EQ(Roots().OpenForWriting(root_ + "/escape/x.bin").status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Roots().OpenForWriting(root_ + "/missing/x.bin").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(Roots().OpenForWriting(root_ + "/sub/").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Roots().OpenForWriting(root_ + "/sub/..").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(FileRootsTest, CheckBeneathChecksTheText) {
  EXPECT_TRUE(Roots().CheckBeneath(root_ + "/a/b.safetensors").ok());
  EXPECT_EQ(Roots().CheckBeneath(root_ + "/../outside/b").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Roots().CheckBeneath(outside_ + "/b").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Roots().CheckBeneath("relative/b").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(FileRoots::Unrestricted().CheckBeneath("relative/b").ok());
  EXPECT_EQ(FileRoots::Unrestricted().Describe(), "anywhere");
}

// The walk FileRoots falls back to without openat2 refuses what openat2 refuses.
TEST_F(FileRootsTest, WalkWithoutOpenat2RefusesTheSame) {
  const int root = ::open(root_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(root, 0);
  std::filesystem::create_symlink(outside_ + "/secret", root_ + "/link");
  std::filesystem::create_directory_symlink(root_ + "/sub", root_ + "/alias");
  auto open = [&](const std::string& relative) {
    const int descriptor =
        file_roots_internal::OpenBeneathByWalk(root, relative, O_RDONLY | O_NONBLOCK);
    if (descriptor >= 0) ::close(descriptor);
    return descriptor >= 0 ? 0 : -descriptor;
  };
  EXPECT_EQ(open("data.bin"), 0);
  EXPECT_EQ(open("sub/inner.bin"), 0);
  EXPECT_EQ(open("./sub/../data.bin"), 0);
  EXPECT_EQ(open("../outside/secret"), EXDEV);
  EXPECT_EQ(open("sub/../../outside/secret"), EXDEV);
  EXPECT_EQ(open("link"), ELOOP);
  EXPECT_EQ(open("alias/inner.bin"), ELOOP);
  EXPECT_EQ(open("missing"), ENOENT);
  EXPECT_EQ(open("data.bin/x"), ENOTDIR);
  std::filesystem::create_directory_symlink(outside_, root_ + "/escape");
  const int directory =
      file_roots_internal::OpenBeneathByWalk(root, "escape", O_RDONLY | O_DIRECTORY);
  EXPECT_EQ(directory, -ELOOP);
  if (directory >= 0) ::close(directory);
  ::close(root);
}

}  // namespace
}  // namespace loom
