// NVRTC and cuBLAS behind dlopen (declared in cuda_api.h).
#include <cublas_v2.h>
#include <dlfcn.h>
#include <nvrtc.h>

#include <mutex>

#include "absl/strings/str_cat.h"
#include "hardware/cuda/cuda_api.h"
#include "hardware/toolchain.h"

namespace kiln::hardware {
namespace {

void* OpenFirst(const std::vector<std::string>& names, std::string* errors) {
  for (const std::string& n : names) {
    if (void* h = dlopen(n.c_str(), RTLD_NOW | RTLD_GLOBAL)) return h;
    absl::StrAppend(errors, errors->empty() ? "" : "; ", dlerror());
  }
  return nullptr;
}

// The soname, then the toolkit's library folder this build saw, then the unversioned name.
std::vector<std::string> Candidates(const std::string& soname, const std::string& plain) {
  std::vector<std::string> names = {soname};
#ifdef KILN_CUDA_LIB_DIR
  names.push_back(absl::StrCat(KILN_CUDA_LIB_DIR, "/", soname));
  names.push_back(absl::StrCat(KILN_CUDA_LIB_DIR, "/", plain));
#endif
  names.push_back(plain);
  return names;
}

template <typename F>
bool Bind(void* lib, F* fn, const char* symbol) {
  *fn = reinterpret_cast<F>(dlsym(lib, symbol));
  return *fn != nullptr;
}

struct Nvrtc {
  decltype(&::nvrtcVersion) Version;
  decltype(&::nvrtcCreateProgram) CreateProgram;
  decltype(&::nvrtcCompileProgram) CompileProgram;
  decltype(&::nvrtcGetProgramLogSize) GetProgramLogSize;
  decltype(&::nvrtcGetProgramLog) GetProgramLog;
  decltype(&::nvrtcGetCUBINSize) GetCUBINSize;
  decltype(&::nvrtcGetCUBIN) GetCUBIN;
  decltype(&::nvrtcDestroyProgram) DestroyProgram;
  decltype(&::nvrtcGetErrorString) GetErrorString;
};

absl::StatusOr<const Nvrtc*> LoadNvrtc() {
  static const absl::StatusOr<const Nvrtc*>* loaded = [] {
    std::string errors;
    // NVRTC finds its builtins library by soname; loading it first from the toolkit's folder
    // makes that work without LD_LIBRARY_PATH.
    OpenFirst(Candidates("libnvrtc-builtins.so." + std::to_string(CUDA_VERSION / 1000) + "." +
                             std::to_string(CUDA_VERSION % 1000 / 10),
                         "libnvrtc-builtins.so"),
              &errors);
    errors.clear();
    void* lib = OpenFirst(
        Candidates("libnvrtc.so." + std::to_string(CUDA_VERSION / 1000), "libnvrtc.so"), &errors);
    if (!lib)
      return new absl::StatusOr<const Nvrtc*>(absl::UnavailableError("no NVRTC: " + errors));
    static Nvrtc n;
    bool ok = Bind(lib, &n.Version, "nvrtcVersion") &&
              Bind(lib, &n.CreateProgram, "nvrtcCreateProgram") &&
              Bind(lib, &n.CompileProgram, "nvrtcCompileProgram") &&
              Bind(lib, &n.GetProgramLogSize, "nvrtcGetProgramLogSize") &&
              Bind(lib, &n.GetProgramLog, "nvrtcGetProgramLog") &&
              Bind(lib, &n.GetCUBINSize, "nvrtcGetCUBINSize") &&
              Bind(lib, &n.GetCUBIN, "nvrtcGetCUBIN") &&
              Bind(lib, &n.DestroyProgram, "nvrtcDestroyProgram") &&
              Bind(lib, &n.GetErrorString, "nvrtcGetErrorString");
    if (!ok)
      return new absl::StatusOr<const Nvrtc*>(absl::UnavailableError("libnvrtc lacks symbols"));
    return new absl::StatusOr<const Nvrtc*>(&n);
  }();
  return *loaded;
}

struct Cublas {
  decltype(&::cublasCreate_v2) Create;
  decltype(&::cublasSgemm_v2) Sgemm;
  cublasHandle_t handle = nullptr;
};

}  // namespace

absl::StatusOr<std::string> NvrtcVersion() {
  auto nv = LoadNvrtc();
  if (!nv.ok()) return nv.status();
  int major = 0, minor = 0;
  (*nv)->Version(&major, &minor);
  return absl::StrCat("nvrtc ", major, ".", minor);
}

absl::StatusOr<std::string> NvrtcCompile(
    const std::string& source, const std::string& name,
    const std::vector<std::pair<std::string, int64_t>>& defines, int arch) {
  auto loaded = LoadNvrtc();
  if (!loaded.ok()) return loaded.status();
  const Nvrtc& nv = **loaded;
  nvrtcProgram prog = nullptr;
  nvrtcResult r = nv.CreateProgram(&prog, source.c_str(), name.c_str(), 0, nullptr, nullptr);
  if (r != NVRTC_SUCCESS)
    return absl::InternalError(absl::StrCat("nvrtcCreateProgram: ", nv.GetErrorString(r)));
  std::vector<std::string> opts = {absl::StrCat("--gpu-architecture=sm_", arch), "--std=c++17",
                                   "-default-device"};
  for (const auto& [n, v] : defines) opts.push_back(absl::StrCat("-D", n, "=", v));
  std::vector<const char*> argv;
  for (const auto& o : opts) argv.push_back(o.c_str());
  r = nv.CompileProgram(prog, static_cast<int>(argv.size()), argv.data());
  size_t log_size = 0;
  nv.GetProgramLogSize(prog, &log_size);
  std::string log(log_size, '\0');
  if (log_size) nv.GetProgramLog(prog, log.data());
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  absl::StatusOr<std::string> out = absl::InvalidArgumentError(
      absl::StrCat("NVRTC compile failed (", nv.GetErrorString(r), "): ", Tail(log, 4000)));
  if (r == NVRTC_SUCCESS) {
    size_t n = 0;
    nv.GetCUBINSize(prog, &n);
    std::string cubin(n, '\0');
    nv.GetCUBIN(prog, cubin.data());
    out = std::move(cubin);
  }
  nv.DestroyProgram(&prog);
  return out;
}

absl::Status CublasSgemm(int M, int N, int K, CUdeviceptr A, CUdeviceptr B, CUdeviceptr C) {
  static Cublas* blas = nullptr;
  static std::string load_error;
  static std::once_flag once;
  std::call_once(once, [] {
    void* lib =
        OpenFirst(Candidates("libcublas.so." + std::to_string(CUBLAS_VER_MAJOR), "libcublas.so"),
                  &load_error);
    if (!lib) return;
    auto* b = new Cublas;
    if (!Bind(lib, &b->Create, "cublasCreate_v2") || !Bind(lib, &b->Sgemm, "cublasSgemm_v2")) {
      load_error = "libcublas lacks cublasCreate_v2 / cublasSgemm_v2";
      return;
    }
    cublasStatus_t s = b->Create(&b->handle);
    if (s != CUBLAS_STATUS_SUCCESS) {
      load_error = absl::StrCat("cublasCreate: status ", s);
      return;
    }
    blas = b;
  });
  if (!blas) return absl::UnavailableError("cuBLAS: " + load_error);
  // Row-major C = A*B is column-major C^T = B^T * A^T: swap the operands, no transposes.
  const float alpha = 1.0f, beta = 0.0f;
  cublasStatus_t s = blas->Sgemm(
      blas->handle, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &alpha, reinterpret_cast<const float*>(B), N,
      reinterpret_cast<const float*>(A), K, &beta, reinterpret_cast<float*>(C), N);
  if (s != CUBLAS_STATUS_SUCCESS)
    return absl::InternalError(absl::StrCat("cublasSgemm: status ", s));
  return absl::OkStatus();
}

}  // namespace kiln::hardware
