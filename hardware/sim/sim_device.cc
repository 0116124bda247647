#include "hardware/sim/sim_device.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <map>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "codegen/device_template.h"
#include "codegen/sim/sim_templates.h"
#include "codegen/workload.h"
#include "hardware/buffers.h"
#include "hardware/device_registry.h"
#include "hardware/measure.h"
#include "hardware/reference/gemm_reference.h"
#include "hardware/sim/systolic_model.h"

namespace kiln::hardware {
namespace {

constexpr char kModel[] = "kiln systolic-array model v1 (SCALE-Sim fold latency)";
constexpr char kArtifactPrefix[] = "sim-mapping:";
constexpr double kMaxVerifyMacs = double{1 << 22};
const char* const kDataflow[] = {"output-stationary", "weight-stationary", "input-stationary"};
const char* const kOrder[] = {"mnk", "nmk", "mkn", "kmn", "nkm", "knm"};

v1::Measurement Failed(v1::MeasurementStatus status, std::string message) {
  v1::Measurement m;
  m.set_status(status);
  m.set_message(std::move(message));
  return m;
}

v1::ChipFingerprint SimFingerprint(const SystolicArray& a) {
  v1::ChipFingerprint fp;
  fp.set_kind("sim");
  fp.set_vendor("simulated");
  fp.set_model(absl::StrCat("simulated systolic array ", a.rows, "x", a.cols, " PEs, ",
                            a.sram_bytes >> 10, " KiB SRAM, ", a.bandwidth_gbs, " GB/s, ",
                            a.clock_mhz, " MHz"));
  fp.set_chip_type("sim-" + a.Name());
  fp.set_cores(a.rows * a.cols);
  fp.set_l2_bytes(a.sram_bytes);
  fp.set_peak_gflops(2.0 * a.rows * a.cols * a.clock_mhz / 1e3);
  fp.set_read_gbytes_per_s(a.bandwidth_gbs);
  fp.set_compiler(kModel);
  for (const char* f : {"dataflow-os", "dataflow-ws", "dataflow-is"}) fp.add_isa_features(f);
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) == 0) fp.set_hostname(host);
  return fp;
}

// Executes the mapping's tile loop nest on real data (fp32 partial sums through "SRAM"), with
// the output pre-filled with NaN, and checks it against the reference: the figures are of a
// computation that covers every element exactly once per K slice.
GemmCheck VerifyMapping(const SystolicArray& a, int M, int N, int K, const GemmMapping& map,
                        uint64_t seed) {
  std::vector<float> A(size_t{1} * M * K), B(size_t{1} * K * N), C(size_t{1} * M * N);
  FillUniform(A.data(), A.size(), seed * 2 + 1);
  FillUniform(B.data(), B.size(), seed * 2 + 1 + 0x5eed);
  FillNaN(C.data(), C.size());
  SimulateGemm(a, M, N, K, map, 4,
               [&](int64_t m0, int64_t n0, int64_t k0, int64_t tm, int64_t tn, int64_t tk) {
                 for (int64_t i = m0; i < m0 + tm; ++i) {
                   float* c = C.data() + i * N;
                   if (k0 == 0)
                     for (int64_t j = n0; j < n0 + tn; ++j) c[j] = 0;
                   for (int64_t k = k0; k < k0 + tk; ++k) {
                     const float av = A[i * K + k];
                     const float* b = B.data() + k * N;
                     for (int64_t j = n0; j < n0 + tn; ++j) c[j] += av * b[j];
                   }
                 }
               });
  return CheckGemm(M, N, K, A.data(), B.data(), C.data());
}

class SimDevice final : public Device {
 public:
  SimDevice(SystolicArray array, v1::ChipFingerprint fp) : array_(array), fp_(std::move(fp)) {}

  const v1::ChipFingerprint& Fingerprint() const override { return fp_; }

  bool Supports(const v1::Workload& w) const override {
    return codegen::FindDeviceTemplate(w, "sim").ok();
  }

  absl::StatusOr<CompiledKernel> Compile(const codegen::Kernel& kernel) override {
    if (kernel.dialect != "sim")
      return absl::InvalidArgumentError(
          absl::StrCat("sim device runs dialect 'sim', not '", kernel.dialect, "'"));
    CompiledKernel out;
    out.artifact = kArtifactPrefix;  // the mapping itself: nothing to build
    for (const auto& [name, value] : kernel.defines)
      absl::StrAppend(&out.artifact, name, "=", value, ",");
    out.entry = kernel.entry;
    out.source_hash = kernel.Hash();
    out.toolchain = kModel;
    return out;
  }

  v1::Measurement Measure(const v1::Workload& w, const CompiledKernel& kernel,
                          const MeasureOptions& opts) override {
    absl::string_view text = kernel.artifact;
    if (!absl::ConsumePrefix(&text, kArtifactPrefix))
      return Failed(v1::COMPILE_ERROR, absl::StrCat("not a sim mapping: ", kernel.artifact));
    codegen::Config config;
    for (absl::string_view kv : absl::StrSplit(text, ',', absl::SkipEmpty())) {
      std::vector<std::string> p = absl::StrSplit(kv, '=');
      int64_t v = 0;
      if (p.size() != 2 || !absl::SimpleAtoi(p[1], &v))
        return Failed(v1::COMPILE_ERROR, absl::StrCat("bad sim mapping entry '", kv, "'"));
      config[p[0]] = v;
    }
    auto map = GemmMapping::FromConfig(config);
    if (!map.ok()) return Failed(v1::COMPILE_ERROR, std::string(map.status().message()));
    return Simulate(w, *map, opts);
  }

  std::string BaselineName(const v1::Workload&) const override { return "sim-default-mapping"; }

  v1::Measurement MeasureBaseline(const v1::Workload& w, const MeasureOptions& opts) override {
    auto t = codegen::FindDeviceTemplate(w, "sim");
    if (!t.ok()) return Failed(v1::UNSUPPORTED, std::string(t.status().message()));
    codegen::Config c = (*t)->DefaultConfig(w, codegen::TraitsFromFingerprint(fp_));
    for (const char* k : {"TK", "TN", "TM"})  // shrink until it fits a small SRAM
      while (codegen::SimSramBytes(c) > array_.sram_bytes && c[k] > 16) c[k] /= 2;
    auto map = GemmMapping::FromConfig(c);
    if (!map.ok()) return Failed(v1::UNSUPPORTED, std::string(map.status().message()));
    return Simulate(w, *map, opts);
  }

 private:
  v1::Measurement Simulate(const v1::Workload& w, const GemmMapping& map,
                           const MeasureOptions& opts) {
    const auto start = std::chrono::steady_clock::now();
    if (!Supports(w))
      return Failed(v1::UNSUPPORTED,
                    absl::StrCat("sim device does not run ", codegen::WorkloadKey(w)));
    const int64_t M = w.dims().at("M"), N = w.dims().at("N"), K = w.dims().at("K");
    v1::Measurement m;
    if (std::string e = CheckTileCoverage(M, N, K, GemmTiles(array_, M, N, K, map)); !e.empty())
      return Failed(v1::WRONG_RESULT, "simulated mapping: " + e);
    std::string verified = "mapping's coverage proven";
    // Small problems also run the nest on data (a check of the check); larger ones would spend
    // far longer on it than on the simulation, for nothing the coverage proof leaves open.
    if (1.0 * M * N * K <= kMaxVerifyMacs) {
      GemmCheck check = VerifyMapping(array_, M, N, K, map, opts.seed);
      if (!check.ok) return Failed(v1::WRONG_RESULT, "simulated: " + check.message);
      m.set_max_error(check.max_error);
      verified = "mapping's coverage proven and verified on data";
    }
    const SimResult r = SimulateGemm(array_, M, N, K, map);
    m.set_status(v1::OK);
    m.add_samples_us(r.microseconds(array_));
    Summarize(&m);
    m.set_cache_mode("cold");
    m.set_message(absl::StrCat(
        "simulated: ", array_.Name(), " at ", array_.clock_mhz, " MHz; ", kDataflow[map.dataflow],
        ", tiles ", map.tm, "x", map.tn, "x", map.tk, " ", kOrder[map.order],
        map.double_buffer ? ", double-buffered" : "", "; ", std::llround(r.cycles), " cycles (",
        std::llround(r.compute_cycles), " compute, ", std::llround(r.stall_cycles),
        " memory stall), ", r.dram_bytes / 1e6, " MB off-chip, PE utilization ",
        std::round(r.utilization * 1000) / 10, "%; ", verified));
    FillThroughput(w, &m);
    ApplyRooflineGuard(w, fp_, /*warm=*/false, &m);
    m.set_measure_seconds(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    return m;
  }

  SystolicArray array_;
  v1::ChipFingerprint fp_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Device>> NewSimDevice(const std::string& name,
                                                     const v1::ChipFingerprint* known) {
  auto array = ParseSystolicName(name);
  if (!array.ok()) return array.status();
  v1::ChipFingerprint fp = SimFingerprint(*array);
  if (known && known->chip_type() != fp.chip_type())
    return absl::FailedPreconditionError(absl::StrCat(
        "sim:", name, " is ", fp.chip_type(), ", not the fingerprinted ", known->chip_type()));
  if (known) fp = *known;
  return std::unique_ptr<Device>(new SimDevice(*array, std::move(fp)));
}

Backend SimBackend() {
  return {"sim", "sim:NAME",
          [](const std::string& spec, const v1::ChipFingerprint* known)
              -> std::optional<absl::StatusOr<std::unique_ptr<Device>>> {
            if (spec.rfind("sim:", 0) != 0) return std::nullopt;
            return NewSimDevice(spec.substr(4), known);
          }};
}

}  // namespace kiln::hardware
