#include "hardware/kernel_package.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "hardware/toolchain.h"

namespace kiln::hardware {

absl::Status WriteKernelPackage(const std::string& path, const KernelPackage& p) {
  std::string text = absl::StrCat("kiln-kernel 1\ndialect ", p.dialect, "\nentry ", p.entry, "\n");
  for (const auto& [name, value] : p.defines)
    absl::StrAppend(&text, "define ", name, " ", value, "\n");
  absl::StrAppend(&text, "payload ", p.payload.size(), "\n", p.payload);
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    if (!out.good()) return absl::UnavailableError(absl::StrCat("cannot write ", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::UnavailableError(absl::StrCat("cannot rename ", tmp, " to ", path));
  }
  return absl::OkStatus();
}

absl::StatusOr<KernelPackage> ReadKernelPackage(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("no kernel package at ", path));
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string text = buf.str();
  KernelPackage p;
  size_t pos = 0;
  auto bad = [&](absl::string_view why) {
    return absl::DataLossError(absl::StrCat("malformed kernel package ", path, ": ", why));
  };
  bool header = false;
  while (pos < text.size()) {
    const size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) return bad("truncated");
    const std::string line = text.substr(pos, eol - pos);
    pos = eol + 1;
    std::vector<std::string> f = absl::StrSplit(line, ' ');
    if (!header) {
      if (line != "kiln-kernel 1") return bad("unknown format");
      header = true;
    } else if (f[0] == "dialect" && f.size() == 2) {
      p.dialect = f[1];
    } else if (f[0] == "entry" && f.size() == 2) {
      p.entry = f[1];
    } else if (f[0] == "define" && f.size() == 3) {
      int64_t v = 0;
      if (!absl::SimpleAtoi(f[2], &v)) return bad(line);
      p.defines.emplace_back(f[1], v);
    } else if (f[0] == "payload" && f.size() == 2) {
      size_t n = 0;
      if (!absl::SimpleAtoi(f[1], &n) || pos + n != text.size()) return bad("payload size");
      p.payload = text.substr(pos);
      return p;
    } else {
      return bad(line);
    }
  }
  return bad("no payload");
}

std::string KernelCachePath(const std::string& stem, const std::string& ext) {
  const std::string dir = CacheDir() + "/kernels";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  return absl::StrCat(dir, "/", stem, ".", ext);
}

}  // namespace kiln::hardware
