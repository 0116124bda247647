#include "cli/export.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "cli/format.h"
#include "cli/json_writer.h"
#include "cli/table.h"

namespace kiln::cli {
namespace fs = std::filesystem;

std::string DefaultExportDir(const std::string& job_id) { return "kiln-export-" + job_id; }

absl::StatusOr<std::string> WriteExport(const v1::ExportKernelsResponse& kernels,
                                        const std::string& dir) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !(fs::is_directory(dir, ec) && fs::is_empty(dir, ec)))
    return absl::AlreadyExistsError(
        absl::StrCat("--out ", dir, ": exists and is not an empty directory; nothing was written"));
  JsonWriter w;
  w.BeginObject().Key("job_id").String(kernels.job_id()).Key("kernels").BeginArray();
  for (const auto& k : kernels.kernels()) {
    w.BeginObject().Key("workload").String(k.workload_key()).Key("file").String(k.file_name());
    w.Key("dialect").String(k.dialect()).Key("entry").String(k.entry());
    w.Key("config").BeginObject();
    for (const auto& [name, value] : k.config().knobs()) w.Key(name).Int(value);
    w.EndObject();
    w.Key("median_us").Number(k.best().median_us()).Key("samples_us").BeginArray();
    for (double s : k.best().samples_us()) w.Number(s);
    w.EndArray().EndObject();
  }
  w.EndArray().Key("chip");
  WriteChipJson(w, kernels.chip());
  w.EndObject();
  const std::string manifest = w.str();

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
  for (const auto& k : kernels.kernels())
    rows.push_back(
        {k.file_name(), k.workload_key(), FormatMicros(k.best().median_us()), k.entry()});
  return absl::StrCat("exported ", kernels.kernels_size(), " kernel",
                      kernels.kernels_size() == 1 ? "" : "s", " of job ", kernels.job_id(),
                      " (tuned on ", kernels.chip().chip_type(), ", ", kernels.chip().model(),
                      ") to ", dir, "/ with manifest.json\n\n",
                      FormatTable({"FILE", "WORKLOAD", "BEST (µs)", "ENTRY"}, rows));
}

}  // namespace kiln::cli
