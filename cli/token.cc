#include "cli/token.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace kiln::cli {
namespace {

std::string Hex(const unsigned char* data, size_t n) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    out += kHex[data[i] >> 4];
    out += kHex[data[i] & 15];
  }
  return out;
}

}  // namespace

absl::Status ValidateTokenRoleAndName(const std::string& role, const std::string& name) {
  if (role != "submit" && role != "worker" && role != "admin")
    return absl::InvalidArgumentError("--role: expected submit, worker or admin");
  if (name.empty() || name.size() > 64)
    return absl::InvalidArgumentError("--name: expected 1 to 64 characters");
  for (char c : name)
    if (c <= ' ' || c > '~')
      return absl::InvalidArgumentError(
          "--name: printable ASCII only, without whitespace (letters, digits, -_.@ ...)");
  return absl::OkStatus();
}

absl::StatusOr<std::string> CreateToken(const std::string& role, const std::string& name,
                                        const std::string& tokens_file) {
  if (absl::Status s = ValidateTokenRoleAndName(role, name); !s.ok()) return s;
  unsigned char secret[32];
  if (RAND_bytes(secret, sizeof(secret)) != 1)
    return absl::InternalError("cannot draw random bytes (OpenSSL RAND_bytes failed)");
  const std::string token = Hex(secret, sizeof(secret));
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (EVP_Digest(token.data(), token.size(), digest, &n, EVP_sha256(), nullptr) != 1)
    return absl::InternalError("SHA-256 failed");
  std::string line = absl::StrCat(role, " ", name, " ", Hex(digest, n), "\n");

  int fd = open(tokens_file.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0)
    return absl::InvalidArgumentError(
        absl::StrCat("--tokens-file: cannot open ", tokens_file, ": ", std::strerror(errno)));
  struct stat st {};
  if (fstat(fd, &st) == 0 && st.st_size > 0) {
    // Keep one entry a line even when the file's last line has no newline.
    int rfd = open(tokens_file.c_str(), O_RDONLY | O_CLOEXEC);
    char last = '\n';
    if (rfd >= 0) {
      if (pread(rfd, &last, 1, st.st_size - 1) != 1) last = '\n';
      close(rfd);
    }
    if (last != '\n') line = "\n" + line;
  }
  ssize_t written = write(fd, line.data(), line.size());
  int err = errno;
  if (close(fd) != 0 && written == static_cast<ssize_t>(line.size())) written = -1, err = errno;
  if (written != static_cast<ssize_t>(line.size()))
    return absl::InternalError(
        absl::StrCat("--tokens-file: cannot write ", tokens_file, ": ", std::strerror(err)));
  return token;
}

int RunTokenCreate(const Invocation& inv, Io& io) {
  auto token = CreateToken(inv.token_role, inv.token_name, inv.tokens_file);
  if (!token.ok()) {
    io.err << "kiln: token create: " << token.status().message() << "\n";
    return token.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  struct stat st {};
  if (stat(inv.tokens_file.c_str(), &st) == 0 && (st.st_mode & 077))
    io.err << "kiln: warning: " << inv.tokens_file
           << " is readable by others (chmod 600 it); it holds token digests\n";
  io.err << "kiln: added a " << inv.token_role << " token named " << inv.token_name << " to "
         << inv.tokens_file
         << " (a running coordinator reads --tokens at start: restart it). The token, shown "
            "only now (keep it in a file for --token-file):\n";
  io.err.flush();
  io.out << *token << "\n";
  io.out.flush();
  return 0;
}

}  // namespace kiln::cli
