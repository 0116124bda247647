#include "hardware/cuda/cuda_device.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "codegen/device_template.h"
#include "codegen/workload.h"
#include "common/status.h"
#include "hardware/cuda/cuda_api.h"
#include "hardware/device_registry.h"
#include "hardware/kernel_package.h"
#include "hardware/operands.h"
#include "hardware/toolchain.h"

namespace kiln::hardware {
namespace {

v1::Measurement Failed(v1::MeasurementStatus status, std::string message) {
  v1::Measurement m;
  m.set_status(status);
  m.set_message(std::move(message));
  return m;
}

int Attr(const CudaDriver& cu, CUdevice dev, CUdevice_attribute a) {
  int v = 0;
  cu.DeviceGetAttribute(&v, a, dev);
  return v;
}

v1::ChipFingerprint CudaFingerprint(const CudaDriver& cu, CUdevice dev) {
  v1::ChipFingerprint fp;
  char name[256] = {0};
  cu.DeviceGetName(name, sizeof(name) - 1, dev);
  const int major = Attr(cu, dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  const int minor = Attr(cu, dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  const int sms = Attr(cu, dev, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  size_t mem = 0;
  cu.DeviceTotalMem(&mem, dev);
  int driver = 0;
  cu.DriverGetVersion(&driver);
  fp.set_kind("cuda");
  fp.set_vendor("NVIDIA");
  fp.set_model(name);
  fp.set_chip_type(absl::StrCat("cuda-sm", major, minor));
  fp.add_isa_features(absl::StrCat("sm_", major, minor));
  fp.set_cores(sms);
  fp.set_l2_bytes(Attr(cu, dev, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE));
  fp.set_memory_bytes(static_cast<int64_t>(mem));
  fp.set_local_mem_bytes(Attr(cu, dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK));
  fp.set_max_work_group_size(Attr(cu, dev, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK));
  // Theoretical peaks (upper bounds, so the roofline guard never flags a real result): FP32
  // lanes per SM x 2 flops x clock; DDR memory clock x bus width.
  const int lanes = (major == 8 && minor == 0) || major < 8 ? 64 : 128;
  fp.set_peak_gflops(2.0 * lanes * sms * Attr(cu, dev, CU_DEVICE_ATTRIBUTE_CLOCK_RATE) / 1e6);
  fp.set_read_gbytes_per_s(2.0 * Attr(cu, dev, CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE) * 1e3 *
                           Attr(cu, dev, CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH) / 8 / 1e9);
  auto nvrtc = NvrtcVersion();
  fp.set_compiler(absl::StrCat(nvrtc.ok() ? *nvrtc : "no nvrtc", "; driver ", driver / 1000, ".",
                               driver % 1000 / 10));
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) == 0) fp.set_hostname(host);
  return fp;
}

class CudaDevice final : public Device {
 public:
  CudaDevice(const CudaDriver& cu, v1::ChipFingerprint fp) : cu_(cu), fp_(std::move(fp)) {}

  const v1::ChipFingerprint& Fingerprint() const override { return fp_; }

  bool Supports(const v1::Workload& w) const override {
    auto layout = OperandsOf(w);
    return layout.ok() && codegen::FindDeviceTemplate(w, "cuda").ok() &&
           layout->bytes() <= 0.5 * fp_.memory_bytes();
  }

  absl::StatusOr<CompiledKernel> Compile(const codegen::Kernel& kernel) override {
    if (kernel.dialect != "cuda")
      return absl::InvalidArgumentError(
          absl::StrCat("cuda device compiles dialect 'cuda', not '", kernel.dialect, "'"));
    const auto start = std::chrono::steady_clock::now();
    const int arch = CudaArch(fp_);
    const std::string hash = kernel.Hash();
    const std::string path = KernelCachePath(
        absl::StrCat(hash, "-sm", arch, "-", HexHash(fp_.compiler()).substr(0, 8)), "cubin-pkg");
    if (!ReadKernelPackage(path).ok()) {  // otherwise compiled before (e.g. compile-ahead)
      ASSIGN_OR_RETURN(std::string cubin,
                       NvrtcCompile(kernel.source, kernel.entry + ".cu", kernel.defines, arch));
      RETURN_IF_ERROR(WriteKernelPackage(
          path, KernelPackage{kernel.dialect, kernel.entry, kernel.defines, std::move(cubin)}));
    }
    CompiledKernel out;
    out.artifact = path;
    out.entry = kernel.entry;
    out.source_hash = hash;
    out.toolchain = absl::StrCat(fp_.compiler(), " --gpu-architecture=sm_", arch, " --std=c++17");
    out.compile_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return out;
  }

  v1::Measurement Measure(const v1::Workload& w, const CompiledKernel& kernel,
                          const MeasureOptions& opts) override {
    if (!Supports(w))
      return Failed(v1::UNSUPPORTED,
                    absl::StrCat("cuda device does not run ", codegen::WorkloadKey(w)));
    auto package = ReadKernelPackage(kernel.artifact);
    if (!package.ok()) return Failed(v1::COMPILE_ERROR, std::string(package.status().message()));
    return MeasureCubin(w, package->payload, package->entry, package->defines, opts);
  }

  std::string BaselineName(const v1::Workload& w) const override {
    if (w.op() == v1::GEMM) return "cublas-sgemm";
    auto t = codegen::FindDeviceTemplate(w, "cuda");
    return t.ok() ? absl::StrCat((*t)->name(), "-default-config") : "none";
  }

  v1::Measurement MeasureBaseline(const v1::Workload& w, const MeasureOptions& opts) override {
    if (!Supports(w))
      return Failed(v1::UNSUPPORTED,
                    absl::StrCat("cuda device does not run ", codegen::WorkloadKey(w)));
    if (w.op() == v1::GEMM) {
      const int M = w.dims().at("M"), N = w.dims().at("N"), K = w.dims().at("K");
      return Run(w, opts, [&](const std::vector<CUdeviceptr>& a) {
        return CublasSgemm(M, N, K, a[0], a[1], a[2]);
      });
    }
    auto t = codegen::FindDeviceTemplate(w, "cuda");
    if (!t.ok()) return Failed(v1::UNSUPPORTED, std::string(t.status().message()));
    const codegen::ChipTraits traits = codegen::TraitsFromFingerprint(fp_);
    auto kernel = (*t)->Render(w, (*t)->DefaultConfig(w, traits), traits);
    if (!kernel.ok())
      return Failed(v1::UNSUPPORTED,
                    absl::StrCat("default configuration: ", kernel.status().message()));
    auto cubin =
        NvrtcCompile(kernel->source, kernel->entry + ".cu", kernel->defines, CudaArch(fp_));
    if (!cubin.ok()) return Failed(v1::COMPILE_ERROR, std::string(cubin.status().message()));
    return MeasureCubin(w, *cubin, kernel->entry, kernel->defines, opts);
  }

 private:
  v1::Measurement MeasureCubin(const v1::Workload& w, const std::string& cubin,
                               const std::string& entry, const codegen::Defines& defines,
                               const MeasureOptions& opts) {
    auto launch = codegen::LaunchFromDefines(defines);
    if (!launch.ok()) return Failed(v1::COMPILE_ERROR, std::string(launch.status().message()));
    CUmodule module = nullptr;
    if (auto s = CuStatus(cu_, cu_.ModuleLoadData(&module, cubin.data()), "cuModuleLoadData");
        !s.ok())
      return Failed(v1::COMPILE_ERROR, std::string(s.message()));
    CUfunction fn = nullptr;
    v1::Measurement m;
    if (auto s =
            CuStatus(cu_, cu_.ModuleGetFunction(&fn, module, entry.c_str()), "cuModuleGetFunction");
        !s.ok()) {
      m = Failed(v1::COMPILE_ERROR, std::string(s.message()));
    } else {
      unsigned grid[3], block[3];
      for (int i = 0; i < 3; ++i) {
        block[i] = static_cast<unsigned>(launch->local[i]);
        grid[i] = static_cast<unsigned>(launch->global[i] / launch->local[i]);
      }
      int max_threads = 0;
      cu_.FuncGetAttribute(&max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, fn);
      const unsigned threads = block[0] * block[1] * block[2];
      if (max_threads > 0 && threads > static_cast<unsigned>(max_threads)) {
        m = Failed(v1::UNSUPPORTED, absl::StrCat("the compiled kernel allows ", max_threads,
                                                 " threads per block; the launch needs ", threads));
      } else {
        m = Run(w, opts, [&](const std::vector<CUdeviceptr>& a) {
          std::vector<void*> params;
          for (const CUdeviceptr& p : a) params.push_back(const_cast<CUdeviceptr*>(&p));
          return CuStatus(cu_,
                          cu_.LaunchKernel(fn, grid[0], grid[1], grid[2], block[0], block[1],
                                           block[2], 0, nullptr, params.data(), nullptr),
                          "cuLaunchKernel");
        });
      }
    }
    cu_.ModuleUnload(module);
    return m;
  }

  // The operands in device memory behind MeasureOnDevice, each run bracketed by CUDA events
  // on the legacy default stream (so multi-kernel baselines are timed whole).
  v1::Measurement Run(const v1::Workload& w, const MeasureOptions& opts,
                      const std::function<absl::Status(const std::vector<CUdeviceptr>&)>& launch) {
    auto layout = OperandsOf(w);
    if (!layout.ok()) return Failed(v1::UNSUPPORTED, std::string(layout.status().message()));
    std::vector<std::vector<CUdeviceptr>> sets;
    std::vector<double> device_us;
    CUevent start = nullptr, stop = nullptr;
    cu_.EventCreate(&start, CU_EVENT_DEFAULT);
    cu_.EventCreate(&stop, CU_EVENT_DEFAULT);
    DeviceOperands dev;
    dev.allocate = [&](int n) -> absl::Status {
      sets.resize(n);
      for (auto& set : sets)
        for (size_t floats : layout->floats) {
          CUdeviceptr p = 0;
          RETURN_IF_ERROR(
              CuStatus(cu_, cu_.MemAlloc(&p, std::max<size_t>(4, floats * 4)), "cuMemAlloc"));
          set.push_back(p);
        }
      return absl::OkStatus();
    };
    dev.upload = [&](int set, int operand, const float* data) {
      return CuStatus(cu_, cu_.MemcpyHtoD(sets[set][operand], data, layout->floats[operand] * 4),
                      "cuMemcpyHtoD");
    };
    dev.download_output = [&](int set, float* out) {
      return CuStatus(cu_, cu_.MemcpyDtoH(out, sets[set].back(), layout->floats.back() * 4),
                      "cuMemcpyDtoH");
    };
    dev.run = [&](int set) -> absl::Status {
      RETURN_IF_ERROR(CuStatus(cu_, cu_.EventRecord(start, nullptr), "cuEventRecord"));
      RETURN_IF_ERROR(launch(sets[set]));
      RETURN_IF_ERROR(CuStatus(cu_, cu_.EventRecord(stop, nullptr), "cuEventRecord"));
      RETURN_IF_ERROR(CuStatus(cu_, cu_.EventSynchronize(stop), "kernel execution"));
      float ms = 0;
      cu_.EventElapsedTime(&ms, start, stop);
      device_us.push_back(ms * 1e3);
      return absl::OkStatus();
    };
    dev.device_samples_us = [&] { return device_us; };
    v1::Measurement m = MeasureOnDevice(w, dev, fp_, opts);
    for (auto& set : sets)
      for (CUdeviceptr p : set) cu_.MemFree(p);
    cu_.EventDestroy(start);
    cu_.EventDestroy(stop);
    return m;
  }

  const CudaDriver& cu_;
  v1::ChipFingerprint fp_;
};

}  // namespace

int CudaArch(const v1::ChipFingerprint& chip) {
  for (const auto& f : chip.isa_features()) {
    int arch = 0;
    if (absl::StartsWith(f, "sm_") && absl::SimpleAtoi(f.substr(3), &arch)) return arch;
  }
  return 0;
}

absl::StatusOr<std::unique_ptr<Device>> NewCudaDevice(int index, const v1::ChipFingerprint* known) {
  ASSIGN_OR_RETURN(const CudaDriver* cu, LoadCudaDriver());
  CUdevice dev = 0;
  RETURN_IF_ERROR(
      CuStatus(*cu, cu->DeviceGet(&dev, index), absl::StrCat("cuDeviceGet(", index, ")")));
  CUcontext ctx = nullptr;
  RETURN_IF_ERROR(CuStatus(*cu, cu->DevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain"));
  RETURN_IF_ERROR(CuStatus(*cu, cu->CtxSetCurrent(ctx), "cuCtxSetCurrent"));
  if (known) {
    char name[256] = {0};
    cu->DeviceGetName(name, sizeof(name) - 1, dev);
    if (known->model() != name)
      return absl::FailedPreconditionError(absl::StrCat(
          "cuda:", index, " is '", name, "', not the fingerprinted '", known->model(), "'"));
    return std::unique_ptr<Device>(new CudaDevice(*cu, *known));
  }
  return std::unique_ptr<Device>(new CudaDevice(*cu, CudaFingerprint(*cu, dev)));
}

Backend CudaBackend() { return IndexedBackend("cuda", NewCudaDevice); }

}  // namespace kiln::hardware
