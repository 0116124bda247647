#include "agent/policy/checkpoint.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "agent/policy/torch_modules.h"
#include "agent/strategy.h"
#include "common/text.h"

namespace kiln::agent {
namespace {

constexpr int64_t kFormat = 1;

bool IsFile(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// mkdir -p of the directory part of `path`.
void MakeParents(const std::string& path) {
  for (size_t i = path.find('/', 1); i != std::string::npos; i = path.find('/', i + 1))
    mkdir(path.substr(0, i).c_str(), 0755);
}

// Writes `data` to `path` through a temporary file beside it, renamed over `path` once every
// byte is on disk; on any failure `path` is untouched and the temporary file removed.
absl::Status WriteFileReplacing(const std::string& path, const std::string& data) {
  const std::string tmp = absl::StrCat(path, ".tmp", getpid());
  auto fail = [&](const char* what) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    return absl::UnavailableError(absl::StrCat("checkpoint ", path, ": cannot ", what, ": ", why));
  };
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return fail("create a temporary file");
  const bool written = std::fwrite(data.data(), 1, data.size(), f) == data.size() &&
                       std::fflush(f) == 0 && fsync(fileno(f)) == 0;
  if (std::fclose(f) != 0 || !written) return fail("write");
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return fail("rename into place");
  return absl::OkStatus();
}

std::string FirstLine(const char* what) {
  std::string s = what;
  return s.substr(0, s.find('\n'));
}

}  // namespace

absl::Status SaveCheckpoint(const std::string& path, PolicyNet* policy, CostModel* cost) {
  try {
    torch::serialize::OutputArchive archive;
    archive.write("format", torch::tensor({kFormat}));
    if (policy) {
      torch::serialize::OutputArchive p;
      policy->impl().net->save(p);
      archive.write("policy", p);
      archive.write("policy_bias", policy->impl().bias.detach());
    }
    if (cost) {
      torch::serialize::OutputArchive c;
      cost->impl().net->save(c);
      archive.write("cost_model", c);
    }
    // Serialized in memory first: LibTorch's file writer reports a failed write (a full disk)
    // from its destructor, where the exception cannot be caught and ends the process. The
    // bytes then go to a temporary file with checked plain I/O and are renamed into place, so
    // that a failed save leaves the previous checkpoint whole.
    std::ostringstream bytes;
    archive.save_to(bytes);
    if (!bytes) return absl::InternalError(absl::StrCat("checkpoint ", path, ": cannot serialize"));
    MakeParents(path);
    return WriteFileReplacing(path, bytes.str());
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("checkpoint ", path, ": ", FirstLine(e.what())));
  }
  return absl::OkStatus();
}

absl::Status LoadCheckpoint(const std::string& path, PolicyNet* policy, CostModel* cost) {
  if (!IsFile(path))
    return absl::NotFoundError(absl::StrCat("checkpoint ", path, ": no such file"));
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(path);
    torch::Tensor format;
    if (!archive.try_read("format", format) || format.item<int64_t>() != kFormat)
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint ", path, ": not a Kiln agent checkpoint (format ", kFormat, ")"));
    torch::serialize::InputArchive sub;
    if (policy && archive.try_read("policy", sub)) {
      policy->impl().net->load(sub);
      torch::Tensor bias;
      if (archive.try_read("policy_bias", bias) && bias.sizes() == policy->impl().bias.sizes()) {
        torch::NoGradGuard no_grad;
        policy->impl().bias.copy_(bias);
      }
    }
    torch::serialize::InputArchive cm;
    if (cost && archive.try_read("cost_model", cm)) cost->impl().net->load(cm);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint ", path, ": cannot load: ", FirstLine(e.what())));
  }
  return absl::OkStatus();
}

void CopySharedWeights(PolicyNet& from, PolicyNet& to) {
  torch::NoGradGuard no_grad;
  auto src = from.impl().net->parameters(), dst = to.impl().net->parameters();
  for (size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
}

void CopySharedWeights(CostModel& from, CostModel& to) {
  torch::NoGradGuard no_grad;
  auto src = from.impl().net->parameters(), dst = to.impl().net->parameters();
  for (size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
}

absl::StatusOr<std::string> ResolveCheckpoint(const std::string& name) {
  bool well_formed = !name.empty() && name.size() <= kMaxCheckpointNameChars && name.front() != '.';
  for (char c : name)
    well_formed = well_formed && (absl::ascii_isalnum(c) || c == '.' || c == '_' || c == '-');
  if (!well_formed)
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint '", ShortQuote(name), "' is not a checkpoint name: expected 1 to ",
        kMaxCheckpointNameChars,
        " of A-Z a-z 0-9 . _ - not starting with '.' (a file in the checkpoint directory, "
        "not a path)"));
  const std::string dir = CheckpointDirectory();
  if (!dir.empty())
    for (const std::string& p : {absl::StrCat(dir, "/", name), absl::StrCat(dir, "/", name, ".pt")})
      if (IsFile(p)) return p;
  return absl::NotFoundError(
      absl::StrCat("checkpoint '", name, "' not found in the checkpoint directory"));
}

}  // namespace kiln::agent
