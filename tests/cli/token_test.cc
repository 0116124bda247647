// `kiln token create` and the security flags of the kiln parser.
#include "cli/token.h"

#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli/flags.h"
#include "gtest/gtest.h"

namespace kiln::cli {
namespace {

std::string Sha256Hex(const std::string& s) {
  unsigned char d[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(s.data(), s.size(), d, &n, EVP_sha256(), nullptr);
  std::string out;
  char buf[3];
  for (unsigned i = 0; i < n; ++i) {
    std::snprintf(buf, sizeof(buf), "%02x", d[i]);
    out += buf;
  }
  return out;
}

std::string TempDir() {  // removed when the test program exits
  static std::vector<std::string>* dirs = [] {
    auto* v = new std::vector<std::string>;
    std::atexit([] {
      for (const auto& d : *dirs) std::filesystem::remove_all(d);
    });
    return v;
  }();
  char tmpl[] = "/tmp/kiln-token-test-XXXXXX";
  dirs->push_back(mkdtemp(tmpl));
  return dirs->back();
}

TEST(TokenCreate, AppendsTheDigestLineToAFileOnlyItsOwnerReads) {
  const std::string file = TempDir() + "/tokens";
  auto a = CreateToken("submit", "alice", file);
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = CreateToken("worker", "lab-1", file);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(a->size(), 64u);
  EXPECT_NE(*a, *b);
  struct stat st {};
  ASSERT_EQ(stat(file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), "submit alice " + Sha256Hex(*a) + "\nworker lab-1 " + Sha256Hex(*b) + "\n");
}

TEST(TokenCreate, KeepsOneEntryALineAfterAFileWithoutAFinalNewline) {
  const std::string file = TempDir() + "/tokens";
  std::ofstream(file) << "# hand-written";
  auto a = CreateToken("admin", "ops", file);
  ASSERT_TRUE(a.ok());
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), "# hand-written\nadmin ops " + Sha256Hex(*a) + "\n");
}

TEST(TokenCreate, RefusesBadRolesAndNames) {
  const std::string file = TempDir() + "/tokens";
  EXPECT_FALSE(CreateToken("root", "x", file).ok());
  EXPECT_FALSE(CreateToken("submit", "", file).ok());
  EXPECT_FALSE(CreateToken("submit", "a b", file).ok());
  EXPECT_FALSE(CreateToken("submit", std::string(65, 'a'), file).ok());
  EXPECT_TRUE(CreateToken("submit", std::string(64, 'a'), file).ok());
  EXPECT_FALSE(CreateToken("submit", "x", "/nonexistent-dir/tokens").ok());
}

TEST(SecurityFlags, ParseForRemoteCommandsAndTokenCreate) {
  Invocation inv;
  ASSERT_TRUE(
      ParseCommandLine({"--tls-ca", "ca.pem", "jobs", "--token-file", "t"}, nullptr, &inv).ok());
  EXPECT_EQ(inv.tls_ca, "ca.pem");
  EXPECT_EQ(inv.token_file, "t");
  Invocation tok;
  ASSERT_TRUE(ParseCommandLine(
                  {"token", "create", "--role", "submit", "--name", "alice", "--tokens-file", "f"},
                  nullptr, &tok)
                  .ok());
  EXPECT_EQ(tok.command, "token");
  EXPECT_EQ(tok.token_role, "submit");
  EXPECT_EQ(tok.token_name, "alice");
  EXPECT_EQ(tok.tokens_file, "f");
  Invocation bad;
  EXPECT_FALSE(ParseCommandLine({"token", "create", "--role", "submit"}, nullptr, &bad).ok());
  EXPECT_FALSE(ParseCommandLine({"token", "delete"}, nullptr, &bad).ok());
  EXPECT_FALSE(ParseCommandLine({"token", "create", "--role", "submit", "--name", "a",
                                 "--tokens-file", "f", "--tls-ca", "x"},
                                nullptr, &bad)
                   .ok());
}

}  // namespace
}  // namespace kiln::cli
