#include "hardware/opencl/opencl_device.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "codegen/device_template.h"
#include "codegen/workload.h"
#include "common/status.h"
#include "hardware/device_registry.h"
#include "hardware/kernel_package.h"
#include "hardware/opencl/cl_fingerprint.h"
#include "hardware/opencl/cl_launch.h"
#include "hardware/operands.h"
#include "hardware/toolchain.h"

namespace kiln::hardware {
namespace {

constexpr char kBuildStd[] = "-cl-std=CL1.2";

v1::Measurement Failed(v1::MeasurementStatus status, std::string message) {
  v1::Measurement m;
  m.set_status(status);
  m.set_message(std::move(message));
  return m;
}

std::string BuildOptions(const codegen::Defines& defines) {
  std::string options = kBuildStd;
  for (const auto& [name, value] : defines) absl::StrAppend(&options, " -D", name, "=", value);
  return options;
}

class OpenClDevice final : public Device {
 public:
  OpenClDevice(std::unique_ptr<ClRuntime> rt, v1::ChipFingerprint fp)
      : rt_(std::move(rt)), fp_(std::move(fp)) {}

  const v1::ChipFingerprint& Fingerprint() const override { return fp_; }

  bool Supports(const v1::Workload& w) const override {
    auto layout = OperandsOf(w);
    if (!layout.ok() || !codegen::FindDeviceTemplate(w, "opencl").ok()) return false;
    for (size_t f : layout->floats)
      if (4.0 * f > rt_->info().max_alloc_bytes) return false;
    return layout->bytes() <= 0.5 * rt_->info().global_mem_bytes;
  }

  absl::StatusOr<CompiledKernel> Compile(const codegen::Kernel& kernel) override {
    if (kernel.dialect != "opencl")
      return absl::InvalidArgumentError(
          absl::StrCat("opencl device compiles dialect 'opencl', not '", kernel.dialect, "'"));
    const std::string hash = kernel.Hash();
    const std::string path = KernelCachePath(
        absl::StrCat(hash, "-", HexHash(fp_.model() + fp_.compiler()).substr(0, 8)), "clk");
    const auto start = std::chrono::steady_clock::now();
    // A package on disk was built successfully before (by a compile-ahead thread, or an
    // earlier job). Otherwise build here for the diagnostics; the runtime's own cache (PoCL's
    // kcache) makes the trial child's rebuild of the same source cheap.
    if (!ReadKernelPackage(path).ok()) {
      auto program = rt_->Build(kernel.source, BuildOptions(kernel.defines));
      if (!program.ok()) return program.status();
      RETURN_IF_ERROR(WriteKernelPackage(
          path, KernelPackage{kernel.dialect, kernel.entry, kernel.defines, kernel.source}));
    }
    CompiledKernel out;
    out.artifact = path;
    out.entry = kernel.entry;
    out.source_hash = hash;
    out.toolchain = absl::StrCat(fp_.compiler(), "; ", fp_.model(), "; ", kBuildStd);
    out.compile_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return out;
  }

  v1::Measurement Measure(const v1::Workload& w, const CompiledKernel& kernel,
                          const MeasureOptions& opts) override {
    if (!Supports(w))
      return Failed(v1::UNSUPPORTED,
                    absl::StrCat("opencl device does not run ", codegen::WorkloadKey(w)));
    auto package = ReadKernelPackage(kernel.artifact);
    if (!package.ok()) return Failed(v1::COMPILE_ERROR, std::string(package.status().message()));
    return MeasurePackage(w, package->payload, package->entry, package->defines, opts);
  }

  std::string BaselineName(const v1::Workload& w) const override {
    if (w.op() == v1::GEMM && HaveClBlast()) return "clblast-sgemm";
    auto t = codegen::FindDeviceTemplate(w, "opencl");
    return t.ok() ? absl::StrCat((*t)->name(), "-default-config") : "none";
  }

  v1::Measurement MeasureBaseline(const v1::Workload& w, const MeasureOptions& opts) override {
    if (!Supports(w))
      return Failed(v1::UNSUPPORTED,
                    absl::StrCat("opencl device does not run ", codegen::WorkloadKey(w)));
    if (w.op() == v1::GEMM && HaveClBlast()) return MeasureClBlastGemm(*rt_, w, fp_, opts);
    auto t = codegen::FindDeviceTemplate(w, "opencl");
    if (!t.ok()) return Failed(v1::UNSUPPORTED, std::string(t.status().message()));
    const codegen::ChipTraits traits = codegen::TraitsFromFingerprint(fp_);
    auto kernel = (*t)->Render(w, (*t)->DefaultConfig(w, traits), traits);
    if (!kernel.ok())
      return Failed(v1::UNSUPPORTED,
                    absl::StrCat("default configuration: ", kernel.status().message()));
    return MeasurePackage(w, kernel->source, kernel->entry, kernel->defines, opts);
  }

 private:
  v1::Measurement MeasurePackage(const v1::Workload& w, const std::string& source,
                                 const std::string& entry, const codegen::Defines& defines,
                                 const MeasureOptions& opts) {
    auto launch = codegen::LaunchFromDefines(defines);
    if (!launch.ok()) return Failed(v1::COMPILE_ERROR, std::string(launch.status().message()));
    auto program = rt_->Build(source, BuildOptions(defines));
    if (!program.ok()) return Failed(v1::COMPILE_ERROR, std::string(program.status().message()));
    auto k = rt_->Kernel(program->get(), entry);
    if (!k.ok()) return Failed(v1::COMPILE_ERROR, std::string(k.status().message()));
    return MeasureClKernel(*rt_, w, k->get(), *launch, fp_, opts);
  }

  std::unique_ptr<ClRuntime> rt_;
  v1::ChipFingerprint fp_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Device>> NewOpenClDevice(int index,
                                                        const v1::ChipFingerprint* known) {
  // The worker (not a trial child, which comes with `known`) warms CLBlast's kernels first:
  // forking must happen before this process starts the OpenCL runtime's threads.
  if (!known && HaveClBlast()) WarmClBlastInBackground(index);
  ASSIGN_OR_RETURN(std::unique_ptr<ClRuntime> rt, ClRuntime::Open(index));
  if (known) {
    if (known->model() != rt->info().name)
      return absl::FailedPreconditionError(absl::StrCat("opencl:", index, " is '", rt->info().name,
                                                        "', not the fingerprinted '",
                                                        known->model(), "'"));
    return std::unique_ptr<Device>(new OpenClDevice(std::move(rt), *known));
  }
  v1::ChipFingerprint fp = ProbeClFingerprint(*rt);
  return std::unique_ptr<Device>(new OpenClDevice(std::move(rt), std::move(fp)));
}

Backend OpenClBackend() { return IndexedBackend("opencl", NewOpenClDevice); }

}  // namespace kiln::hardware
