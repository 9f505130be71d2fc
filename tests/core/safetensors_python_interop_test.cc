// Interoperability with the independent Python implementation (make_reference.py): it writes
// the embedded reference file, reads what Loom writes, and rejects a broken file.

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/safetensors.h"
#include "gtest/gtest.h"
#include "tests/core/safetensors_test_util.h"

namespace loom::checkpoint {
namespace {

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout
};

CommandResult RunCommand(const std::string& command) {
  CommandResult result;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[4096];
  size_t count;
  while ((count = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0)
    result.output.append(buffer, count);
  int status = ::pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

std::string PythonCommand(const std::string& arguments) {
  return absl::StrCat("'", LOOM_CHECKPOINT_PYTHON, "' '", LOOM_CHECKPOINT_REFERENCE_SCRIPT, "' ",
                      arguments);
}

// What `make_reference.py check` prints for a file holding `checkpoint`.
std::string PythonSummary(const Checkpoint& checkpoint) {
  std::vector<std::string> lines;
  for (const auto& [key, value] : checkpoint.metadata) {
    lines.push_back(
        absl::StrCat("metadata ", absl::BytesToHexString(key), " ", absl::BytesToHexString(value)));
  }
  for (const auto& [name, tensor] : checkpoint.tensors) {
    lines.push_back(absl::StrCat("tensor ", absl::BytesToHexString(name), " ",
                                 *SafetensorsDtype(tensor.data_type), " [",
                                 absl::StrJoin(tensor.shape.dimensions(), ","), "] ",
                                 absl::BytesToHexString(Bytes(tensor))));
  }
  std::sort(lines.begin(), lines.end());
  std::string summary;
  for (const std::string& line : lines) absl::StrAppend(&summary, line, "\n");
  return summary;
}

class PythonInteropTest : public SafetensorsTest {
 protected:
  void SetUp() override {
    SafetensorsTest::SetUp();
    if (::access(LOOM_CHECKPOINT_PYTHON, X_OK) != 0) {
      GTEST_SKIP() << LOOM_CHECKPOINT_PYTHON << " is not there: skipping the Python checks";
    }
  }
};

TEST_F(PythonInteropTest, PythonWritesTheEmbeddedReferenceFile) {
  // Keeps kReferenceHex in step with make_reference.py.
  std::string path = Path("reference.safetensors");
  CommandResult result = RunCommand(PythonCommand(absl::StrCat("write '", path, "'")));
  ASSERT_EQ(result.exit_code, 0);
  EXPECT_EQ(absl::BytesToHexString(ReadFile(path)), kReferenceHex);
  absl::StatusOr<Checkpoint> read = ReadSafetensors(path);
  ASSERT_TRUE(read.ok()) << read.status();
  ExpectSameCheckpoint(*read, ReferenceCheckpoint());
}

TEST_F(PythonInteropTest, PythonReadsWhatWeWrite) {
  Checkpoint large;
  std::vector<int32_t> values(300'000);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<int32_t>(i * 2654435761u);
  large.tensors["big"] = MakeTensor<int32_t>(plan::INT32, {300, 1000}, values);
  large.tensors["small"] = MakeTensor<uint8_t>(plan::UINT8, {3}, {1, 2, 3});
  Checkpoint names;
  names.tensors["\xf0\x9f\x98\x80/\"x\"\\\n\x1f"] = MakeTensor<uint8_t>(plan::UINT8, {1}, {7});
  names.tensors[""] = MakeTensor<int64_t>(plan::INT64, {}, {-7});
  names.metadata["k\x7f\t"] = "v\xc3\xa9\r\b\f";

  int index = 0;
  for (const Checkpoint& checkpoint :
       {ReferenceCheckpoint(), MixedCheckpoint(), Checkpoint(), large, names}) {
    SCOPED_TRACE(index);
    std::string path = Path(absl::StrCat("ours", index++, ".safetensors"));
    ASSERT_TRUE(WriteSafetensors(path, checkpoint).ok());
    CommandResult result = RunCommand(PythonCommand(absl::StrCat("check '", path, "'")));
    ASSERT_EQ(result.exit_code, 0) << result.output;
    EXPECT_EQ(result.output, PythonSummary(checkpoint));
  }
}

TEST_F(PythonInteropTest, PythonCheckerRejectsABrokenFile) {
  // The checker is strict too (or PythonReadsWhatWeWrite would prove little).
  std::string path = Path("broken.safetensors");
  std::string file = ReferenceFile();
  WriteFile(path, file.substr(0, file.size() - 1));
  EXPECT_EQ(RunCommand(PythonCommand(absl::StrCat("check '", path, "' 2>/dev/null"))).exit_code, 1);
}

}  // namespace
}  // namespace loom::checkpoint
