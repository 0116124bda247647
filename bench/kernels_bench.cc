// kiln-bench-kernels: tunes decode-shaped GEMMs with Kiln (coordinator + CPU worker in this
// process, the real service path), then times the best kernel side by side with OpenBLAS sgemm
// in this process and run, with one harness (verify, then cold timing). Prints a table and
// optionally writes JSON and markdown.
#include <cblas.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "codegen/kernel_template.h"
#include "codegen/workload.h"
#include "hardware/cpu/gemm_harness.h"
#include "hardware/device.h"
#include "kiln/v1/tuning_service.grpc.pb.h"
#include "server/coordinator_server.h"
#include "workers/worker.h"

namespace {

struct Row {
  std::string shape;
  int m = 0;
  double kiln_us = 0, blas_us = 0, gflops = 0, gbps = 0, roof_pct = 0, prepack_us = 0;
  std::string config;
};

constexpr char kUsage[] =
    "usage: kiln-bench-kernels [--shape M=8,N=4096,K=4096 ...] [--suite decode|quick]\n"
    "                          [--budget N] [--json FILE] [--markdown FILE]\n";

std::vector<std::string> Suite(const std::string& name) {
  std::vector<std::string> out;
  std::vector<int> ms = {1, 2, 4, 8, 16, 32, 64, 128, 512};
  std::vector<std::pair<int, int>> nk = {{4096, 4096}, {14336, 4096}, {4096, 14336}, {1024, 4096}};
  if (name == "quick") ms = {1, 8, 16, 128, 512}, nk = {{4096, 4096}};
  for (auto [n, k] : nk)
    for (int m : ms) out.push_back(absl::StrCat("M=", m, ",N=", n, ",K=", k));
  return out;
}

// Submits one job and waits for it; returns the job (with its best config) or an error text.
std::string Tune(kiln::v1::TuningService::Stub& stub, const kiln::v1::Workload& w, int budget,
                 kiln::v1::Job* job) {
  kiln::v1::SubmitJobRequest req;
  *req.mutable_spec()->mutable_workload() = w;
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
  if (argc > 1 && std::string(argv[1]) == kiln::workers::kTrialChildFlag)
    return kiln::workers::TrialChildMain();
  std::vector<std::string> shapes;
  std::string json_path, md_path, suite = "";
  int budget = 60;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "kiln-bench-kernels: %s needs a value\n%s", a.c_str(), kUsage);
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--shape")
      shapes.push_back(next());
    else if (a == "--suite")
      suite = next();
    else if (a == "--budget")
      budget = std::atoi(next().c_str());
    else if (a == "--json")
      json_path = next();
    else if (a == "--markdown")
      md_path = next();
    else {
      std::fprintf(stderr, "kiln-bench-kernels: unknown flag %s\n%s", a.c_str(), kUsage);
      return 2;
    }
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
  std::printf("openblas: %s (core %s)\n", openblas_get_config(), openblas_get_corename());
  kiln::server::CoordinatorOptions co;
  co.listen = "127.0.0.1:0";
  co.data_dir = "/tmp/kiln-bench-kernels-data";
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
  std::printf("chip %s: peak %.0f GFLOP/s, read %.1f GB/s (measured)\n\n", chip.chip_type().c_str(),
              chip.peak_gflops(), chip.read_gbytes_per_s());
  auto stub = kiln::v1::TuningService::NewStub(
      grpc::CreateChannel((*coord)->address(), grpc::InsecureChannelCredentials()));
  std::printf("%-22s %10s %9s %8s %7s %10s %8s\n", "shape", "kiln_us", "GFLOP/s", "GB/s", "%roof",
              "openblas_us", "speedup");
  std::vector<Row> rows;
  for (const auto& shape : shapes) {
    auto w = kiln::codegen::ParseWorkload("gemm", shape);
    if (!w.ok()) {
      std::fprintf(stderr, "kiln-bench-kernels: %s\n", std::string(w.status().message()).c_str());
      return 2;
    }
    kiln::v1::Job job;
    std::string err = Tune(*stub, *w, budget, &job);
    if (!err.empty()) {
      std::printf("%-22s tuning failed: %s\n", shape.c_str(), err.c_str());
      continue;
    }
    // Side by side, same process, same harness: the tuned kernel, then OpenBLAS.
    auto tmpl = *kiln::codegen::FindTemplate(*w, "cpu");
    auto kernel = tmpl->Render(*w, kiln::codegen::FromProto(job.tasks(0).best_config()),
                               kiln::codegen::TraitsFromFingerprint(chip));
    auto compiled = device->Compile(*kernel);
    kiln::hardware::MeasureOptions opts;
    opts.max_seconds = 2;
    kiln::v1::Measurement ours = device->Measure(*w, *compiled, opts);
    kiln::v1::Measurement blas = device->MeasureBaseline(*w, opts);
    Row r;
    r.shape = shape;
    r.m = w->dims().at("M");
    r.kiln_us = ours.median_us();
    r.blas_us = blas.median_us();
    r.gflops = ours.gflops();
    r.gbps = ours.gbytes_per_s();
    r.prepack_us = ours.prepack_us();
    double ai = kiln::codegen::WorkloadFlops(*w) / kiln::codegen::WorkloadBytes(*w);
    double roof = std::min(chip.peak_gflops(), chip.read_gbytes_per_s() * ai);
    r.roof_pct = roof > 0 ? 100 * r.gflops / roof : 0;
    r.config = kiln::codegen::ConfigKey(kiln::codegen::FromProto(job.tasks(0).best_config()));
    std::printf("%-22s %10.1f %9.1f %8.1f %7.1f %10.1f %7.2fx\n", shape.c_str(), r.kiln_us,
                r.gflops, r.gbps, r.roof_pct, r.blas_us, r.blas_us / r.kiln_us);
    std::fflush(stdout);
    rows.push_back(r);
  }
  double log_small = 0, log_big = 0;
  int n_small = 0, n_big = 0;
  for (const auto& r : rows) {
    double x = std::log(r.blas_us / r.kiln_us);
    if (r.m <= 16) log_small += x, ++n_small;
    if (r.m >= 128) log_big += x, ++n_big;
  }
  if (n_small)
    std::printf("\ngeomean speedup vs openblas, M<=16: %.2fx\n", std::exp(log_small / n_small));
  if (n_big) std::printf("geomean speedup vs openblas, M>=128: %.2fx\n", std::exp(log_big / n_big));
  if (!json_path.empty()) {
    std::ofstream f(json_path);
    f << "{\"openblas_core\": \"" << openblas_get_corename() << "\", \"chip_type\": \""
      << chip.chip_type() << "\", \"peak_gflops\": " << chip.peak_gflops()
      << ", \"read_gbytes_per_s\": " << chip.read_gbytes_per_s() << ", \"budget\": " << budget
      << ", \"rows\": [";
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      f << (i ? ", " : "")
        << absl::StrFormat(
               "{\"shape\": \"%s\", \"kiln_us\": %.3f, \"openblas_us\": %.3f, \"gflops\": %.3f, "
               "\"gbytes_per_s\": %.3f, \"roofline_pct\": %.2f, \"prepack_us\": %.1f, \"config\": "
               "\"%s\"}",
               r.shape, r.kiln_us, r.blas_us, r.gflops, r.gbps, r.roof_pct, r.prepack_us, r.config);
    }
    f << "]}\n";
  }
  if (!md_path.empty()) {
    std::ofstream f(md_path);
    f << "| shape | Kiln µs | GFLOP/s | GB/s | % roofline | OpenBLAS µs | speedup | prepack µs |\n"
      << "| --- | --- | --- | --- | --- | --- | --- | --- |\n";
    for (const auto& r : rows)
      f << absl::StrFormat("| %s | %.1f | %.1f | %.1f | %.0f%% | %.1f | %.2fx | %.0f |\n", r.shape,
                           r.kiln_us, r.gflops, r.gbps, r.roof_pct, r.blas_us,
                           r.blas_us / r.kiln_us, r.prepack_us);
  }
  (*worker)->Stop();
  worker_thread.join();
  (*coord)->Shutdown();
  return 0;
}
