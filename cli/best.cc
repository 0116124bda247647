#include "cli/best.h"

#include <algorithm>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cli/export.h"
#include "cli/format.h"
#include "cli/table.h"
#include "codegen/knob_space.h"
#include "codegen/workload.h"
#include "common/json_text.h"

namespace kiln::cli {
namespace {

// LookupBest answers at most this many records; across every chip type the prefix's may lie
// further down, so the prefix itself is asked for too (an exact chip type).
constexpr int kMaxRecords = 1000;

double Gflops(const v1::TuningRecord& r) {
  if (r.measurement().gflops() > 0) return r.measurement().gflops();
  const double us = r.measurement().median_us();
  return us > 0 ? codegen::WorkloadFlops(r.workload()) / (us * 1e3) : 0;
}

nlohmann::ordered_json RecordJson(const v1::TuningRecord& r) {
  nlohmann::ordered_json config = nlohmann::ordered_json::object();
  for (const auto& [k, v] : codegen::FromProto(r.config())) config[k] = v;
  return {{"chip_type", r.chip_type()},
          {"chip_model", r.chip().model()},
          {"config", config},
          {"config_key", r.config_key()},
          {"median_us", RoundTo(r.measurement().median_us(), 3)},
          {"p10_us", RoundTo(r.measurement().p10_us(), 3)},
          {"p90_us", RoundTo(r.measurement().p90_us(), 3)},
          {"gflops", RoundTo(Gflops(r), 2)},
          {"job_id", r.job_id()},
          {"created_unix_ms", r.created_unix_ms()},
          {"source_hash", r.source_hash()},
          {"toolchain", r.toolchain()}};
}

std::string NoneKnown(const v1::Workload& w, const std::string& prefix) {
  return absl::StrCat("no kernel of ", codegen::WorkloadKey(w),
                      " is known on a chip type starting with '", prefix,
                      "' (tune it first: kiln submit --op ... --chip ", prefix, ")");
}

v1::Workload Normalized(v1::Workload w) {
  if (w.dtype() == v1::DTYPE_UNSPECIFIED) w.set_dtype(v1::FP32);  // as the coordinator stores it
  return w;
}

}  // namespace

absl::StatusOr<std::vector<v1::TuningRecord>> BestPerChipType(Client& client,
                                                              const v1::Workload& workload,
                                                              const std::string& prefix) {
  const v1::Workload w = Normalized(workload);
  std::vector<v1::TuningRecord> all;
  for (const std::string& chip_type : {prefix, std::string()}) {
    auto records = client.LookupBest(w, chip_type, chip_type.empty() ? kMaxRecords : 1);
    if (!records.ok()) return records.status();
    all.insert(all.end(), records->begin(), records->end());
  }
  std::map<std::string, v1::TuningRecord> best;  // per chip type
  for (const v1::TuningRecord& r : all) {
    if (!absl::StartsWith(r.chip_type(), prefix) || !IsUsable(r.measurement())) continue;
    auto it = best.find(r.chip_type());
    if (it == best.end() || r.measurement().median_us() < it->second.measurement().median_us())
      best[r.chip_type()] = r;
  }
  std::vector<v1::TuningRecord> out;
  for (auto& [chip, r] : best) out.push_back(std::move(r));
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return a.measurement().median_us() < b.measurement().median_us();
  });
  return out;
}

std::string FormatBest(const std::vector<v1::TuningRecord>& records, const std::string& prefix) {
  if (records.empty()) return "";
  const v1::TuningRecord& r = records[0];
  const v1::Measurement& m = r.measurement();
  std::string chip = r.chip_type();
  if (!r.chip().model().empty()) chip += " (" + r.chip().model() + ")";
  std::string median = FormatMicros(m.median_us()) + " µs";
  if (m.p10_us() > 0 && m.p90_us() > 0)
    median += " (p10 " + FormatMicros(m.p10_us()) + ", p90 " + FormatMicros(m.p90_us()) + ")";
  std::string out =
      absl::StrCat("best known kernel of ", r.workload_key(), " on chip '", prefix, "':\n");
  std::vector<Row> rows = {{"chip type", chip},
                           {"median", median},
                           {"GFLOP/s", FormatFixed(Gflops(r), 1)},
                           {"job", r.job_id().empty() ? "-" : r.job_id()},
                           {"measured", FormatLocalTime(r.created_unix_ms())},
                           {"config", ConfigText(r.config())}};
  for (const Row& row : rows)
    out += "  " + row[0] + std::string(11 - row[0].size(), ' ') + row[1] + "\n";
  if (records.size() > 1) {
    out += "other chip types:\n";
    std::vector<Row> others;
    for (size_t i = 1; i < records.size(); ++i) {
      const v1::TuningRecord& o = records[i];
      others.push_back({o.chip_type(), FormatMicros(o.measurement().median_us()) + " µs",
                        FormatFixed(Gflops(o), 1) + " GFLOP/s", o.job_id()});
    }
    std::string table = FormatTable({"CHIP TYPE", "MEDIAN", "GFLOP/S", "JOB"}, others);
    for (size_t start = 0; start < table.size();) {  // indented like the lines above
      size_t end = table.find('\n', start);
      out += "  " + table.substr(start, end - start + 1);
      start = end == std::string::npos ? table.size() : end + 1;
    }
  }
  return out;
}

std::string BestJson(const v1::Workload& workload, const std::string& prefix,
                     const std::vector<v1::TuningRecord>& records) {
  nlohmann::ordered_json by_chip = nlohmann::ordered_json::array();
  for (const v1::TuningRecord& r : records) by_chip.push_back(RecordJson(r));
  return JsonText({{"workload", codegen::WorkloadKey(Normalized(workload))},
                   {"chip", prefix},
                   {"best", records.empty() ? nlohmann::ordered_json() : RecordJson(records[0])},
                   {"by_chip_type", by_chip}});
}

int RunBest(Client& client, const Invocation& inv, Io& io) {
  const v1::Workload& w = inv.spec.workload();
  auto records = BestPerChipType(client, w, inv.spec.chip());
  if (!records.ok()) return ReportError(records.status(), client.address(), io);
  if (inv.json) io.out << BestJson(w, inv.spec.chip(), *records) << "\n";
  if (records->empty()) {
    io.err << "kiln: " << NoneKnown(Normalized(w), inv.spec.chip()) << "\n";
    return 1;
  }
  if (!inv.json) io.out << FormatBest(*records, inv.spec.chip());
  return 0;
}

int RunExportBest(Client& client, const Invocation& inv, Io& io) {
  const v1::Workload w = Normalized(inv.spec.workload());
  auto records = BestPerChipType(client, w, inv.spec.chip());
  if (!records.ok()) return ReportError(records.status(), client.address(), io);
  if (records->empty()) {
    io.err << "kiln: " << NoneKnown(w, inv.spec.chip()) << "\n";
    return 1;
  }
  const v1::TuningRecord& best = records->front();
  if (best.job_id().empty()) {
    io.err << "kiln: the best known kernel of " << best.workload_key() << " on " << best.chip_type()
           << " names no job to export it from\n";
    return 1;
  }
  // The job's export, narrowed to this workload's kernel (a model job exports every operator).
  auto kernels = client.ExportKernels(best.job_id());
  if (!kernels.ok()) return ReportError(kernels.status(), client.address(), io);
  v1::ExportKernelsResponse one = *kernels;
  one.clear_kernels();
  for (const auto& k : kernels->kernels())
    if (k.workload_key() == best.workload_key()) *one.add_kernels() = k;
  if (one.kernels_size() == 0) {
    io.err << "kiln: job " << best.job_id() << " (the best known kernel's) exports no kernel of "
           << best.workload_key() << "\n";
    return 1;
  }
  io.err << "kiln: best known kernel of " << best.workload_key() << ": "
         << FormatMicros(best.measurement().median_us()) << " µs on " << best.chip_type()
         << ", from job " << best.job_id() << "\n";
  if (codegen::FromProto(one.kernels(0).config()) != codegen::FromProto(best.config()))
    io.err << "kiln: note: job " << best.job_id() << " exports "
           << ConfigText(one.kernels(0).config()) << ", its own best; the database's best is "
           << ConfigText(best.config()) << "\n";
  const std::string dir = inv.out.empty() ? DefaultExportDir(best.job_id()) : inv.out;
  auto manifest = WriteExport(one, dir);
  if (!manifest.ok()) {
    io.err << "kiln: " << manifest.status().message() << "\n";
    return 1;
  }
  io.out << (inv.json ? *manifest + "\n" : FormatExport(one, dir));
  return 0;
}

}  // namespace kiln::cli
