#include "hardware/cpu/cpu_device.h"

#include <dlfcn.h>

#include <mutex>
#include <optional>

#include "absl/strings/str_cat.h"
#include "codegen/cpu/op_templates.h"
#include "codegen/workload.h"
#include "hardware/cpu/baselines/baselines.h"
#include "hardware/cpu/fingerprint.h"
#include "hardware/cpu/gemm_harness.h"
#include "hardware/cpu/kernel_runtime.h"
#include "hardware/cpu/op_harness.h"
#include "hardware/cpu/step_runner.h"
#include "hardware/device_registry.h"
#include "hardware/toolchain.h"

namespace kiln::hardware {
namespace {

using KernelEntry = void (*)(int, int, int, const float*, const float*, float*);

v1::Measurement Failed(v1::MeasurementStatus status, std::string message) {
  v1::Measurement m;
  m.set_status(status);
  m.set_message(std::move(message));
  return m;
}

class CpuDevice final : public Device {
 public:
  // `toolchain` is found on first use when not given (a sandboxed child that only measures
  // never needs it).
  CpuDevice(v1::ChipFingerprint fp, std::optional<absl::StatusOr<Toolchain>> toolchain)
      : fp_(std::move(fp)) {
    if (toolchain) std::call_once(toolchain_once_, [&] { toolchain_ = std::move(*toolchain); });
  }

  const v1::ChipFingerprint& Fingerprint() const override { return fp_; }

  bool Supports(const v1::Workload& w) const override {
    return codegen::ValidateWorkload(w).ok() && codegen::FindTemplate(w, "cpu").ok();
  }

  absl::StatusOr<CompiledKernel> Compile(const codegen::Kernel& kernel) override {
    if (kernel.dialect != "cpp")
      return absl::InvalidArgumentError(
          absl::StrCat("cpu device compiles dialect 'cpp', not '", kernel.dialect, "'"));
    const absl::StatusOr<Toolchain>& toolchain = GetToolchain();
    if (!toolchain.ok()) return toolchain.status();
    CompileRequest req;
    req.source = kernel.source;
    req.defines = kernel.defines;
    // Every process that loads CPU kernels exports the thread-pool hook (kernel_runtime.cc),
    // so the kernel needs no fallback pool (codegen/cpu/templates/parallel.h).
    req.defines.emplace_back("KILN_RT_HOSTED", 1);
    const std::string hash = kernel.Hash();
    // The object depends on the compiler, its flags and (through -march=native) the chip too.
    const std::string build =
        HexHash(toolchain->Describe() + " -DKILN_RT_HOSTED" + fp_.model() + fp_.chip_type())
            .substr(0, 8);
    req.name = absl::StrCat(hash, "-", build);
    // Loading the precompiled prelude costs more than parsing light headers saves: only a
    // kernel that includes <immintrin.h> (whose parse dominates its compile) uses it.
    if (kernel.source.find("<immintrin.h>") != std::string::npos)
      req.prelude = absl::StrCat("prelude-", HexHash(PreludeSource()).substr(0, 8), "-", build);
    auto built = CompileCached(*toolchain, req);
    if (!built.ok()) return built.status();
    CompiledKernel out;
    out.artifact = built->path;
    out.entry = kernel.entry;
    out.source_hash = hash;
    out.toolchain = absl::StrCat(toolchain->Describe(), " -shared -fPIC -DKILN_RT_HOSTED=1");
    out.compile_seconds = built->seconds;
    return out;
  }

  v1::Measurement Measure(const v1::Workload& w, const CompiledKernel& kernel,
                          const MeasureOptions& opts) override {
    if (!Supports(w))
      return Failed(v1::UNSUPPORTED,
                    absl::StrCat("cpu device does not run ", codegen::WorkloadKey(w)));
    if (absl::Status host = CheckKernelHost(); !host.ok())
      return Failed(v1::CRASHED, std::string(host.message()));
    void* handle = dlopen(kernel.artifact.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle)
      return Failed(v1::COMPILE_ERROR,
                    absl::StrCat("cannot load ", kernel.artifact, ": ", dlerror()));
    auto entry = reinterpret_cast<KernelEntry>(dlsym(handle, kernel.entry.c_str()));
    if (!entry) {
      dlclose(handle);
      return Failed(v1::COMPILE_ERROR,
                    absl::StrCat("entry '", kernel.entry, "' not found in ", kernel.artifact));
    }
    if (kernel.entry == codegen::kCpuOpEntry) {  // the model operators' uniform ABI
      auto op = reinterpret_cast<codegen::CpuOpFn>(reinterpret_cast<void*>(entry));
      // An operator kernel that exports a prepack takes its weights (argument 1) packed.
      auto bytes =
          reinterpret_cast<long (*)(const long long*)>(dlsym(handle, codegen::kCpuOpPrepackBytes));
      auto pack = reinterpret_cast<void (*)(const long long*, const void*, void*)>(
          dlsym(handle, codegen::kCpuOpPrepack));
      OpPrepack prepack{1, bytes, pack};
      v1::Measurement m = MeasureOp(w, op, fp_, opts, bytes && pack ? &prepack : nullptr);
      m.set_compile_seconds(kernel.compile_seconds);
      dlclose(handle);
      return m;
    }
    // A kernel that exports a prepack takes its weights packed ahead of time.
    auto floats = reinterpret_cast<long (*)(int, int)>(dlsym(handle, "kiln_gemm_prepack_floats"));
    auto pack = reinterpret_cast<void (*)(int, int, const float*, float*)>(
        dlsym(handle, "kiln_gemm_prepack"));
    GemmPrepack prepack{floats, pack};
    v1::Measurement m = MeasureGemm(w, entry, fp_, opts, floats && pack ? &prepack : nullptr);
    m.set_compile_seconds(kernel.compile_seconds);
    dlclose(handle);
    return m;
  }

  std::string BaselineName(const v1::Workload& w) const override {
    return cpu_baselines::DefaultName(w);
  }

  // Every route a user could run instead (cpu/baselines/), each at 1 thread and at all cores with
  // one thread pool at a time, timed by the same harness as Kiln's kernels: the fastest's
  // measurement, with every route's figure listed.
  absl::StatusOr<v1::StepResult> MeasureStep(const v1::StepRequest& req, uint64_t seed) override {
    StepOptions opts;
    opts.seed = seed;
    return RunCpuStep(req, fp_, opts);
  }

  v1::Measurement MeasureBaseline(const v1::Workload& w, const MeasureOptions& opts) override {
    if (!Supports(w))
      return Failed(v1::UNSUPPORTED,
                    absl::StrCat("cpu device does not run ", codegen::WorkloadKey(w)));
    std::vector<int> counts = {1};
    if (fp_.cores() > 1) counts.push_back(fp_.cores());
    const std::vector<cpu_baselines::Route> routes = cpu_baselines::Routes(w, counts);
    if (routes.empty())
      return Failed(v1::UNSUPPORTED, "no baseline route for this workload in this executable");
    v1::Measurement best;
    std::vector<v1::BaselineRoute> all;
    bool matched = false;
    for (const auto& route : routes) {
      if (!opts.only_route.empty() && route.name != opts.only_route) continue;
      for (int t : route.threads) {
        if (opts.only_route_threads > 0 && t != opts.only_route_threads) continue;
        matched = true;
        cpu_baselines::QuietPools();
        v1::Measurement m = MeasureRoute(w, route, t, opts);
        v1::BaselineRoute& r = all.emplace_back();
        r.set_name(route.name);
        r.set_threads(t);
        r.set_dtype(route.dtype);
        r.set_status(m.status());
        r.set_message(m.message());
        r.set_median_us(m.median_us());
        *r.mutable_samples_us() = m.samples_us();
        r.set_prepack_us(m.prepack_us());
        const bool have_best = best.status() == v1::OK;
        if ((m.status() == v1::OK && (!have_best || m.median_us() < best.median_us())) ||
            best.status() == v1::STATUS_UNSPECIFIED)
          best = std::move(m);  // the first failure stands until a route succeeds
      }
    }
    if (!matched)
      return Failed(v1::UNSUPPORTED,
                    absl::StrCat("no baseline route '", opts.only_route.substr(0, 64), "' at ",
                                 opts.only_route_threads, " threads for this workload"));
    cpu_baselines::QuietPools();
    best.clear_baseline_routes();
    for (auto& r : all) *best.add_baseline_routes() = std::move(r);
    return best;
  }

 private:
  v1::Measurement MeasureRoute(const v1::Workload& w, const cpu_baselines::Route& route,
                               int threads, const MeasureOptions& opts) {
    auto call = route.prepare(threads);
    if (!call.ok()) return Failed(v1::UNSUPPORTED, std::string(call.status().message()));
    v1::Measurement m =
        call->gemm
            ? MeasureGemm(w, call->gemm, fp_, opts, call->gemm_pack ? &*call->gemm_pack : nullptr)
            : MeasureOp(w, call->op, fp_, opts, call->op_pack ? &*call->op_pack : nullptr);
    if (call->failed && !call->failed->ok())
      return Failed(v1::CRASHED, std::string(call->failed->message()));
    return m;
  }

  const absl::StatusOr<Toolchain>& GetToolchain() {
    std::call_once(toolchain_once_, [&] { toolchain_ = FindToolchain(); });
    return toolchain_;
  }

  v1::ChipFingerprint fp_;
  std::once_flag toolchain_once_;
  absl::StatusOr<Toolchain> toolchain_ = absl::UnknownError("toolchain not looked up yet");
};

}  // namespace

std::unique_ptr<Device> NewCpuDevice(const v1::ChipFingerprint* known) {
  if (known) return std::make_unique<CpuDevice>(*known, std::nullopt);
  absl::StatusOr<Toolchain> tc = FindToolchain();
  v1::ChipFingerprint fp = ProbeCpuFingerprint(tc.ok() ? &*tc : nullptr);
  return std::make_unique<CpuDevice>(std::move(fp), std::move(tc));
}

Backend CpuBackend() {
  return {"cpu", "cpu",
          [](const std::string& spec, const v1::ChipFingerprint* known)
              -> std::optional<absl::StatusOr<std::unique_ptr<Device>>> {
            if (spec != "cpu") return std::nullopt;
            return NewCpuDevice(known);
          }};
}

}  // namespace kiln::hardware
