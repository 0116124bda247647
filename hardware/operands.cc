#include "hardware/operands.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <new>

#include "absl/strings/str_cat.h"
#include "codegen/workload.h"
#include "hardware/buffers.h"
#include "hardware/measure.h"
#include "hardware/op_cases.h"

namespace kiln::hardware {
namespace {

// Seeds of the two input streams: verification inputs never equal timing inputs.
uint64_t VerifySeed(uint64_t seed) { return seed * 2 + 1; }
uint64_t TimingSeed(uint64_t seed) { return seed * 2 + 2; }

// The operator's verification case and the positions in its arguments of the accelerator
// kernel's operands (every argument but the epilogue's).
struct AccelCase {
  OpCase c;
  std::vector<int> operands;
};

absl::StatusOr<AccelCase> AccelCaseOf(const v1::Workload& w) {
  if (!w.epilogue().empty() || (w.dtype() != v1::FP32 && w.dtype() != v1::DTYPE_UNSPECIFIED))
    return absl::UnimplementedError("operands: only fp32 operators without an epilogue");
  auto made = MakeOpCase(w);
  if (!made.ok()) return made.status();
  AccelCase a{std::move(*made), {}};
  for (size_t i = 0; i < a.c.args.size(); ++i)
    if (!a.c.args[i].epilogue_only) a.operands.push_back(static_cast<int>(i));
  // The harness below uploads fp32 inputs drawn uniformly and downloads one fp32 output, last.
  for (size_t k = 0; k < a.operands.size(); ++k) {
    const ArgSpec& arg = a.c.args[a.operands[k]];
    const bool last = k + 1 == a.operands.size();
    if (arg.elem != Elem::kF32 || arg.inout || (arg.fill == Fill::kNaN) != last ||
        (!last && arg.fill != Fill::kUniform))
      return absl::UnimplementedError(absl::StrCat(
          "operands: ", codegen::OpName(w.op()), "'s argument ", arg.name,
          " is not an fp32 input or its one output, which is all the accelerator harness moves"));
  }
  return a;
}

}  // namespace

double OperandLayout::bytes() const {
  double total = 0;
  for (size_t f : floats) total += 4.0 * f;
  return total;
}

absl::StatusOr<OperandLayout> OperandsOf(const v1::Workload& w) {
  auto a = AccelCaseOf(w);
  if (!a.ok()) return a.status();
  OperandLayout layout;
  for (int i : a->operands) {
    layout.names.push_back(a->c.args[i].name);
    layout.floats.push_back(a->c.args[i].count);
  }
  return layout;
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
  auto a = AccelCaseOf(w);
  if (!a.ok()) return OutputCheck{false, std::string(a.status().message()), 0};
  // The case's check reads every argument: the epilogue's get zeros (no epilogue reads them).
  std::vector<std::vector<float>> unused;
  std::vector<const void*> before(a->c.args.size()), after(a->c.args.size());
  for (size_t i = 0; i < a->c.args.size(); ++i)
    if (a->c.args[i].epilogue_only) {
      unused.emplace_back(a->c.args[i].count, 0.0f);
      before[i] = after[i] = unused.back().data();
    }
  for (size_t k = 0; k < a->operands.size(); ++k)
    before[a->operands[k]] = after[a->operands[k]] = k < in.size() ? in[k].data() : out;
  const OpCheck check = a->c.check(before, after);
  return OutputCheck{check.ok, check.message, check.max_error};
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
