#include "hardware/cpu/step_runner.h"

#include <dlfcn.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "codegen/cpu/op_templates.h"
#include "codegen/model_graph.h"
#include "codegen/workload.h"
#include "common/status.h"
#include "hardware/buffers.h"
#include "hardware/cpu/kernel_runtime.h"
#include "hardware/cpu/read_sweep.h"
#include "hardware/cpu/step_state.h"
#include "hardware/cpu/torch_baseline/torch_ops.h"
#include "hardware/measure.h"
#include "hardware/op_cases.h"
#include "hardware/reference/model_ops_reference.h"

namespace kiln::hardware {
namespace {

using Clock = std::chrono::steady_clock;
double Us(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

// The compiled kernels of a step request, by workload key.
class Kernels {
 public:
  ~Kernels() {
    for (void* h : handles_) dlclose(h);
  }
  absl::Status Load(const v1::StepRequest& req) {
    if (absl::Status host = CheckKernelHost(); !host.ok()) return host;
    for (const auto& k : req.kernels()) {
      void* h = dlopen(k.artifact().c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!h)
        return absl::FailedPreconditionError(
            absl::StrCat("cannot load ", k.artifact(), ": ", dlerror()));
      handles_.push_back(h);
      void* entry = dlsym(h, k.entry().c_str());
      if (!entry)
        return absl::FailedPreconditionError(
            absl::StrCat("no entry ", k.entry(), " in ", k.artifact()));
      StepKernel& s = by_key_[codegen::WorkloadKey(k.workload())];
      if (k.entry() == codegen::kCpuOpEntry) {
        s.op = reinterpret_cast<codegen::CpuOpFn>(entry);
        s.op_pack_bytes =
            reinterpret_cast<long (*)(const long long*)>(dlsym(h, codegen::kCpuOpPrepackBytes));
        s.op_pack = reinterpret_cast<void (*)(const long long*, const void*, void*)>(
            dlsym(h, codegen::kCpuOpPrepack));
      } else {
        s.gemm = reinterpret_cast<StepKernel::GemmEntry>(entry);
        s.pack_floats = reinterpret_cast<long (*)(int, int)>(dlsym(h, "kiln_gemm_prepack_floats"));
        s.pack = reinterpret_cast<void (*)(int, int, const float*, float*)>(
            dlsym(h, "kiln_gemm_prepack"));
      }
    }
    return absl::OkStatus();
  }
  const StepKernel* Find(const v1::Workload& w) const {
    auto it = by_key_.find(codegen::WorkloadKey(w));
    return it == by_key_.end() ? nullptr : &it->second;
  }

 private:
  std::vector<void*> handles_;
  std::map<std::string, StepKernel> by_key_;
};

// Kiln's kernels' times inside the step, by workload: the profile's "kiln ROLE" entries over
// `steps` timed steps (layer roles ran on `run` of `total` layers; their calls are scaled to the
// whole model).
void AddOpTimes(const v1::StepRequest& req, const codegen::StepGraph& graph,
                const std::map<std::string, std::pair<double, int>>& profile, int total, int run,
                int steps, v1::StepResult* r) {
  struct Sum {
    std::vector<std::string> roles;
    double us = 0;
    int calls = 0;
    double calls_per_step = 0;
  };
  std::map<std::string, Sum> by_key;
  std::vector<std::string> order;
  for (const auto* ops : {&graph.layer, &graph.tail})
    for (const codegen::StepOp& op : *ops) {
      auto it = profile.find("kiln " + op.role);
      const std::string key = codegen::WorkloadKey(op.workload);
      if (!by_key.count(key)) order.push_back(key);
      Sum& s = by_key[key];
      if (std::find(s.roles.begin(), s.roles.end(), op.role) != s.roles.end()) continue;
      s.roles.push_back(op.role);
      if (it == profile.end()) continue;
      s.us += it->second.first;
      s.calls += it->second.second;
      const double per_step = static_cast<double>(it->second.second) / std::max(1, steps);
      s.calls_per_step += ops == &graph.layer ? per_step * total / std::max(1, run) : per_step;
    }
  std::map<std::string, double> isolated;
  for (const auto& k : req.kernels())
    isolated[codegen::WorkloadKey(k.workload())] = k.isolated_us();
  for (const std::string& key : order) {
    const Sum& s = by_key[key];
    if (s.calls == 0) continue;
    v1::StepOpTime* t = r->add_op_times();
    t->set_workload_key(key);
    t->set_roles(absl::StrJoin(s.roles, ","));
    t->set_calls_per_step(static_cast<int>(std::lround(s.calls_per_step)));
    t->set_in_step_us(s.us / s.calls);
    t->set_isolated_us(isolated[key]);
  }
}

}  // namespace

absl::StatusOr<StepOutputs> RunCpuStepOnce(const v1::StepRequest& req,
                                           const v1::ChipFingerprint& chip, uint64_t seed) {
  Kernels kernels;
  RETURN_IF_ERROR(kernels.Load(req));
  torch_baseline::SetThreads(chip.cores());
  ASSIGN_OR_RETURN(auto state, StepState::Create(req, seed));
  RETURN_IF_ERROR(state->Prepare([&](const v1::Workload& w) { return kernels.Find(w); }));
  StepOutputs out;
  state->SaveState();
  RETURN_IF_ERROR(state->Run(true).status());
  out.kiln = state->Logits();
  state->RestoreState();
  RETURN_IF_ERROR(state->Run(false).status());
  out.torch = state->Logits();
  state->RestoreState();
  return out;
}

absl::StatusOr<v1::StepResult> RunCpuStep(const v1::StepRequest& req,
                                          const v1::ChipFingerprint& chip,
                                          const StepOptions& opts) {
  Kernels kernels;
  RETURN_IF_ERROR(kernels.Load(req));
  torch_baseline::SetThreads(chip.cores());
  ASSIGN_OR_RETURN(auto state, StepState::Create(req, opts.seed));
  RETURN_IF_ERROR(state->Prepare([&](const v1::Workload& w) { return kernels.Find(w); }));
  v1::StepResult r;
  // LibTorch has a fast bf16 matmul only where oneDNN's bf16 runs (AVX-512; see the variants).
  const bool bf16 = req.dtype() == v1::BF16;
  const bool bf16_matmul =
      !bf16 || std::find(chip.isa_features().begin(), chip.isa_features().end(), "avx512f") !=
                   chip.isa_features().end();
  // Correctness first: one step with each backend from the same state (LibTorch's projections on
  // the widened weights where its bf16 matmul is the scalar fallback).
  state->SaveState();
  RETURN_IF_ERROR(state->Run(true).status());
  std::vector<float> a = state->Logits();
  state->RestoreState();
  state->set_fp32_linear(!bf16_matmul);
  RETURN_IF_ERROR(state->Run(false).status());
  state->set_fp32_linear(false);
  std::vector<float> b = state->Logits();
  state->RestoreState();
  double diff = 0, scale = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(b[i])));
    if (!std::isfinite(a[i])) diff = INFINITY;
  }
  r.set_max_error(diff / scale);
  // Then time both, each sample one whole (N-layer) step. Kiln's kernels are timed per call as
  // they run (a clock read per call, noise next to a step): their times inside the step are part
  // of the result. KILN_STEP_PROFILE=1 also times LibTorch's operators and prints both per role.
  const bool profile = std::getenv("KILN_STEP_PROFILE") != nullptr;
  const int L = req.arch().layers(), n = state->layers();
  const double factor = static_cast<double>(L) / n;
  // The bound: the whole model's weight and KV bytes at the read bandwidth of the same moment.
  const double bytes = codegen::StepBytesRead(state->graph());
  // Prefill is bound by compute: the step's FLOP at the matrix peak of the GEMMs' dtype.
  const bool compute_bound = req.phase() == "prefill";
  double flops = 0, peak = chip.peak_gflops();
  for (const auto* ops : {&state->graph().layer, &state->graph().tail})
    for (const auto& op : *ops) {
      flops += codegen::WorkloadFlops(op.workload) * (ops == &state->graph().layer ? L : 1);
      if (op.workload.op() == v1::GEMM) peak = std::max(peak, ComputePeak(op.workload, chip));
    }
  const double roof_us = compute_bound && peak > 0 ? flops / (peak * 1e3) : 0;
  ASSIGN_OR_RETURN(auto sweep, ReadSweep::Create(size_t{512} << 20, std::max(1, chip.cores())));
  std::vector<double> ks, ts, bws, tbws, fractions, tfractions;
  // One backend's block: a warm-up step, then whole steps until the samples or the time run out,
  // each followed by a read sweep (the bound of that moment). The two backends run in blocks of
  // their own: LibTorch's BLAS threads spin for a while after a call and would steal the cores
  // from the next step if the two alternated per step.
  // `raw`: the unscaled (N-layer) steps, as measured.
  auto time_block = [&](bool kiln, int max_samples, double max_seconds, std::vector<double>& out,
                        std::vector<double>* raw, std::vector<double>* bw,
                        std::vector<double>* frac) -> absl::Status {
    const auto start = Clock::now();
    state->set_profiling(kiln || profile);
    for (int i = 0;; ++i) {
      ASSIGN_OR_RETURN(auto t, state->Run(kiln));
      if (i == 0) {  // warm-up
        state->profile().clear();
        continue;
      }
      out.push_back(t.first * factor + t.second);
      if (raw) raw->push_back(t.first + t.second);
      if (bw) {
        bw->push_back(sweep->BestGbps(3));
        frac->push_back((compute_bound ? roof_us : bytes / (bw->back() * 1e3)) /  // in us
                        out.back());
      }
      const double elapsed = Us(start, Clock::now()) / 1e6;
      if (static_cast<int>(out.size()) >= max_samples) break;
      if (static_cast<int>(out.size()) >= opts.min_samples && elapsed >= max_seconds) break;
    }
    return absl::OkStatus();
  };
  // With KILN_STEP_PROFILE, each block's per-role times, then a fresh profile for the next one.
  auto print_profile = [&](const std::string& block) {
    if (profile)
      for (const auto& [role, p] : state->profile())
        std::fprintf(stderr, "step profile [%s]: %-22s %10.1f us/call (%d calls)\n", block.c_str(),
                     role.c_str(), p.first / std::max(1, p.second), p.second);
    state->profile().clear();
  };
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  };
  torch_baseline::SetPools(1, 1);  // Kiln's kernels use their own pool
  std::vector<double> kraw, traw;
  // A probe wants the kernels' shares of the step, not a published figure: fewer samples.
  const int kiln_samples = req.probe() ? std::min(opts.max_samples, 8) : opts.max_samples;
  RETURN_IF_ERROR(time_block(true, kiln_samples, opts.max_seconds / (req.probe() ? 4 : 2), ks,
                             &kraw, &bws, &fractions));
  AddOpTimes(req, state->graph(), state->profile(), L, n, static_cast<int>(ks.size()), &r);
  print_profile("kiln");
  for (double us : kraw) r.add_samples_us(us);
  for (double g : bws) r.add_read_gbytes_per_s_samples(g);
  const double tokens = state->tokens();
  auto set_kiln_figures = [&] {
    r.set_step_us(median(ks));
    r.set_measured(tokens / (r.step_us() * 1e-6));
    r.set_read_gbytes_per_s(median(bws));
    r.set_bytes_per_token(bytes / tokens);
    r.set_bound(r.read_gbytes_per_s() * 1e9 / r.bytes_per_token());
    r.set_bound_kind(compute_bound ? "compute" : "memory");
    r.set_flops_per_token(flops / tokens);
    r.set_peak_gflops(peak);
    if (compute_bound && peak > 0) r.set_bound(peak * 1e9 / r.flops_per_token());
    r.set_bound_fraction(median(fractions));
    r.set_layers_run(n);
    r.set_layers_total(L);
  };
  if (req.probe()) {
    set_kiln_figures();
    r.set_probe(true);
    r.set_note(
        absl::StrCat("a probe: Kiln's kernels on ", n, " of ", L, " layers, no baseline timed"));
    return r;
  }
  // The LibTorch step at each arrangement of its two pools that keeps one of them at 1 thread
  // (its intra-op pool at all cores, or OpenBLAS's): a few steps each, then the faster one in full.
  // Also: its projections through oneDNN matmul on weights packed ahead of time (ipex.optimize's
  // route), which reads more of the bound than F.linear does at one row in bf16.
  // A bf16 job also gets the same step with fp32 weights widened once at load, as a user
  // loads the model in fp32 where LibTorch has no fast bf16 matmul: on CPUs without AVX-512
  // (oneDNN's bf16 needs it) LibTorch's own bf16 GEMM is a scalar loop, ~1 GFLOP/s, so its bf16
  // arrangements are listed there but not timed (a prefill step would take minutes).
  struct Variant {
    std::string name;
    int torch_threads, blas_threads;
    bool onednn = false, fp32 = false;
  };
  const int cores = std::max(1, chip.cores());
  std::vector<Variant> variants;
  for (bool fp32 : {false, true}) {
    if (fp32 && !bf16) break;
    const std::string name = absl::StrCat(torch_baseline::Name(), fp32 ? "+fp32-weights" : "");
    variants.push_back({name, cores, 1, false, fp32});
    if (cores > 1) variants.push_back({name + "+openblas-threads", 1, cores, false, fp32});
    variants.push_back({name + "+onednn-packed-linear", cores, 1, true, fp32});
  }
  size_t best = 0;
  std::vector<double> screen_medians;
  std::vector<std::string> screen_errors;  // a variant that cannot run is listed, not fatal
  auto arrange = [&](const Variant& v) {
    torch_baseline::SetPools(v.torch_threads, v.blas_threads);
    state->set_onednn_linear(v.onednn);
    state->set_fp32_linear(v.fp32);
  };
  for (size_t v = 0; v < variants.size(); ++v) {
    if (!variants[v].fp32 && !bf16_matmul) {
      screen_medians.push_back(INFINITY);
      screen_errors.push_back(
          "not timed: no AVX-512 on this CPU, so no fast bf16 matmul in LibTorch (its scalar "
          "fallback); the +fp32-weights arrangements stand for it");
      if (v == best) ++best;
      continue;
    }
    arrange(variants[v]);
    std::vector<double> screen;
    absl::Status s = time_block(false, 3, 0, screen, nullptr, nullptr, nullptr);
    state->RestoreState();
    print_profile(variants[v].name + " (screen)");
    screen_medians.push_back(s.ok() ? median(screen) : INFINITY);
    screen_errors.push_back(std::string(s.message()));
    if (screen_medians[v] < screen_medians[best]) best = v;
  }
  if (!std::isfinite(screen_medians[best]))
    return absl::InternalError(absl::StrCat("step baseline: ", screen_errors[best]));
  arrange(variants[best]);
  RETURN_IF_ERROR(
      time_block(false, opts.max_samples, opts.max_seconds / 2, ts, &traw, &tbws, &tfractions));
  print_profile(variants[best].name);
  for (double us : traw) r.add_baseline_samples_us(us);
  torch_baseline::SetPools(1, 1);
  for (size_t v = 0; v < variants.size(); ++v) {
    v1::BaselineRoute* route = r.add_baseline_routes();
    route->set_name(variants[v].name);
    route->set_threads(std::max(variants[v].torch_threads, variants[v].blas_threads));
    route->set_dtype(bf16 && !variants[v].fp32 ? "bf16" : "fp32");
    const bool ran = std::isfinite(screen_medians[v]);
    const bool skipped = !variants[v].fp32 && !bf16_matmul;
    route->set_status(ran ? v1::OK : skipped ? v1::UNSUPPORTED : v1::CRASHED);
    route->set_median_us(v == best ? median(ts) : ran ? screen_medians[v] : 0);
    route->set_message(v == best ? "timed in full"
                       : ran     ? "screened on 3 steps"
                                 : screen_errors[v]);
  }
  set_kiln_figures();
  r.set_baseline_step_us(median(ts));
  r.set_baseline_measured(tokens / (r.baseline_step_us() * 1e-6));
  r.set_baseline_name(variants[best].name);
  r.set_baseline_threads(std::max(variants[best].torch_threads, variants[best].blas_threads));
  r.set_baseline_dtype(bf16 && !variants[best].fp32 ? "bf16" : "fp32");
  r.set_baseline_bound_fraction(median(tfractions));
  for (double g : tbws) r.add_baseline_read_gbytes_per_s_samples(g);
  r.set_note(n == L ? absl::StrCat("measured on all ", L, " layers")
                    : absl::StrCat("measured on ", n, " of ", L, " layers, layer time scaled by ",
                                   L, "/", n, " (head measured once)"));
  if (profile)  // one line a script can read beside another engine's figures (bench-llamacpp.sh)
    std::fprintf(stderr,
                 "step summary: kiln %.3f tok/s (%.3f of bound), baseline %s %.3f tok/s (%.3f of "
                 "bound), read %.2f GB/s\n",
                 r.measured(), r.bound_fraction(), r.baseline_name().c_str(), r.baseline_measured(),
                 r.baseline_bound_fraction(), r.read_gbytes_per_s());
  return r;
}

}  // namespace kiln::hardware
