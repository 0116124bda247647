#include "cli/export.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cli/export_library.h"
#include "cli/format.h"
#include "cli/table.h"
#include "common/json_text.h"
#include "common/status.h"
#include "common/text.h"

namespace kiln::cli {
namespace fs = std::filesystem;

std::string DefaultExportDir(const std::string& job_id) { return "kiln-export-" + job_id; }

absl::Status CheckExportFileName(const std::string& name) {
  auto refuse = [&](const char* why) {
    return absl::InvalidArgumentError(
        absl::StrCat("the coordinator sent the file name '", ShortQuote(name), "', ", why,
                     "; only plain file names are written inside --out: nothing was written"));
  };
  if (name.empty()) return refuse("an empty name");
  if (name.size() > 255) return refuse("longer than 255 characters");
  if (name == "manifest.json") return refuse("the manifest's own name");
  if (name.front() == '.') return refuse("a hidden name or '..'");
  if (name.find("..") != std::string::npos) return refuse("containing '..'");
  for (char c : name) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (c == '/' || c == '\\') return refuse("a path, not a plain name");
    if (u < 0x20 || u == 0x7f) return refuse("containing control characters");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> WriteExport(const v1::ExportKernelsResponse& kernels,
                                        const std::string& dir) {
  // The server's file names are checked before anything is created: a name with a '/' or '..'
  // (or an absolute one) would write outside --out.
  std::set<std::string> names;
  for (const auto& k : kernels.kernels()) {
    RETURN_IF_ERROR(CheckExportFileName(k.file_name()));
    if (!names.insert(k.file_name()).second)
      return absl::InvalidArgumentError(absl::StrCat("the coordinator sent the file name '",
                                                     ShortQuote(k.file_name()),
                                                     "' twice: nothing was written"));
  }
  // CPU kernels come with a library around them (kiln_kernels.h, CMakeLists.txt, a self-test),
  // whose files' names a kernel's file may not take. Where the library cannot be made (a
  // coordinator older than library exports), the sources are still written and the manifest
  // says why there is no library.
  const auto built = LibraryFiles(kernels);
  const std::vector<std::pair<std::string, std::string>> library =
      built.ok() ? *built : std::vector<std::pair<std::string, std::string>>{};
  for (const auto& [name, text] : library)
    if (names.count(name))
      return absl::InvalidArgumentError(
          absl::StrCat("the coordinator sent the file name '", ShortQuote(name),
                       "', which the exported library's own file has: nothing was written"));
  std::error_code ec;
  if (fs::exists(dir, ec) && !(fs::is_directory(dir, ec) && fs::is_empty(dir, ec)))
    return absl::AlreadyExistsError(
        absl::StrCat("--out ", dir, ": exists and is not an empty directory; nothing was written"));
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const auto& k : kernels.kernels()) {
    nlohmann::ordered_json config = nlohmann::ordered_json::object();
    for (const auto& [name, value] : k.config().knobs()) config[name] = value;
    nlohmann::ordered_json entry = {
        {"workload", k.workload_key()},
        {"file", k.file_name()},
        {"dialect", k.dialect()},
        {"entry", k.entry()},
        {"config", std::move(config)},
        {"median_us", k.best().median_us()},
        {"samples_us",
         std::vector<double>(k.best().samples_us().begin(), k.best().samples_us().end())}};
    auto convention = KernelConvention(k);
    if (convention.ok() && !convention->is_null()) entry["calling"] = std::move(*convention);
    list.push_back(std::move(entry));
  }
  nlohmann::ordered_json root = {{"job_id", kernels.job_id()},
                                 {"kernels", std::move(list)},
                                 {"chip", ChipJson(kernels.chip())}};
  if (!library.empty()) root["library"] = LibraryManifest(kernels);
  if (!built.ok()) root["library"] = {{"not_written", std::string(built.status().message())}};
  const std::string manifest = JsonText(root);

  const fs::path target = fs::absolute(fs::path(dir), ec);
  const fs::path tmp =
      target.parent_path() / absl::StrCat(".", target.filename().string(), ".tmp-", getpid());
  fs::remove_all(tmp, ec);
  if (!fs::create_directories(tmp, ec) || ec)
    return absl::PermissionDeniedError(
        absl::StrCat("--out ", dir, ": cannot create ", tmp.string(), ": ", ec.message()));
  auto write = [&](const std::string& name, const std::string& text) -> bool {
    std::ofstream f(tmp / name, std::ios::binary);
    f << text;
    return static_cast<bool>(f.flush());
  };
  bool ok = write("manifest.json", manifest + "\n");
  for (const auto& k : kernels.kernels()) ok = ok && write(k.file_name(), k.source());
  for (const auto& [name, text] : library) ok = ok && write(name, text);
  if (ok) {
    if (fs::exists(target, ec)) fs::remove(target, ec);  // the empty directory checked above
    fs::rename(tmp, target, ec);
  }
  if (!ok || ec) {
    fs::remove_all(tmp, ec);
    return absl::DataLossError(
        absl::StrCat("--out ", dir, ": writing the kernels failed; nothing was written"));
  }
  return manifest;
}

std::string FormatExport(const v1::ExportKernelsResponse& kernels, const std::string& dir) {
  std::vector<Row> rows;
  const auto files = LibraryFiles(kernels);
  const bool library = files.ok() && !files->empty();
  for (const auto& k : kernels.kernels()) {
    auto convention = KernelConvention(k);
    const std::string function = convention.ok() && convention->contains("function")
                                     ? (*convention)["function"].get<std::string>()
                                     : k.entry();
    rows.push_back({k.file_name(), k.workload_key(), FormatMicros(k.best().median_us()), function});
  }
  return absl::StrCat(
      "exported ", kernels.kernels_size(), " kernel", kernels.kernels_size() == 1 ? "" : "s",
      " of job ", kernels.job_id(), " (tuned on ", kernels.chip().chip_type(), ", ",
      kernels.chip().model(), ") to ", dir, "/ with manifest.json\n",
      library ? absl::StrCat("as a library: kiln_kernels.h declares them; build and "
                             "check with: cmake -S ",
                             dir, " -B ", dir, "/build && cmake --build ", dir, "/build && ", dir,
                             "/build/kiln_kernels_selftest\n")
              : "",
      "\n", FormatTable({"FILE", "WORKLOAD", "BEST (µs)", "FUNCTION"}, rows));
}

}  // namespace kiln::cli
