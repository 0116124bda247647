// A policy checkpoint save that cannot be written (no such directory, a full disk) fails with a
// status and leaves the previous checkpoint whole; it never ends the process.
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "agent/policy/checkpoint.h"
#include "agent/policy/cost_model.h"
#include "gtest/gtest.h"

namespace kiln::agent {
namespace {

std::string TempDir() {
  char tmpl[] = "/tmp/kiln-ckpt-XXXXXX";
  return mkdtemp(tmpl);
}

std::string Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(CheckpointSaveTest, ADirectoryThatCannotExistIsAnError) {
  const std::string dir = TempDir();
  std::ofstream(dir + "/file") << "x";
  CostModel m(7);
  absl::Status s = SaveCheckpoint(dir + "/file/sub/model.pt", nullptr, &m);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("model.pt"), std::string::npos) << s;
  std::filesystem::remove_all(dir);
}

// A full disk, as the kernel reports it to a writer past RLIMIT_FSIZE (EFBIG): LibTorch's own file
// writer would throw from its destructor and end the process.
TEST(CheckpointSaveTest, AFullDiskFailsTheSaveAndKeepsThePreviousCheckpoint) {
  const std::string dir = TempDir();
  const std::string path = dir + "/model.pt";
  CostModel m(7);
  ASSERT_TRUE(SaveCheckpoint(path, nullptr, &m).ok());
  const std::string previous = Read(path);
  ASSERT_GT(previous.size(), 4096u);

  rlimit old{};
  getrlimit(RLIMIT_FSIZE, &old);
  auto old_handler = signal(SIGXFSZ, SIG_IGN);
  rlimit small = old;
  small.rlim_cur = 1024;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  CostModel other(8);
  absl::Status s = SaveCheckpoint(path, nullptr, &other);
  setrlimit(RLIMIT_FSIZE, &old);
  signal(SIGXFSZ, old_handler);

  EXPECT_FALSE(s.ok());
  EXPECT_EQ(Read(path), previous);  // no half-written checkpoint
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) ++files, (void)e;
  EXPECT_EQ(files, 1) << "the temporary file is removed";
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kiln::agent
