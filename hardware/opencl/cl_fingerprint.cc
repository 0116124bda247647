#include "hardware/opencl/cl_fingerprint.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "hardware/cpu/fingerprint.h"
#include "hardware/toolchain.h"

namespace kiln::hardware {
namespace {

constexpr char kProbeSource[] = R"CL(
__kernel void peak_flops(__global float* out, float a, float b) {
  float16 x0 = (float16)(get_global_id(0) * 1e-9f), x1 = x0 + 1.0f, x2 = x0 + 2.0f,
          x3 = x0 + 3.0f, x4 = x0 + 4.0f, x5 = x0 + 5.0f, x6 = x0 + 6.0f, x7 = x0 + 7.0f;
  for (int i = 0; i < PROBE_ITERS; ++i) {
    x0 = fma(x0, a, b); x1 = fma(x1, a, b); x2 = fma(x2, a, b); x3 = fma(x3, a, b);
    x4 = fma(x4, a, b); x5 = fma(x5, a, b); x6 = fma(x6, a, b); x7 = fma(x7, a, b);
  }
  float16 s = x0 + x1 + x2 + x3 + x4 + x5 + x6 + x7;
  out[get_global_id(0)] = s.s0 + s.s5 + s.sa + s.sf;
}
__kernel void read_bw(__global const float4* in, __global float* out, int n4) {
  float4 s = (float4)(0.0f);
  for (size_t i = get_global_id(0); i < (size_t)n4; i += get_global_size(0)) s += in[i];
  out[get_global_id(0)] = s.x + s.y + s.z + s.w;
}
)CL";
constexpr int kProbeIters = 2048;

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Best of three timed runs after a warm-up; 0 on any failure.
double BestSeconds(ClRuntime& rt, cl_kernel k, size_t global) {
  double best = 0;
  for (int i = 0; i < 4; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    if (!rt.Run(k, 1, &global, nullptr).ok()) return 0;
    double s = Seconds(t0);
    if (i > 0 && (best == 0 || s < best)) best = s;
  }
  return best;
}

void ProbePeaks(ClRuntime& rt, v1::ChipFingerprint* fp) {
  const ClDeviceInfo& info = rt.info();
  auto program = rt.Build(kProbeSource, absl::StrCat("-DPROBE_ITERS=", kProbeIters));
  if (!program.ok()) return;
  auto flops = rt.Kernel(program->get(), "peak_flops");
  auto bw = rt.Kernel(program->get(), "read_bw");
  if (!flops.ok() || !bw.ok()) return;
  const size_t items = size_t{info.compute_units} * 2048;
  auto out = rt.Alloc(items * sizeof(float));
  if (!out.ok()) return;
  cl_mem out_mem = out->get();
  const float a = 0.999f, b = 1e-3f;
  clSetKernelArg(flops->get(), 0, sizeof(cl_mem), &out_mem);
  clSetKernelArg(flops->get(), 1, sizeof(float), &a);
  clSetKernelArg(flops->get(), 2, sizeof(float), &b);
  if (double s = BestSeconds(rt, flops->get(), items); s > 0)
    fp->set_peak_gflops(items * kProbeIters * 8.0 * 16 * 2 / s / 1e9);
  const size_t bytes =
      std::min<cl_ulong>({info.max_alloc_bytes, info.global_mem_bytes / 4, cl_ulong{256} << 20}) /
      64 * 64;
  auto in = rt.Alloc(bytes);
  if (!in.ok()) return;
  std::vector<float> zeros(bytes / sizeof(float), 0.0f);
  if (!rt.Write(in->get(), zeros.data(), bytes).ok()) return;
  cl_mem in_mem = in->get();
  const int n4 = static_cast<int>(bytes / 16);
  clSetKernelArg(bw->get(), 0, sizeof(cl_mem), &in_mem);
  clSetKernelArg(bw->get(), 1, sizeof(cl_mem), &out_mem);
  clSetKernelArg(bw->get(), 2, sizeof(int), &n4);
  if (double s = BestSeconds(rt, bw->get(), items); s > 0)
    fp->set_read_gbytes_per_s(bytes / s / 1e9);
}

std::string PlatformShortName(const std::string& platform) {
  const std::string p = absl::AsciiStrToLower(platform);
  if (absl::StrContains(p, "portable computing language") || absl::StrContains(p, "pocl"))
    return "pocl";
  for (const char* known : {"nvidia", "amd", "intel", "rusticl", "clover", "apple", "arm"})
    if (absl::StrContains(p, known)) return known;
  std::string word = p.substr(0, p.find(' '));
  word.erase(
      std::remove_if(word.begin(), word.end(), [](char c) { return !absl::ascii_isalnum(c); }),
      word.end());
  return word.empty() ? "unknown" : word;
}

}  // namespace

std::string ClChipType(const ClDeviceInfo& info) {
  const char* type = (info.type & CL_DEVICE_TYPE_GPU)           ? "gpu"
                     : (info.type & CL_DEVICE_TYPE_CPU)         ? "cpu"
                     : (info.type & CL_DEVICE_TYPE_ACCELERATOR) ? "accel"
                                                                : "other";
  return absl::StrCat("opencl-", PlatformShortName(info.platform_name), "-", type);
}

v1::ChipFingerprint ProbeClFingerprint(ClRuntime& rt) {
  const ClDeviceInfo& info = rt.info();
  v1::ChipFingerprint fp;
  fp.set_kind("opencl");
  fp.set_vendor(info.vendor);
  fp.set_model(info.name);
  fp.set_chip_type(ClChipType(info));
  fp.set_cores(static_cast<int>(info.compute_units));
  fp.set_memory_bytes(static_cast<int64_t>(info.global_mem_bytes));
  fp.set_local_mem_bytes(static_cast<int64_t>(info.local_mem_bytes));
  fp.set_max_work_group_size(static_cast<int>(info.max_work_group_size));
  fp.set_l2_bytes(static_cast<int64_t>(info.cache_bytes));
  fp.set_compiler(
      absl::StrCat(info.platform_version, "; ", info.c_version, "; driver ", info.driver));
  for (absl::string_view ext : absl::StrSplit(info.extensions, ' ', absl::SkipEmpty()))
    if (ext == "cl_khr_fp64" || ext == "cl_khr_fp16" || ext == "cl_khr_subgroups" ||
        ext == "cl_intel_subgroups" || ext == "cl_khr_int64_base_atomics")
      fp.add_isa_features(std::string(ext));
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) == 0) fp.set_hostname(host);
  if (info.type & CL_DEVICE_TYPE_CPU) {
    absl::StatusOr<Toolchain> tc = FindToolchain();
    if (tc.ok()) {
      v1::ChipFingerprint cpu = ProbeCpuFingerprint(&*tc);
      fp.set_l1d_bytes(cpu.l1d_bytes());
      fp.set_l2_bytes(cpu.l2_bytes());
      fp.set_l3_bytes(cpu.l3_bytes());
      fp.set_peak_gflops(cpu.peak_gflops());
      fp.set_read_gbytes_per_s(cpu.read_gbytes_per_s());
      for (const auto& f : cpu.isa_features()) fp.add_isa_features(f);
      if (fp.peak_gflops() > 0) return fp;
    }
  }
  ProbePeaks(rt, &fp);
  return fp;
}

}  // namespace kiln::hardware
