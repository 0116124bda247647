#include "hardware/operands.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <new>

#include "absl/strings/str_cat.h"
#include "hardware/buffers.h"
#include "hardware/measure.h"
#include "hardware/reference/attention_reference.h"
#include "hardware/reference/gemm_reference.h"
#include "hardware/reference/rmsnorm_reference.h"
#include "hardware/reference/softmax_reference.h"
#include "hardware/reference/swiglu_reference.h"

namespace kiln::hardware {
namespace {

size_t Dim(const v1::Workload& w, const char* name) {
  auto it = w.dims().find(name);
  return it == w.dims().end() ? 0 : static_cast<size_t>(it->second);
}

// Seeds of the two input streams: verification inputs never equal timing inputs.
uint64_t VerifySeed(uint64_t seed) { return seed * 2 + 1; }
uint64_t TimingSeed(uint64_t seed) { return seed * 2 + 2; }

// Tolerances |out - ref| <= rtol * max(|ref|, floor): fp32 kernels with fast exp/rsqrt and any
// summation order pass; an unwritten, stale or misindexed element fails by far.
struct Tolerance {
  double rtol, floor;
};
Tolerance ToleranceOf(v1::OpKind op) {
  switch (op) {
    case v1::SOFTMAX:
      return {1e-4, 1e-3};  // probabilities: relative, down to 1e-7 absolute
    case v1::ATTENTION_DECODE:
      return {1e-3, 1e-2};  // a long softmax-weighted sum of values in [-1, 1)
    default:
      return {1e-4, 1e-1};  // rmsnorm, swiglu: outputs of order one
  }
}

OutputCheck Compare(const std::vector<float>& ref, const float* out, Tolerance tol) {
  OutputCheck c;
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double scale = std::max<double>(std::fabs(ref[i]), tol.floor);
    const double err = std::isfinite(out[i]) ? std::fabs(out[i] - ref[i]) / scale : INFINITY;
    c.max_error = std::max(c.max_error, err);
    if (!(err <= tol.rtol) && bad++ == 0) first = i;
  }
  c.ok = bad == 0;
  if (!c.ok)
    c.message =
        absl::StrCat("wrong result: out[", first, "] = ", out[first], ", want ", ref[first],
                     std::isnan(out[first]) ? " (NaN: element unwritten or poisoned)" : "", "; ",
                     bad, " of ", ref.size(), " elements outside |out - ref| <= ", tol.rtol,
                     " * max(|ref|, ", tol.floor, "); max_error ", c.max_error);
  return c;
}

}  // namespace

double OperandLayout::bytes() const {
  double total = 0;
  for (size_t f : floats) total += 4.0 * f;
  return total;
}

absl::StatusOr<OperandLayout> OperandsOf(const v1::Workload& w) {
  if (!w.epilogue().empty() || w.dtype() == v1::BF16)
    return absl::UnimplementedError("operands: only fp32 operators without an epilogue");
  const auto d = [&](const char* n) { return Dim(w, n); };
  switch (w.op()) {
    case v1::GEMM:
      return OperandLayout{{"A", "B", "C"}, {d("M") * d("K"), d("K") * d("N"), d("M") * d("N")}};
    case v1::RMSNORM:
      return OperandLayout{{"x", "weight", "out"}, {d("T") * d("D"), d("D"), d("T") * d("D")}};
    case v1::SOFTMAX:
      return OperandLayout{{"x", "out"}, {d("T") * d("N"), d("T") * d("N")}};
    case v1::SWIGLU:
      return OperandLayout{{"gate", "up", "out"},
                           {d("T") * d("F"), d("T") * d("F"), d("T") * d("F")}};
    case v1::ATTENTION_DECODE: {
      const size_t kv = d("B") * d("KVH") * d("L") * d("D"), q = d("B") * d("H") * d("D");
      return OperandLayout{{"q", "k", "v", "out"}, {q, kv, kv, q}};
    }
    default:
      return absl::UnimplementedError(
          absl::StrCat("operands: no reference for ", v1::OpKind_Name(w.op())));
  }
}

std::vector<std::vector<float>> MakeInputs(const OperandLayout& layout, uint64_t seed) {
  std::vector<std::vector<float>> inputs(layout.inputs());
  for (size_t i = 0; i < inputs.size(); ++i) {
    inputs[i].resize(layout.floats[i]);
    FillUniform(inputs[i].data(), inputs[i].size(), seed + 0x5eed * i);
  }
  return inputs;
}

OutputCheck CheckOutput(const v1::Workload& w, const std::vector<std::vector<float>>& in,
                        const float* out) {
  const auto d = [&](const char* n) { return static_cast<int>(Dim(w, n)); };
  if (w.op() == v1::GEMM) {
    // Above 2^28 multiply-adds, sampled rows plus the randomised checksum of every row (a
    // fraction of a second instead of seconds per trial).
    GemmCheck g =
        CheckGemm(d("M"), d("N"), d("K"), in[0].data(), in[1].data(), out, kFullCheckMacs / 4);
    return OutputCheck{g.ok, g.message, g.max_error};
  }
  auto layout = OperandsOf(w);
  if (!layout.ok()) return OutputCheck{false, std::string(layout.status().message()), 0};
  std::vector<float> ref(layout->floats.back());
  switch (w.op()) {
    case v1::RMSNORM:
      ReferenceRmsNorm(in[0].data(), in[1].data(), ref.data(), d("T"), d("D"), kRmsNormEps);
      break;
    case v1::SOFTMAX:
      ReferenceSoftmax(in[0].data(), ref.data(), d("T"), d("N"));
      break;
    case v1::SWIGLU:
      ReferenceSwiglu(in[0].data(), in[1].data(), ref.data(), d("T"), d("F"));
      break;
    case v1::ATTENTION_DECODE:
      ReferenceAttentionDecode(in[0].data(), in[1].data(), in[2].data(), ref.data(), d("B"), d("H"),
                               d("KVH"), d("D"), d("L"), 1.0f / std::sqrt(float(d("D"))));
      break;
    default:
      return OutputCheck{false, "no reference", 0};
  }
  return Compare(ref, out, ToleranceOf(w.op()));
}

v1::Measurement MeasureOnDevice(const v1::Workload& w, const DeviceOperands& dev,
                                const v1::ChipFingerprint& chip, const MeasureOptions& opts) {
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  v1::Measurement m;
  auto fail = [&](v1::MeasurementStatus s, const std::string& what, const absl::Status& st) {
    m.Clear();
    m.set_status(s);
    m.set_message(absl::StrCat(what, ": ", st.message()));
    m.set_measure_seconds(elapsed());
    return m;
  };
  auto layout = OperandsOf(w);
  if (!layout.ok()) return fail(v1::UNSUPPORTED, "operands", layout.status());
  const int n_in = static_cast<int>(layout->inputs());
  const int sets = RotatingSets(layout->bytes(), chip, opts.warm);
  try {
    if (auto s = dev.allocate(sets); !s.ok()) return fail(v1::CRASHED, "allocate", s);
    double max_error = 0, verify_seconds = 0;
    {
      auto inputs = MakeInputs(*layout, VerifySeed(opts.seed));
      std::vector<float> out(layout->floats.back());
      FillNaN(out.data(), out.size());
      for (int i = 0; i < n_in; ++i)
        if (auto s = dev.upload(0, i, inputs[i].data()); !s.ok())
          return fail(v1::CRASHED, "upload", s);
      if (auto s = dev.upload(0, n_in, out.data()); !s.ok()) return fail(v1::CRASHED, "upload", s);
      const auto run_start = std::chrono::steady_clock::now();
      if (auto s = dev.run(0); !s.ok()) {
        const bool refused = s.code() == absl::StatusCode::kResourceExhausted ||
                             s.code() == absl::StatusCode::kInvalidArgument;
        return fail(refused ? v1::UNSUPPORTED : v1::CRASHED, "run", s);
      }
      verify_seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
      if (auto s = dev.download_output(0, out.data()); !s.ok())
        return fail(v1::CRASHED, "download", s);
      OutputCheck check = CheckOutput(w, inputs, out.data());
      if (!check.ok) {
        m.set_status(v1::WRONG_RESULT);
        m.set_message(check.message);
        m.set_max_error(check.max_error);
        m.set_measure_seconds(elapsed());
        return m;
      }
      max_error = check.max_error;
    }
    auto inputs = MakeInputs(*layout, TimingSeed(opts.seed));
    for (int set = 0; set < sets; ++set)
      for (int i = 0; i < n_in; ++i)
        if (auto s = dev.upload(set, i, inputs[i].data()); !s.ok())
          return fail(v1::CRASHED, "upload", s);
    // A kernel slower than a quarter of the cap has been warmed up by its verification run
    // (compiled, caches and TLBs touched): more warm-ups would only spend the trial's time.
    MeasureOptions timing = opts;
    if (verify_seconds > opts.max_seconds / 4) timing.warmup = 0;
    absl::Status run_status;
    m = TimeRepeated(
        [&](int set) {
          if (run_status.ok()) run_status = dev.run(set);
        },
        sets, timing);
    if (!run_status.ok()) return fail(v1::CRASHED, "run", run_status);
    if (dev.device_samples_us) {
      // The device times of the timed runs: the last ones, after verification and warm-up.
      const std::vector<double> all = dev.device_samples_us();
      const size_t n = m.samples_us_size();
      if (all.size() >= n) {
        m.clear_samples_us();
        for (size_t i = all.size() - n; i < all.size(); ++i) m.add_samples_us(all[i]);
        Summarize(&m);
      }
    }
    m.set_max_error(max_error);
  } catch (const std::bad_alloc&) {
    return fail(v1::CRASHED, "host memory",
                absl::ResourceExhaustedError(
                    absl::StrCat("cannot allocate ", layout->bytes(), " bytes of operands")));
  }
  m.set_cache_mode(opts.warm ? "warm" : "cold");
  FillThroughput(w, &m);
  ApplyRooflineGuard(w, chip, opts.warm, &m);
  m.set_measure_seconds(elapsed());
  return m;
}

}  // namespace kiln::hardware
