#include "agent/policy/checkpoint.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "agent/policy/torch_modules.h"
#include "agent/strategy.h"

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
    MakeParents(path);
    std::string tmp = absl::StrCat(path, ".tmp", getpid());
    archive.save_to(tmp);
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
      std::remove(tmp.c_str());
      return absl::InternalError(absl::StrCat("checkpoint ", path, ": cannot rename into place"));
    }
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
  if (IsFile(name)) return name;
  std::string dir = ModelDirectory();
  if (!dir.empty() && name.find('/') == std::string::npos)
    for (const std::string& p : {absl::StrCat(dir, "/", name), absl::StrCat(dir, "/", name, ".pt")})
      if (IsFile(p)) return p;
  return absl::NotFoundError(absl::StrCat(
      "checkpoint '", name, "' is neither a file nor a model in the model directory",
      dir.empty() ? " (none set: --model-dir or $KILN_MODEL_DIR)" : absl::StrCat(" ", dir)));
}

}  // namespace kiln::agent
