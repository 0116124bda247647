// kiln-bench-kernels: tunes decode-shaped GEMMs and GQA decode attention with Kiln (coordinator +
// CPU worker in this process, the real service path), then times the best kernel side by side
// with the fastest route a user could run instead (the device's baselines: OpenBLAS sgemm and
// sgemv in both weight layouts, BLIS, oneDNN with packed weights, LibTorch eager; each at 1 and
// all threads) in this process and run, with one harness (verify, then cold timing over rotating
// buffers). Prints a table and optionally writes JSON and markdown.
#include <cblas.h>
#include <grpcpp/grpcpp.h>
#include <stdlib.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/median.h"
#include "codegen/kernel_template.h"
#include "codegen/workload.h"
#include "common/flags.h"
#include "common/json_text.h"
#include "hardware/cpu/gemm_harness.h"
#include "hardware/cpu/read_sweep.h"
#include "hardware/cpu/torch_baseline/torch_ops.h"
#include "hardware/device.h"
#include "kiln/v1/tuning_service.grpc.pb.h"
#include "server/coordinator_server.h"
#include "workers/worker.h"

namespace {

struct Row {
  std::string op, shape;
  int m = 0;  // GEMM rows (0 for attention)
  double kiln_us = 0, base_us = 0, gflops = 0, gbps = 0, roof_pct = 0, prepack_us = 0, trial_s = 0,
         job_s = 0;
  std::string base_name;  // the fastest route ("onednn-packed/2t")
  nlohmann::ordered_json routes_json = nlohmann::ordered_json::array();  // every route timed
  std::string routes_text;
  double read_gbps = 0;       // the read sweep around this case's timing (its roofline)
  double roof_pct_probe = 0;  // against the fingerprint's probe, taken once at the start
  // Paired rounds: each a short timing between two single sweep passes, its % of the roofline
  // against their mean; the median over the rounds (the same moments for kernel and bound).
  double paired_pct = 0, paired_read_gbps = 0;
  std::string config;
  // The coordinator's final rounds (TaskResult.finalists): a JSON array, and one line of text.
  nlohmann::ordered_json finals_json = nlohmann::ordered_json::array();
  std::string finals_text;
};

constexpr char kUsage[] =
    "usage: kiln-bench-kernels [--shape [OP:]DIMS ...] [--suite decode|quick]\n"
    "                          [--budget N] [--pin KNOB=V ...] [--final-rounds N]\n"
    "                          [--json FILE] [--markdown FILE]\n"
    "  OP is gemm (default) or attention_decode, e.g. --shape M=8,N=4096,K=4096 or\n"
    "  --shape attention_decode:B=1,H=32,KVH=8,D=128,L=4096\n"
    "  --pin fixes a knob in every case's search (for A/B runs of one knob's values)\n"
    "  --final-rounds N: the coordinator's final rounds per case (default 3; 0: none)\n";

// "OP:DIMS" or "DIMS" (a GEMM) -> (op, dims).
std::pair<std::string, std::string> SplitCase(const std::string& c) {
  const size_t colon = c.find(':');
  if (colon == std::string::npos) return {"gemm", c};
  return {c.substr(0, colon), c.substr(colon + 1)};
}

// The decode suite: GEMM M x (N, K), then GQA attention decode (32 query heads, 8 kv
// heads, head size 128) over a context of 512 and 4096.
std::vector<std::string> Suite(const std::string& name) {
  std::vector<std::string> out;
  std::vector<int> ms = {1, 2, 4, 8, 16, 32, 64, 128, 512};
  std::vector<std::pair<int, int>> nk = {{4096, 4096}, {14336, 4096}, {4096, 14336}, {1024, 4096}};
  std::vector<int> contexts = {512, 4096};
  if (name == "quick") ms = {1, 8, 16, 128, 512}, nk = {{4096, 4096}}, contexts = {4096};
  for (auto [n, k] : nk)
    for (int m : ms) out.push_back(absl::StrCat("M=", m, ",N=", n, ",K=", k));
  for (int l : contexts) out.push_back(absl::StrCat("attention_decode:B=1,H=32,KVH=8,D=128,L=", l));
  return out;
}

// OpenBLAS with every core while the vendor library (and LibTorch, whose matmul calls it) is
// timed. The policy agent in this process pins OpenBLAS to one thread for its own small matrices
// (agent/policy/cost_model.cc), which halved OpenBLAS here until 2026-12-03; the worker's trial
// processes never had that problem. Restored afterwards, so the next job's agent is as before.
class BlasOnAllCores {
 public:
  explicit BlasOnAllCores(int cores) : before_(openblas_get_num_threads()) {
    openblas_set_num_threads(cores);
  }
  ~BlasOnAllCores() { openblas_set_num_threads(before_); }

 private:
  int before_;
};

constexpr int kPairedRounds = 7;

// "AVX-512" or "AVX2" when OpenBLAS's chosen core (openblas_get_corename) lacks the widest vector
// kernels the chip has (chip_type cpu-x86_64-avx512 / -avx2), null otherwise. OpenBLAS's
// DYNAMIC_ARCH falls back to a generic core (Prescott) on a CPU model it predates, e.g. 0.3.21 on
// Emerald Rapids (family 6 model 207).
const char* OpenBlasCoreBelowChip(std::string core, const std::string& chip_type) {
  for (char& c : core) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  auto any_of = [&](std::initializer_list<const char*> names) {
    for (const char* n : names)
      if (core == n) return true;
    return false;
  };
  const bool avx512 = any_of({"skylakex", "cooperlake", "sapphirerapids"});
  const bool avx2 = avx512 || any_of({"haswell", "zen", "skylake"});
  if (absl::EndsWith(chip_type, "-avx512") && !avx512) return "AVX-512";
  if (absl::EndsWith(chip_type, "-avx2") && !avx2) return "AVX2";
  return nullptr;
}

using kiln::bench::Median;

// Median over the job's tuning trials of the worker's wall time per trial (its share of the
// parallel compile-ahead, then verification and timing in the sandbox, child start included).
double MedianTrialSeconds(kiln::v1::TuningService::Stub& stub, const std::string& job_id) {
  grpc::ClientContext ctx;
  kiln::v1::GetResultsRequest req;
  req.set_job_id(job_id);
  kiln::v1::GetResultsResponse resp;
  if (!stub.GetResults(&ctx, req, &resp).ok()) return 0;
  std::vector<double> s;
  for (const auto& t : resp.trials())
    if (t.kind() == kiln::v1::TUNE && t.measurement().trial_seconds() > 0)
      s.push_back(t.measurement().trial_seconds());
  return Median(s);
}

// Submits one job and waits for it; returns the job (with its best config) or an error text.
std::string Tune(kiln::v1::TuningService::Stub& stub, const kiln::v1::Workload& w, int budget,
                 const std::map<std::string, int64_t>& pins, kiln::v1::Job* job) {
  kiln::v1::SubmitJobRequest req;
  *req.mutable_spec()->mutable_workload() = w;
  for (const auto& [knob, value] : pins) (*req.mutable_spec()->mutable_pin())[knob] = value;
  req.mutable_spec()->set_chip("cpu");
  req.mutable_spec()->set_budget_trials(budget);
  kiln::v1::SubmitJobResponse resp;
  grpc::ClientContext ctx;
  grpc::Status s = stub.SubmitJob(&ctx, req, &resp);
  if (!s.ok()) return s.error_message();
  for (;;) {
    grpc::ClientContext c;
    kiln::v1::GetJobRequest g;
    g.set_job_id(resp.job_id());
    if (!stub.GetJob(&c, g, job).ok()) return "GetJob failed";
    auto st = job->state();
    if (st == kiln::v1::SUCCEEDED) return "";
    if (st == kiln::v1::FAILED || st == kiln::v1::CANCELLED) return job->message();
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (int code = kiln::workers::MaybeTrialChild(argc, argv); code >= 0) return code;
  std::vector<std::string> shapes;
  std::map<std::string, int64_t> pins;
  std::string json_path, md_path, suite = "";
  int budget = 60;
  int final_rounds = kiln::server::CoordinatorOptions().final_rounds;
  auto into = [](std::string* out) {
    return [out](const std::string& v) {
      *out = v;
      return std::string();
    };
  };
  const std::vector<kiln::Flag> flags = {
      {"--shape", kiln::Flag::kValue,
       [&](const std::string& v) {
         shapes.push_back(v);
         return std::string();
       }},
      {"--suite", kiln::Flag::kValue, into(&suite)},
      {"--budget", kiln::Flag::kValue,
       [&](const std::string& v) {
         budget = std::atoi(v.c_str());
         return std::string();
       }},
      {"--pin", kiln::Flag::kValue,
       [&](const std::string& pin) {
         const size_t eq = pin.find('=');
         int64_t value = 0;
         if (eq == std::string::npos || eq == 0 || !absl::SimpleAtoi(pin.substr(eq + 1), &value))
           return "--pin: expected KNOB=INTEGER, got '" + pin + "'";
         pins[pin.substr(0, eq)] = value;
         return std::string();
       }},
      {"--final-rounds", kiln::Flag::kValue,
       [&](const std::string& v) {
         if (!absl::SimpleAtoi(v, &final_rounds) || final_rounds < 0 || final_rounds > 10)
           return "--final-rounds: expected 0..10, got '" + v + "'";
         return std::string();
       }},
      {"--json", kiln::Flag::kValue, into(&json_path)},
      {"--markdown", kiln::Flag::kValue, into(&md_path)},
  };
  if (auto error = kiln::ParseFlags(argc, argv, flags)) {
    // A refused value names what is wrong; a missing value or unknown flag shows the usage.
    std::fprintf(stderr, "kiln-bench-kernels: %s\n%s", error->message.c_str(),
                 error->refused ? "" : kUsage);
    return 2;
  }
  if (!suite.empty()) {
    auto more = Suite(suite);
    shapes.insert(shapes.end(), more.begin(), more.end());
  }
  if (shapes.empty()) shapes = Suite("quick");
  if (budget < 1) {
    std::fprintf(stderr, "kiln-bench-kernels: --budget must be >= 1\n");
    return 2;
  }
  kiln::server::CoordinatorOptions co;
  co.listen = "127.0.0.1:0";
  co.final_rounds = final_rounds;
  // A fresh store per run: every case is tuned within its budget, none answered from old records.
  char dir_template[] = "/tmp/kiln-bench-kernels-XXXXXX";
  if (!mkdtemp(dir_template)) {
    std::perror("kiln-bench-kernels: mkdtemp");
    return 1;
  }
  co.data_dir = dir_template;
  co.metrics_listen = "";
  co.quiet = true;
  auto coord = kiln::server::StartCoordinator(co);
  if (!coord.ok()) {
    std::fprintf(stderr, "kiln-bench-kernels: %s\n", std::string(coord.status().message()).c_str());
    return 1;
  }
  kiln::workers::WorkerOptions wo;
  wo.coordinator = (*coord)->address();
  wo.metrics_listen = "";
  wo.quiet = true;
  auto worker = kiln::workers::NewWorker(wo);
  if (!worker.ok()) {
    std::fprintf(stderr, "kiln-bench-kernels: %s\n",
                 std::string(worker.status().message()).c_str());
    return 1;
  }
  std::thread worker_thread([&] { (*worker)->Run(false).IgnoreError(); });
  auto device = *kiln::hardware::OpenDevice("cpu");
  const auto& chip = device->Fingerprint();
  // The bandwidth roof of each case is read around its timing (best of 3 passes before and 3
  // after over 512 MiB, on the kernels' thread pool), as the step runner does: on a shared
  // machine it moves from minute to minute, and a probe taken once at the start is not the
  // bandwidth of a case timed ten minutes later.
  auto sweep = kiln::hardware::ReadSweep::Create(size_t{512} << 20, chip.cores());
  if (!sweep.ok()) {
    std::fprintf(stderr, "kiln-bench-kernels: %s\n", std::string(sweep.status().message()).c_str());
    return 1;
  }
  std::printf("openblas: %s (core %s; timed on %d threads)\n", openblas_get_config(),
              openblas_get_corename(), chip.cores());
  if (const char* weaker = OpenBlasCoreBelowChip(openblas_get_corename(), chip.chip_type()))
    std::fprintf(stderr,
                 "kiln-bench-kernels: warning: OpenBLAS chose core %s, which has no %s kernels, on "
                 "a %s chip (a CPU model this OpenBLAS does not know): its GEMM figures are not "
                 "its best here; compare also with OPENBLAS_CORETYPE=%s set\n",
                 openblas_get_corename(), weaker, chip.chip_type().c_str(),
                 std::string(weaker) == "AVX-512" ? "SkylakeX" : "Haswell");
  std::printf("chip %s: peak %.0f GFLOP/s, read %.1f GB/s (measured)\n\n", chip.chip_type().c_str(),
              chip.peak_gflops(), chip.read_gbytes_per_s());
  auto stub = kiln::v1::TuningService::NewStub(
      grpc::CreateChannel((*coord)->address(), grpc::InsecureChannelCredentials()));
  std::printf("%-38s %9s %8s %7s %6s %6s %7s %-28s %10s %8s %7s\n", "case", "kiln_us", "GFLOP/s",
              "GB/s", "read", "%roof", "%paired", "fastest baseline", "base_us", "vs_base",
              "s/trial");
  std::vector<Row> rows;
  for (const auto& c : shapes) {
    const auto [op, shape] = SplitCase(c);
    auto w = kiln::codegen::ParseWorkload(op, shape);
    if (!w.ok()) {
      std::fprintf(stderr, "kiln-bench-kernels: %s\n", std::string(w.status().message()).c_str());
      return 2;
    }
    kiln::v1::Job job;
    std::string err = Tune(*stub, *w, budget, pins, &job);
    if (!err.empty()) {
      std::printf("%-38s tuning failed: %s\n", c.c_str(), err.c_str());
      continue;
    }
    // Side by side, same process, same harness: the tuned kernel, then OpenBLAS, then LibTorch.
    auto tmpl = *kiln::codegen::FindTemplate(*w, "cpu");
    auto kernel = tmpl->Render(*w, kiln::codegen::FromProto(job.tasks(0).best_config()),
                               kiln::codegen::TraitsFromFingerprint(chip));
    auto compiled = device->Compile(*kernel);
    kiln::hardware::MeasureOptions opts;
    opts.max_seconds = 2;
    const double read_before = (*sweep)->BestGbps(3);
    kiln::v1::Measurement ours = device->Measure(*w, *compiled, opts);
    const double read_gbps = std::max(read_before, (*sweep)->BestGbps(3));
    const double ai = kiln::codegen::WorkloadFlops(*w) / kiln::codegen::WorkloadBytes(*w);
    auto roof_at = [&](double gbps) { return std::min(chip.peak_gflops(), gbps * ai); };
    // The best of six sweep passes against the kernel's median is a strict bound on a machine
    // whose bandwidth moves from second to second; paired rounds read both in the same moments.
    std::vector<double> paired_pct, paired_read;
    {
      kiln::hardware::MeasureOptions round = opts;
      round.max_seconds = 0.25;
      for (int i = 0; i < kPairedRounds; ++i) {
        const double before = (*sweep)->BestGbps(1);
        const kiln::v1::Measurement m = device->Measure(*w, *compiled, round);
        const double read = (before + (*sweep)->BestGbps(1)) / 2;
        const double bound = roof_at(read);
        if (m.gflops() > 0 && bound > 0) {
          paired_pct.push_back(100 * m.gflops() / bound);
          paired_read.push_back(read);
        }
      }
    }
    const bool gemm = op == "gemm";
    // The device's baseline: every route at 1 and all threads, the fastest first among equals.
    kiln::v1::Measurement base;
    {
      BlasOnAllCores blas(chip.cores());
      base = device->MeasureBaseline(*w, opts);
    }
    Row r;
    r.op = op;
    r.shape = shape;
    r.m = gemm ? w->dims().at("M") : 0;
    r.kiln_us = ours.median_us();
    r.base_us = base.status() == kiln::v1::OK ? base.median_us() : 0;
    if (const kiln::v1::BaselineRoute* f = kiln::hardware::FastestRoute(base))
      r.base_name = absl::StrCat(f->name(), "/", f->threads(), "t");
    for (const auto& route : base.baseline_routes()) {
      const bool ok = route.status() == kiln::v1::OK;
      r.routes_json.push_back({{"name", route.name()},
                               {"threads", route.threads()},
                               {"status", kiln::v1::MeasurementStatus_Name(route.status())},
                               {"median_us", kiln::RoundTo(ok ? route.median_us() : 0.0, 3)},
                               {"prepack_us", kiln::RoundTo(route.prepack_us(), 1)}});
      absl::StrAppend(&r.routes_text, r.routes_text.empty() ? "" : ", ", route.name(), "/",
                      route.threads(), "t ",
                      ok ? absl::StrFormat("%.1f", route.median_us())
                         : kiln::v1::MeasurementStatus_Name(route.status()));
    }
    r.gflops = ours.gflops();
    r.gbps = ours.gbytes_per_s();
    r.prepack_us = ours.prepack_us();
    // Seconds per trial: the median trial (compile share + verify + measure), and end to end, the
    // job's wall time over its budget trials (plus the coordinator's round trips, the baseline
    // and the final rounds).
    r.trial_s = MedianTrialSeconds(*stub, job.id());
    r.job_s = job.trials_done() > 0
                  ? (job.finished_unix_ms() - job.started_unix_ms()) / 1e3 / job.trials_done()
                  : 0;
    r.read_gbps = read_gbps;
    r.paired_pct = Median(paired_pct);
    r.paired_read_gbps = Median(paired_read);
    const double roof = roof_at(read_gbps);
    const double roof_probe = roof_at(chip.read_gbytes_per_s());
    r.roof_pct = roof > 0 ? 100 * r.gflops / roof : 0;
    r.roof_pct_probe = roof_probe > 0 ? 100 * r.gflops / roof_probe : 0;
    r.config = kiln::codegen::ConfigKey(kiln::codegen::FromProto(job.tasks(0).best_config()));
    for (const auto& f : job.tasks(0).finalists()) {
      const std::string key = kiln::codegen::ConfigKey(kiln::codegen::FromProto(f.config()));
      r.finals_json.push_back(
          {{"config", key},
           {"score", kiln::RoundTo(f.score(), 4)},
           {"failed", f.failed()},
           {"round_median_us",
            std::vector<double>(f.round_median_us().begin(), f.round_median_us().end())}});
      absl::StrAppend(&r.finals_text, r.finals_text.empty() ? "" : "; ",
                      f.failed() ? "failed" : absl::StrFormat("%.3f", f.score()), " ", key);
    }
    auto ratio = [](double base_us, double us) { return base_us > 0 && us > 0 ? base_us / us : 0; };
    std::printf("%-38s %9.1f %8.1f %7.1f %6.1f %6.1f %7.1f %-28s %10.1f %7.2fx %7.2f\n", c.c_str(),
                r.kiln_us, r.gflops, r.gbps, r.read_gbps, r.roof_pct, r.paired_pct,
                r.base_name.empty() ? "-" : r.base_name.c_str(), r.base_us,
                ratio(r.base_us, r.kiln_us), r.trial_s);
    std::printf("  baselines: %s\n", r.routes_text.c_str());
    if (!r.finals_text.empty()) std::printf("  final rounds: %s\n", r.finals_text.c_str());
    std::fflush(stdout);
    rows.push_back(r);
  }
  // Geometric means of the speedups by group, and medians of %roofline and seconds per trial.
  auto geomean = [&](auto in_group) {
    double sum = 0;
    int n = 0;
    for (const auto& r : rows) {
      const double base = r.base_us;
      if (!in_group(r) || base <= 0 || r.kiln_us <= 0) continue;
      sum += std::log(base / r.kiln_us), ++n;
    }
    return n ? std::exp(sum / n) : 0.0;
  };
  auto median = [&](auto in_group, auto value) {
    std::vector<double> v;
    for (const auto& r : rows)
      if (in_group(r)) v.push_back(value(r));
    return Median(v);
  };
  auto minimum = [&](auto in_group) {
    double lo = 0;
    for (const auto& r : rows)
      if (in_group(r) && r.base_us > 0 && r.kiln_us > 0)
        lo = lo == 0 ? r.base_us / r.kiln_us : std::min(lo, r.base_us / r.kiln_us);
    return lo;
  };
  auto small = [](const Row& r) { return r.op == "gemm" && r.m <= 16; };
  auto big = [](const Row& r) { return r.op == "gemm" && r.m >= 128; };
  auto attention = [](const Row& r) { return r.op != "gemm"; };
  auto gemm_rows = [](const Row& r) { return r.op == "gemm"; };
  auto roof = [](const Row& r) { return r.roof_pct; };
  auto probe = [](const Row& r) { return r.roof_pct_probe; };
  auto paired = [](const Row& r) { return r.paired_pct; };
  std::printf(
      "\n(%% of roofline: against the best read sweep around each case; [paired: median of %d "
      "rounds, each timed between two sweep passes]; (against the probe at the start, %.1f "
      "GB/s))\n",
      kPairedRounds, chip.read_gbytes_per_s());
  if (median(small, roof) > 0)
    std::printf(
        "GEMM M<=16:  geomean %.2fx the fastest baseline (min %.2fx); median %.0f%% of roofline "
        "[%.0f%%] (%.0f%%)\n",
        geomean(small), minimum(small), median(small, roof), median(small, paired),
        median(small, probe));
  if (median(big, roof) > 0)
    std::printf(
        "GEMM M>=128: geomean %.2fx the fastest baseline (min %.2fx); median %.0f%% of roofline "
        "[%.0f%%] (%.0f%%)\n",
        geomean(big), minimum(big), median(big, roof), median(big, paired), median(big, probe));
  if (median(attention, roof) > 0)
    std::printf(
        "attention decode: geomean %.2fx the fastest baseline; median %.0f%% of KV bandwidth bound "
        "[%.0f%%] (%.0f%%)\n",
        geomean(attention), median(attention, roof), median(attention, paired),
        median(attention, probe));
  if (median(gemm_rows, roof) > 0)
    std::printf(
        "GEMM time per trial: median %.2f s (compile share + verify + measure); job wall / "
        "trials: median %.2f s\n",
        median(gemm_rows, [](const Row& r) { return r.trial_s; }),
        median(gemm_rows, [](const Row& r) { return r.job_s; }));
  if (!json_path.empty()) {
    using kiln::RoundTo;
    nlohmann::ordered_json json_rows = nlohmann::ordered_json::array();
    for (const Row& r : rows)
      json_rows.push_back({{"op", r.op},
                           {"shape", r.shape},
                           {"kiln_us", RoundTo(r.kiln_us, 3)},
                           {"baseline_us", RoundTo(r.base_us, 3)},
                           {"baseline", r.base_name},
                           {"baselines", r.routes_json},
                           {"gflops", RoundTo(r.gflops, 3)},
                           {"gbytes_per_s", RoundTo(r.gbps, 3)},
                           {"read_gbytes_per_s", RoundTo(r.read_gbps, 2)},
                           {"roofline_pct", RoundTo(r.roof_pct, 2)},
                           {"roofline_pct_probe", RoundTo(r.roof_pct_probe, 2)},
                           {"paired_roofline_pct", RoundTo(r.paired_pct, 2)},
                           {"paired_read_gbytes_per_s", RoundTo(r.paired_read_gbps, 2)},
                           {"prepack_us", RoundTo(r.prepack_us, 1)},
                           {"seconds_per_trial", RoundTo(r.trial_s, 3)},
                           {"job_seconds_per_trial", RoundTo(r.job_s, 3)},
                           {"config", r.config},
                           {"finalists", r.finals_json}});
    std::ofstream f(json_path);
    f << kiln::JsonText({{"openblas_core", openblas_get_corename()},
                         {"torch", kiln::hardware::torch_baseline::Name()},
                         {"chip_type", chip.chip_type()},
                         {"peak_gflops", chip.peak_gflops()},
                         {"read_gbytes_per_s", chip.read_gbytes_per_s()},
                         {"budget", budget},
                         {"rows", std::move(json_rows)}})
      << "\n";
  }
  if (!md_path.empty()) {
    std::ofstream f(md_path);
    f << "| case | Kiln µs | GFLOP/s | GB/s | read GB/s | % roofline | paired % | fastest baseline "
         "| baseline µs | vs baseline | prepack µs | s/trial | job s/trial |\n"
      << "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n";
    for (const auto& r : rows) {
      const bool gemm = r.op == "gemm";
      f << absl::StrFormat(
          "| %s | %.1f | %.1f | %.1f | %.1f | %.0f%% | %.0f%% | %s | %.1f | %.2fx | %s | %.2f "
          "| %.2f |\n",
          gemm ? r.shape : r.op + " " + r.shape, r.kiln_us, r.gflops, r.gbps, r.read_gbps,
          r.roof_pct, r.paired_pct, r.base_name.empty() ? "-" : r.base_name, r.base_us,
          r.kiln_us > 0 ? r.base_us / r.kiln_us : 0.0,
          gemm ? absl::StrFormat("%.0f", r.prepack_us) : "-", r.trial_s, r.job_s);
    }
  }
  (*worker)->Stop();
  worker_thread.join();
  (*coord)->Shutdown();
  std::error_code ec;
  std::filesystem::remove_all(dir_template, ec);
  return 0;
}
