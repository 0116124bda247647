// Kernel micro-benchmarks on Google Benchmark: every operator of the operator table at a decode
// shape, as the CPU backend compiles it (the safe default configuration, or the knob values
// given with --config), called hot in a fixed-iteration loop. Before timing, each kernel is
// verified once by its operator's case (hardware/op_cases.h): a wrong kernel is reported as an
// error, never timed. Counters: FLOP/s and bytes/s from the table's counts.
//
// This is the quick, hot, one-kernel view (a change to a template, A/B'd with farm-bench); the
// published comparisons with the vendor libraries use kiln-bench-kernels, which times cold, over
// rotating operands, against every route a user could run.
//
//   build/bench/kiln-bench-ops [--benchmark_filter=gemm] [--benchmark_format=json]
//                              [--config KNOB=V,KNOB=V] [--dtype fp32|bf16|int8|int4]
#include <benchmark/benchmark.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "codegen/cpu/op_templates.h"
#include "codegen/kernel_template.h"
#include "codegen/knob_space.h"
#include "codegen/workload.h"
#include "common/flags.h"
#include "hardware/cpu/cpu_device.h"
#include "hardware/op_cases.h"

namespace {

using namespace kiln;

// Decode-time shapes of a Llama-class 1B model (and a Mamba layer for the scan and convolution).
constexpr const char* kShapes[][2] = {
    {"gemm", "M=1,N=2048,K=2048"},
    {"gemm", "M=1,N=5632,K=2048"},
    {"rmsnorm", "T=1,D=2048"},
    {"rope", "T=1,H=32,D=64"},
    {"attention_decode", "B=1,H=32,KVH=4,D=64,L=1024"},
    {"attention_prefill", "B=1,H=32,KVH=4,D=64,S=128"},
    {"softmax", "T=1,N=32000"},
    {"swiglu", "T=1,F=5632"},
    {"moe_router", "T=1,D=2048,E=8,TOPK=2"},
    {"moe_gemm", "T=1,E=8,TOPK=2,N=1408,K=2048"},
    {"ssm_scan", "B=1,T=1,D=1536,S=16"},
    {"conv1d", "B=1,T=1,D=1536,W=4"},
};

std::string g_config;  // --config: knob values replacing the safe default's
std::string g_dtype = "fp32";

// One compiled, loaded and verified kernel with its arguments, ready to call.
struct Loaded {
  void* handle = nullptr;
  std::function<void()> call;
  std::vector<std::unique_ptr<float[]>> buffers;
  ~Loaded() {
    if (handle) dlclose(handle);
  }
};

// Compiles `w` on `device` and loads it with filled arguments; "" or why it cannot run.
std::string Load(hardware::Device& device, const v1::Workload& w, Loaded* out) {
  const v1::ChipFingerprint& chip = device.Fingerprint();
  auto space = codegen::SpaceFor(w, chip);
  if (!space.ok()) return std::string(space.status().message());
  codegen::Config config = codegen::SafeDefaultConfig(*space);
  for (absl::string_view kv : absl::StrSplit(g_config, ',', absl::SkipEmpty())) {
    std::pair<std::string, std::string> p = absl::StrSplit(kv, '=');
    int64_t v;
    if (!absl::SimpleAtoi(p.second, &v)) return "--config: expected KNOB=INTEGER, got " + p.first;
    if (config.count(p.first)) config[p.first] = v;  // knobs of other operators are ignored
  }
  if (!space->IsValid(config)) return "--config: not a valid configuration of this space";
  auto kernel = codegen::RenderFor(w, chip, config);
  if (!kernel.ok()) return std::string(kernel.status().message());
  auto compiled = device.Compile(*kernel);
  if (!compiled.ok()) return std::string(compiled.status().message());
  out->handle = dlopen(compiled->artifact.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!out->handle) return dlerror();
  void* entry = dlsym(out->handle, compiled->entry.c_str());
  if (!entry) return "no entry " + compiled->entry;

  auto made = hardware::MakeOpCase(w);
  if (!made.ok()) return std::string(made.status().message());
  auto c = std::make_shared<hardware::OpCase>(std::move(*made));
  std::vector<void*> args, initial;
  for (size_t i = 0; i < c->args.size(); ++i) {
    const size_t floats = (c->args[i].Bytes() + 3) / 4 + 16;
    out->buffers.emplace_back(new float[floats]());
    args.push_back(out->buffers.back().get());
    hardware::FillArg(c->args[i], args.back(), 17 + i, c->experts, c->topk);
    out->buffers.emplace_back(new float[floats]);
    std::memcpy(out->buffers.back().get(), args.back(), floats * 4);
    initial.push_back(out->buffers.back().get());
  }
  const auto dims = std::make_shared<std::vector<long long>>(c->dims);
  if (compiled->entry == codegen::kCpuOpEntry) {
    auto op = reinterpret_cast<codegen::CpuOpFn>(entry);
    auto bytes = reinterpret_cast<long (*)(const long long*)>(
        dlsym(out->handle, codegen::kCpuOpPrepackBytes));
    auto pack = reinterpret_cast<void (*)(const long long*, const void*, void*)>(
        dlsym(out->handle, codegen::kCpuOpPrepack));
    if (bytes && pack) {  // the weights (argument 1) packed ahead of time, as at inference
      out->buffers.emplace_back(new float[bytes(dims->data()) / 4 + 16]);
      pack(dims->data(), args[1], out->buffers.back().get());
    }
    std::vector<void*> call_args = args;
    if (bytes && pack) call_args[1] = out->buffers.back().get();
    const auto params = std::make_shared<std::vector<float>>(c->params);
    out->call = [op, dims, params, call_args] {
      op(dims->data(), call_args.data(), params->data());
    };
  } else {  // plain fp32 GEMM: C = A * B
    using GemmFn = void (*)(int, int, int, const float*, const float*, float*);
    auto gemm = reinterpret_cast<GemmFn>(entry);
    auto floats =
        reinterpret_cast<long (*)(int, int)>(dlsym(out->handle, "kiln_gemm_prepack_floats"));
    auto pack = reinterpret_cast<void (*)(int, int, const float*, float*)>(
        dlsym(out->handle, "kiln_gemm_prepack"));
    const int M = (*dims)[0], N = (*dims)[1], K = (*dims)[2];
    const float* b = static_cast<const float*>(args[1]);
    if (floats && pack) {
      out->buffers.emplace_back(new float[floats(N, K) + 16]);
      pack(N, K, b, out->buffers.back().get());
      b = out->buffers.back().get();
    }
    const float* a = static_cast<const float*>(args[0]);
    float* cc = static_cast<float*>(args[4]);
    out->call = [gemm, M, N, K, a, b, cc] { gemm(M, N, K, a, b, cc); };
  }
  out->call();
  std::vector<const void*> before(initial.begin(), initial.end()), after(args.begin(), args.end());
  const hardware::OpCheck check = c->check(before, after);
  if (!check.ok) return "verification failed: " + check.message;
  return "";
}

void Run(benchmark::State& state, v1::Workload w) {
  static std::unique_ptr<hardware::Device> device = hardware::NewCpuDevice();
  Loaded loaded;
  if (std::string why = Load(*device, w, &loaded); !why.empty()) {
    state.SkipWithError(why.c_str());
    return;
  }
  for (auto _ : state) loaded.call();
  state.counters["FLOP/s"] = benchmark::Counter(codegen::WorkloadFlops(w) * state.iterations(),
                                                benchmark::Counter::kIsRate);
  state.counters["bytes/s"] = benchmark::Counter(codegen::WorkloadBytes(w) * state.iterations(),
                                                 benchmark::Counter::kIsRate);
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);  // takes its --benchmark_* flags out of argv
  const std::vector<kiln::Flag> flags = {
      {"--config", kiln::Flag::kValue, kiln::StoreText(&g_config)},
      {"--dtype", kiln::Flag::kValue, kiln::StoreText(&g_dtype)}};
  if (auto error = kiln::ParseFlags(argc, argv, flags)) {
    std::fprintf(stderr,
                 "kiln-bench-ops: %s (takes --config KNOB=V,... --dtype D and Google Benchmark's "
                 "--benchmark_* flags)\n",
                 error->message.c_str());
    return 2;
  }
  for (const auto& [op, shape] : kShapes) {
    // A dtype the operator does not take (bf16 rmsnorm) keeps the operator in fp32.
    auto w = codegen::ParseWorkload(op, shape, g_dtype);
    if (!w.ok()) w = codegen::ParseWorkload(op, shape, "fp32");
    if (!w.ok()) {
      std::fprintf(stderr, "kiln-bench-ops: %s %s: %s\n", op, shape,
                   std::string(w.status().message()).c_str());
      return 2;
    }
    benchmark::RegisterBenchmark(codegen::WorkloadKey(*w).c_str(), Run, *w)->UseRealTime();
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
