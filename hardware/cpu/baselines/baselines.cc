#include "hardware/cpu/baselines/baselines.h"

#include <chrono>
#include <cstring>
#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "hardware/cpu/baselines/vendor_gemm.h"
#include "hardware/cpu/torch_baseline/torch_ops.h"
#include "hardware/reference/model_ops_reference.h"
#include "hardware/reference/quant_format.h"

namespace kiln::hardware::cpu_baselines {
namespace {

bool Fp32(const v1::Workload& w) {
  return w.dtype() == v1::FP32 || w.dtype() == v1::DTYPE_UNSPECIFIED;
}
bool PlainGemm(const v1::Workload& w) {
  return w.op() == v1::GEMM && Fp32(w) && w.epilogue().empty();
}
bool PlainBf16Gemm(const v1::Workload& w) {
  return w.op() == v1::GEMM && w.dtype() == v1::BF16 && w.epilogue().empty();
}
// LibTorch's (and oneDNN's) bf16 matmul has fast kernels from AVX-512 up; this process runs on
// the measured chip, so its own CPUID answers.
bool FastBf16Matmul() { return __builtin_cpu_supports("avx512f"); }
absl::Status NoBf16Matmul(const char* library) {
  return absl::UnavailableError(absl::StrCat("not timed: no AVX-512 on this CPU, where ", library,
                                             "'s bf16 matmul is missing or a scalar fallback"));
}

// bf16 [K,N] weights (dims {M,N,K}) widened to fp32, as a model loaded in fp32 holds them.
std::shared_ptr<const void> WidenedBf16Weights(const long long* d, const void* src) {
  auto wd = std::make_shared<std::vector<float>>(static_cast<size_t>(d[1]) * d[2]);
  WidenBf16(static_cast<const uint16_t*>(src), wd->size(), wd->data());
  return std::shared_ptr<const void>(wd, wd->data());
}

bool QuantGemm(const v1::Workload& w) {
  return w.op() == v1::GEMM && (w.dtype() == v1::INT8 || w.dtype() == v1::INT4);
}
// Operators whose LibTorch implementation spends its time in BLAS calls.
bool CallsBlas(const v1::Workload& w) {
  return w.op() == v1::GEMM || w.op() == v1::ATTENTION_DECODE || w.op() == v1::ATTENTION_PREFILL ||
         w.op() == v1::MOE_GEMM || w.op() == v1::MOE_ROUTER;
}

RouteCall GemmCall(GemmFn fn, std::optional<GemmPrepack> pack = std::nullopt) {
  RouteCall c;
  c.gemm = std::move(fn);
  c.gemm_pack = std::move(pack);
  return c;
}

void AddOpenBlas(std::vector<Route>& routes, std::string name, bool gemv, bool nk,
                 const std::vector<int>& counts) {
  routes.push_back(
      {std::move(name), "fp32", counts, [gemv, nk](int t) -> absl::StatusOr<RouteCall> {
         SetOpenBlasThreads(t);
         GemmFn fn = gemv ? OpenBlasSgemv(nk) : OpenBlasSgemm(nk);
         return nk ? GemmCall(fn, TransposeToNk()) : GemmCall(fn);
       }});
}

std::vector<Route> GemmRoutes(const v1::Workload& w, const std::vector<int>& counts) {
  const int M = w.dims().at("M"), N = w.dims().at("N"), K = w.dims().at("K");
  std::vector<Route> routes;
  if (M == 1) {
    AddOpenBlas(routes, "openblas-sgemv", true, false, counts);
    AddOpenBlas(routes, "openblas-sgemv-nk", true, true, counts);
  }
  AddOpenBlas(routes, "openblas-sgemm", false, false, counts);
  AddOpenBlas(routes, "openblas-sgemm-nk", false, true, counts);
  routes.push_back({"blis-sgemm", "fp32", counts, [](int t) -> absl::StatusOr<RouteCall> {
                      SetOpenMpThreads(t);
                      auto fn = BlisSgemm(t);
                      if (!fn.ok()) return fn.status();
                      return GemmCall(*fn);
                    }});
  routes.push_back({"onednn-packed", "fp32", counts, [M, N, K](int t) -> absl::StatusOr<RouteCall> {
                      SetOpenMpThreads(t);  // oneDNN plans for the threads it has at creation
                      auto mm = OnednnMatmul::Create(M, N, K, false);
                      if (!mm.ok()) return mm.status();
                      std::shared_ptr<OnednnMatmul> p = std::move(*mm);
                      GemmPrepack pack;
                      pack.floats = [p](int, int) { return (p->PackedBytes() + 3) / 4; };
                      pack.pack = [p](int, int, const float* B, float* out) { p->Pack(B, out); };
                      RouteCall c = GemmCall([p](int, int, int, const float* A, const float* B,
                                                 float* C) { p->Run(A, B, C); },
                                             pack);
                      c.state = p;
                      return c;
                    }});
  return routes;
}

// A GEMM as a PyTorch model runs it (torch_baseline::RunLinear: weights in nn.Linear's [N,K],
// transposed once at load time), its intra-op pool at each thread count with OpenBLAS at one,
// and one intra-op thread with OpenBLAS's pool at all cores.
// Quantized weights (int8, int4) are dequantized to fp32 at load time: the same arithmetic at
// full precision, which is what LibTorch offers for Kiln's group-wise formats.
// widen: bf16 weights widened to fp32 at load time (a model loaded in fp32), the GEMM in fp32.
// Without it, a bf16 GEMM on a CPU without AVX-512 is listed but not timed: LibTorch's bf16
// matmul there is its scalar fallback (~1 GFLOP/s), a route nobody would run.
void AddTorchLinear(std::vector<Route>& routes, v1::Workload w, const std::vector<int>& counts,
                    bool widen = false) {
  const bool quant = QuantGemm(w), bf16 = w.dtype() == v1::BF16 && !widen;
  if (quant || widen) w.set_dtype(v1::FP32);
  auto prepare = [w, bf16, quant, widen](int torch_threads,
                                         int blas_threads) -> absl::StatusOr<RouteCall> {
    if (bf16 && !FastBf16Matmul()) return NoBf16Matmul("LibTorch");
    torch_baseline::SetPools(torch_threads, blas_threads);
    RouteCall c;
    c.failed = std::make_shared<absl::Status>();
    c.op = [w, failed = c.failed](const long long* d, void* const* a, const float*) {
      if (failed->ok()) *failed = torch_baseline::RunLinear(w, d, a);
    };
    OpPrepack layout;
    const long long elem = bf16 ? 2 : 4;
    layout.bytes = [elem](const long long* d) { return d[1] * d[2] * elem; };
    layout.pack = [elem, quant, widen](const long long* d, const void* src, void* dst) {
      const long long N = d[1], K = d[2];
      std::vector<float> dequantized;
      std::shared_ptr<const void> widened;
      if (quant) {
        dequantized = DequantizeWeights(static_cast<const uint8_t*>(src), K, N);
        src = dequantized.data();
      } else if (widen) {
        widened = WidenedBf16Weights(d, src);
        src = widened.get();
      }
      auto* in = static_cast<const char*>(src);
      auto* out = static_cast<char*>(dst);
      for (long long k = 0; k < K; ++k)
        for (long long n = 0; n < N; ++n)
          std::memcpy(out + (n * K + k) * elem, in + (k * N + n) * elem, elem);
    };
    c.op_pack = layout;
    return c;
  };
  const std::string name =
      absl::StrCat(torch_baseline::Name(), "-linear", widen ? "-fp32-weights" : "");
  routes.push_back(
      {name, bf16 ? "bf16" : "fp32", counts, [prepare](int t) { return prepare(t, 1); }});
  if (counts.size() > 1)
    routes.push_back(
        {name + "+openblas-threads", bf16 ? "bf16" : "fp32", {counts.back()}, [prepare](int t) {
           return prepare(1, t);
         }});
}

// oneDNN matmul (fp32 or bf16) as an operator route, its weights packed ahead of time from what
// `weights` makes of the operand (the operand itself, or its dequantized copy).
Route OnednnOpRoute(
    std::string name, int M, int N, int K, bool bf16, const std::vector<int>& counts,
    std::function<std::shared_ptr<const void>(const long long*, const void*)> weights) {
  return {std::move(name), bf16 ? "bf16" : "fp32", counts,
          [M, N, K, bf16, weights](int t) -> absl::StatusOr<RouteCall> {
            if (bf16 && !FastBf16Matmul()) return NoBf16Matmul("oneDNN");
            SetOpenMpThreads(t);  // oneDNN plans for the threads it has at creation
            auto mm = OnednnMatmul::Create(M, N, K, bf16);
            if (!mm.ok()) return mm.status();
            std::shared_ptr<OnednnMatmul> p = std::move(*mm);
            RouteCall c;
            c.op = [p](const long long*, void* const* a, const float*) {
              p->Run(static_cast<const float*>(a[0]), a[1], static_cast<float*>(a[4]));
            };
            OpPrepack pack;
            pack.bytes = [p](const long long*) { return p->PackedBytes(); };
            pack.pack = [p, weights](const long long* d, const void* src, void* dst) {
              p->Pack(weights(d, src).get(), dst);
            };
            c.op_pack = pack;
            c.state = p;
            return c;
          }};
}

std::vector<Route> Bf16GemmRoutes(const v1::Workload& w, const std::vector<int>& counts) {
  const int M = w.dims().at("M"), N = w.dims().at("N"), K = w.dims().at("K");
  std::vector<Route> routes;
  routes.push_back(OnednnOpRoute("onednn-bf16-packed", M, N, K, true, counts,
                                 [](const long long*, const void* src) {  // as it is
                                   return std::shared_ptr<const void>(std::shared_ptr<const void>(),
                                                                      src);
                                 }));
  AddTorchLinear(routes, w, counts);
  // The fp32 routes on the same weights widened once at load: what a user runs where bf16
  // matmuls are slow or missing (oneDNN's bf16 needs AVX-512).
  if (w.epilogue().empty())
    routes.push_back(
        OnednnOpRoute("onednn-packed-fp32-weights", M, N, K, false, counts, WidenedBf16Weights));
  AddTorchLinear(routes, w, counts, /*widen=*/true);
  return routes;
}

// The operator in LibTorch eager: its intra-op pool at each thread count with OpenBLAS at one,
// and, for operators that call BLAS, one intra-op thread with OpenBLAS's pool at all cores.
std::vector<Route> TorchRoutes(const v1::Workload& w, const std::vector<int>& counts) {
  auto prepare = [w](int torch_threads, int blas_threads) -> absl::StatusOr<RouteCall> {
    torch_baseline::SetPools(torch_threads, blas_threads);
    RouteCall c;
    c.failed = std::make_shared<absl::Status>();
    c.op = [w, failed = c.failed](const long long* d, void* const* a, const float* p) {
      if (failed->ok()) *failed = torch_baseline::RunOp(w, d, a, p);
    };
    return c;
  };
  const std::string dtype = Fp32(w) ? "fp32" : "bf16";
  std::vector<Route> routes;
  routes.push_back(
      {torch_baseline::Name(), dtype, counts, [prepare](int t) { return prepare(t, 1); }});
  if (CallsBlas(w) && counts.size() > 1)
    routes.push_back({absl::StrCat(torch_baseline::Name(), "+openblas-threads"),
                      dtype,
                      {counts.back()},
                      [prepare](int t) { return prepare(1, t); }});
  if (w.op() == v1::GEMM) AddTorchLinear(routes, w, counts);  // with an epilogue
  if (w.op() == v1::SOFTMAX && Fp32(w)) {
    const int rows = w.dims().at("T"), cols = w.dims().at("N");
    routes.push_back(
        {"onednn-softmax", "fp32", counts, [rows, cols](int t) -> absl::StatusOr<RouteCall> {
           SetOpenMpThreads(t);
           auto sm = OnednnSoftmax::Create(rows, cols);
           if (!sm.ok()) return sm.status();
           std::shared_ptr<OnednnSoftmax> p = std::move(*sm);
           RouteCall c;
           c.op = [p](const long long*, void* const* a, const float*) {
             p->Run(static_cast<const float*>(a[0]), static_cast<float*>(a[1]));
           };
           c.state = p;
           return c;
         }});
  }
  return routes;
}

// Quantized GEMM: oneDNN's packed fp32 matmul and LibTorch's linear on the dequantized weights.
std::vector<Route> QuantGemmRoutes(const v1::Workload& w, const std::vector<int>& counts) {
  const int M = w.dims().at("M"), N = w.dims().at("N"), K = w.dims().at("K");
  std::vector<Route> routes;
  if (w.epilogue().empty())
    routes.push_back(
        OnednnOpRoute("onednn-packed-dequantized", M, N, K, false, counts,
                      [](const long long* d, const void* src) -> std::shared_ptr<const void> {
                        auto wd = std::make_shared<std::vector<float>>(
                            DequantizeWeights(static_cast<const uint8_t*>(src), d[2], d[1]));
                        return std::shared_ptr<const void>(wd, wd->data());
                      }));
  AddTorchLinear(routes, w, counts);
  return routes;
}

// Grouped expert GEMM through oneDNN, as a user would write it: for each expert with tokens,
// gather its rows, one oneDNN matmul on that expert's weights (as given, [K,N]: a packed copy of
// every expert for every row count is not something a serving stack keeps), scatter the rows
// back. Primitives are made once per row count (in the warm-up runs) and reused.
struct OnednnMoe {
  int T, E, TOPK, N, K;
  bool bf16;
  std::map<int, std::unique_ptr<OnednnMatmul>> by_rows;
  std::vector<float> x_rows, y_rows;
  std::vector<int> rows;
  absl::Status status;

  void Run(const float* x, const void* w, const int32_t* experts, float* y) {
    const size_t elt = bf16 ? 2 : 4, per_expert = static_cast<size_t>(K) * N * elt;
    for (int e = 0; e < E && status.ok(); ++e) {
      rows.clear();
      for (int r = 0; r < T * TOPK; ++r)
        if (experts[r] == e) rows.push_back(r);
      if (rows.empty()) continue;
      const int m = static_cast<int>(rows.size());
      auto& mm = by_rows[m];
      if (!mm) {
        auto made = OnednnMatmul::Create(m, N, K, bf16, /*plain_weights=*/true);
        if (!made.ok()) {
          status = made.status();
          return;
        }
        mm = std::move(*made);
      }
      x_rows.resize(static_cast<size_t>(m) * K);
      y_rows.resize(static_cast<size_t>(m) * N);
      for (int i = 0; i < m; ++i)
        std::memcpy(&x_rows[static_cast<size_t>(i) * K], x + static_cast<size_t>(rows[i]) * K,
                    K * sizeof(float));
      mm->Run(x_rows.data(), static_cast<const char*>(w) + e * per_expert, y_rows.data());
      for (int i = 0; i < m; ++i)
        std::memcpy(y + static_cast<size_t>(rows[i]) * N, &y_rows[static_cast<size_t>(i) * N],
                    N * sizeof(float));
    }
  }
};

void AddOnednnMoe(std::vector<Route>& routes, const v1::Workload& w,
                  const std::vector<int>& counts) {
  const auto d = [&](const char* n) { return static_cast<int>(w.dims().at(n)); };
  const int T = d("T"), E = d("E"), TOPK = d("TOPK"), N = d("N"), K = d("K");
  const bool bf16 = w.dtype() == v1::BF16;
  routes.push_back({bf16 ? "onednn-bf16-per-expert" : "onednn-per-expert", bf16 ? "bf16" : "fp32",
                    counts, [=](int t) -> absl::StatusOr<RouteCall> {
                      SetOpenMpThreads(t);
                      auto moe = std::make_shared<OnednnMoe>();
                      *moe = OnednnMoe{T, E, TOPK, N, K, bf16, {}, {}, {}, {}, absl::OkStatus()};
                      if (bf16 && !FastBf16Matmul()) return NoBf16Matmul("oneDNN");
                      // Any other refusal of oneDNN's: said now, not as a crash of a call.
                      auto one_row = OnednnMatmul::Create(1, N, K, bf16, /*plain_weights=*/true);
                      if (!one_row.ok()) return one_row.status();
                      moe->by_rows[1] = std::move(*one_row);
                      RouteCall c;
                      c.failed = std::make_shared<absl::Status>();
                      c.op = [moe, failed = c.failed](const long long*, void* const* a,
                                                      const float*) {
                        moe->Run(static_cast<const float*>(a[0]), a[1],
                                 static_cast<const int32_t*>(a[2]), static_cast<float*>(a[3]));
                        if (!moe->status.ok() && failed->ok()) *failed = moe->status;
                      };
                      c.state = moe;
                      return c;
                    }});
}

// Quantized grouped GEMM: LibTorch's expert loop and oneDNN per expert on the dequantized
// weights, dequantized once at load time as for the quantized GEMM's routes.
std::vector<Route> QuantMoeRoutes(v1::Workload w, const std::vector<int>& counts) {
  w.set_dtype(v1::FP32);
  std::vector<Route> routes = TorchRoutes(w, counts);
  AddOnednnMoe(routes, w, counts);
  OpPrepack dequantize;  // dims {T,E,TOPK,N,K}: the (E*K) x N matrix to fp32
  dequantize.bytes = [](const long long* d) { return static_cast<long>(d[1] * d[4] * d[3] * 4); };
  dequantize.pack = [](const long long* d, const void* src, void* dst) {
    const std::vector<float> wd =
        DequantizeWeights(static_cast<const uint8_t*>(src), d[1] * d[4], d[3]);
    std::memcpy(dst, wd.data(), wd.size() * sizeof(float));
  };
  for (Route& r : routes)
    r.prepare = [inner = std::move(r.prepare), dequantize](int t) -> absl::StatusOr<RouteCall> {
      absl::StatusOr<RouteCall> c = inner(t);
      if (c.ok()) c->op_pack = dequantize;
      return c;
    };
  return routes;
}

}  // namespace

std::vector<Route> Routes(const v1::Workload& w, const std::vector<int>& threads) {
  if (QuantGemm(w)) return QuantGemmRoutes(w, threads);
  if (w.op() == v1::MOE_GEMM && (w.dtype() == v1::INT8 || w.dtype() == v1::INT4))
    return QuantMoeRoutes(w, threads);
  if (PlainGemm(w)) return GemmRoutes(w, threads);
  if (PlainBf16Gemm(w)) return Bf16GemmRoutes(w, threads);
  std::vector<Route> routes = TorchRoutes(w, threads);
  if (w.op() == v1::GEMM && w.dtype() == v1::BF16) {  // with an epilogue: as for a plain one
    if (!FastBf16Matmul())
      for (Route& r : routes)
        r.prepare = [](int) -> absl::StatusOr<RouteCall> { return NoBf16Matmul("LibTorch"); };
    AddTorchLinear(routes, w, threads, /*widen=*/true);
  }
  if (w.op() == v1::MOE_GEMM) AddOnednnMoe(routes, w, threads);
  return routes;
}

void QuietPools() {
  torch_baseline::SetPools(1, 1);
  SetOpenMpThreads(1);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
}

std::string DefaultName(const v1::Workload& w) {
  if (PlainGemm(w)) return w.dims().at("M") == 1 ? "openblas-sgemv" : "onednn-packed";
  if (PlainBf16Gemm(w)) return "onednn-bf16-packed";
  if (QuantGemm(w)) return absl::StrCat(torch_baseline::Name(), "-linear");
  return torch_baseline::Name();
}

}  // namespace kiln::hardware::cpu_baselines
