// kiln-bench-load: N simulated workers, gRPC clients of a real coordinator over loopback, lease
// and report as fast as they can (after an optional fake measurement time) while one job of T
// trials runs; prints trials/s end to end, lease and report latency, and the coordinator's CPU,
// store operations and memory per trial.
//
// The coordinator runs as a child process (build/server/kiln-coordinator), so that its CPU time
// and RSS (from /proc/PID) are its own and not the clients'.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/daemon.h"
#include "common/flags.h"
#include "common/json_text.h"
#include "common/lease_pacing.h"
#include "common/subprocess.h"
#include "grpcpp/grpcpp.h"
#include "kiln/v1/tuning_service.grpc.pb.h"
#include "kiln/v1/worker_service.grpc.pb.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  int workers = 4;
  int idle_workers = 0;  // of another chip type, with no job: they only long-poll
  int trials = 200;
  std::string store;  // empty: SQLite in the temp data dir
  std::string strategy = "random";
  double fake_us = 0;  // the simulated measurement's duration, per trial
  int jobs = 1;        // run one after the other on the same coordinator and fleet
  int batch = 0;       // LeaseTrials max_trials; 0: kiln-worker's pacing (common/lease_pacing.h)
  std::string coordinator;
  double timeout_s = 600;
  bool json = false;
  bool keep = false;  // keep the temp data dir (its coordinator.log)
};

constexpr const char* kUsage =
    "usage: kiln-bench-load --workers N --trials T [--jobs J] [--store URL] [--strategy S]\n"
    "                       [--fake-us US] [--idle-workers I]\n"
    "                       [--batch B] [--coordinator PATH] [--timeout SECONDS] [--keep]\n"
    "                       [--json]\n"
    "--store: sqlite:PATH or postgresql://USER@HOST:PORT/DB (default: SQLite in a temp dir)\n"
    "--jobs: J jobs of T trials one after the other (default 1); rss_after_first_job_mb\n"
    "         against rss_mb shows what finished jobs keep in memory\n"
    "--fake-us: each simulated worker sleeps this long per trial, +-20% (default 0)\n"
    "--idle-workers: I more workers of another chip type, for which no job comes: a lab\n"
    "         whose other chips are idle (default 0)\n"
    "--batch: trials asked for per LeaseTrials, 1..64, each lease's results in one report;\n"
    "         default auto: kiln-worker's pacing (4 a lease, doubling up to 64 while trials\n"
    "         take under 50 ms; results reported together unless a trial took 50 ms or a\n"
    "         result waited 100 ms)\n"
    "--coordinator: the kiln-coordinator binary (default: ../server/kiln-coordinator from\n"
    "             this program in a build tree, else kiln-coordinator beside it)\n";

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(q * (v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

// The synthetic replay space: 6 knobs of 10 values (a million configurations), no bitmap, so
// every combination is valid and the coordinator's proposals never run out.
kiln::v1::ChipFingerprint SimChip(const std::string& chip_type = "replay-load-sim") {
  kiln::v1::ChipFingerprint chip;
  chip.set_kind("replay");
  chip.set_model("kiln-bench-load simulated chip");
  chip.set_chip_type(chip_type);
  chip.set_cores(1);
  for (const char* name : {"k0", "k1", "k2", "k3", "k4", "k5"}) {
    auto* knob = chip.add_replay_knobs();
    knob->set_name(name);
    for (int v = 1; v <= 10; ++v) knob->add_values(v);
  }
  return chip;
}

// A deterministic figure per configuration (so a re-measurement confirms the first one).
double FakeMedianUs(const kiln::v1::Config& config) {
  std::map<std::string, int64_t> knobs(config.knobs().begin(), config.knobs().end());
  uint64_t h = 1469598103934665603ull;
  for (const auto& [k, v] : knobs) {
    for (char c : k) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    h = (h ^ static_cast<uint64_t>(v)) * 1099511628211ull;
  }
  return 10.0 + static_cast<double>(h % 100000) / 1000.0;
}

kiln::v1::TrialResult ResultOf(const kiln::v1::Trial& t, double fake_us) {
  kiln::v1::TrialResult r;
  r.set_trial_id(t.id());
  r.set_attempt(t.attempt());
  r.set_implementation(t.kind() == kiln::v1::BASELINE ? "replay-baseline" : "kiln");
  r.set_source_hash("load-sim");
  r.set_toolchain("none");
  auto* m = r.mutable_measurement();
  m->set_status(kiln::v1::OK);
  const double us = FakeMedianUs(t.config());
  m->set_median_us(us);
  m->set_p10_us(us);
  m->set_p90_us(us);
  for (int i = 0; i < 3; ++i) m->add_samples_us(us);
  m->set_trial_seconds(fake_us / 1e6);
  m->set_measure_seconds(fake_us / 1e6);
  return r;
}

// --- the coordinator child --------------------------------------------------------------------

struct Coordinator {
  pid_t pid = -1;
  std::string address;
  int metrics_port = 0;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::optional<Coordinator> StartCoordinatorChild(const Options& o, const std::string& dir,
                                                 std::string* error) {
  std::vector<std::string> args = {o.coordinator, "--listen",    "127.0.0.1:0",
                                   "--data-dir",  dir,           "--metrics-listen",
                                   "127.0.0.1:0", "--port-file", dir + "/port"};
  if (!o.store.empty()) args.insert(args.end(), {"--store", o.store});
  const std::string log = dir + "/coordinator.log";
  pid_t pid = fork();
  if (pid < 0) {
    *error = std::string("fork: ") + std::strerror(errno);
    return std::nullopt;
  }
  if (pid == 0) {
    FILE* f = std::fopen(log.c_str(), "w");
    if (f) {
      dup2(fileno(f), 1);
      dup2(fileno(f), 2);
    }
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    std::fprintf(stderr, "exec %s: %s\n", argv[0], std::strerror(errno));
    _exit(127);
  }
  Coordinator c;
  c.pid = pid;
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  const std::regex metrics_re("metrics on :([0-9]+)");
  while (Clock::now() < deadline) {
    int status;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      *error = "the coordinator exited at start (" +
               (WIFEXITED(status) ? "status " + std::to_string(WEXITSTATUS(status))
                                  : "signal " + std::to_string(WTERMSIG(status))) +
               "): " + ReadFile(log).substr(0, 500);
      return std::nullopt;
    }
    std::string port = ReadFile(dir + "/port");
    std::smatch m;
    std::string text = ReadFile(log);
    if (!port.empty() && port.back() == '\n' && std::regex_search(text, m, metrics_re)) {
      c.address = "127.0.0.1:" + port.substr(0, port.size() - 1);
      c.metrics_port = std::atoi(m[1].str().c_str());
      return c;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  *error = "the coordinator did not start within 30 s: " + ReadFile(log).substr(0, 500);
  return std::nullopt;
}

void StopCoordinator(Coordinator& c) {
  if (c.pid <= 0) return;
  kill(c.pid, SIGTERM);
  for (int i = 0; i < 100; ++i) {
    if (waitpid(c.pid, nullptr, WNOHANG) == c.pid) {
      c.pid = -1;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  kill(c.pid, SIGKILL);
  waitpid(c.pid, nullptr, 0);
  c.pid = -1;
}

// utime + stime of the process, in microseconds.
double CpuUs(pid_t pid) {
  std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  size_t close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream in(stat.substr(close + 2));
  std::string field;
  double utime = 0, stime = 0;
  // Fields after "(comm)": state is field 3; utime and stime are fields 14 and 15.
  for (int i = 3; i <= 15 && in >> field; ++i) {
    if (i == 14) utime = std::atof(field.c_str());
    if (i == 15) stime = std::atof(field.c_str());
  }
  return (utime + stime) * 1e6 / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// This process's user + system CPU time, in microseconds (the simulated fleet's share).
double SelfCpuUs() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e6 + u.ru_utime.tv_usec + u.ru_stime.tv_usec;
}

// A line of /proc/PID/status in MB ("VmRSS", "VmHWM"; kB there).
double StatusMb(pid_t pid, const std::string& key) {
  std::istringstream in(ReadFile("/proc/" + std::to_string(pid) + "/status"));
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key + ":", 0) == 0) return std::atof(line.c_str() + key.size() + 1) / 1024.0;
  return 0;
}

// GET /metrics from the coordinator's loopback metrics port ("" when it does not answer).
std::string ScrapeMetrics(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    const std::string req = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    if (send(fd, req.data(), req.size(), 0) == static_cast<ssize_t>(req.size())) {
      char buf[65536];
      ssize_t n;
      while ((n = recv(fd, buf, sizeof buf, 0)) > 0) out.append(buf, n);
    }
  }
  close(fd);
  return out;
}

// The sum of a counter's samples whose label text contains every one of `labels`.
double CounterSum(const std::string& text, const std::string& name,
                  const std::vector<std::string>& labels = {}) {
  std::istringstream in(text);
  std::string line;
  double sum = 0;
  while (std::getline(in, line)) {
    if (line.rfind(name, 0) != 0) continue;
    const char next = line.size() > name.size() ? line[name.size()] : '\0';
    if (next != '{' && next != ' ') continue;
    bool all = true;
    for (const auto& l : labels) all = all && line.find(l) != std::string::npos;
    if (!all) continue;
    size_t space = line.rfind(' ');
    if (space != std::string::npos) sum += std::atof(line.c_str() + space + 1);
  }
  return sum;
}

// Each value of `label` among a counter's samples, with the sum of its samples.
std::map<std::string, double> CounterByLabel(const std::string& text, const std::string& name,
                                             const std::string& label) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  std::string line;
  const std::string key = label + "=\"";
  while (std::getline(in, line)) {
    if (line.rfind(name + "{", 0) != 0) continue;
    size_t at = line.find(key);
    size_t space = line.rfind(' ');
    if (at == std::string::npos || space == std::string::npos) continue;
    at += key.size();
    out[line.substr(at, line.find('"', at) - at)] += std::atof(line.c_str() + space + 1);
  }
  return out;
}

// --- the simulated workers --------------------------------------------------------------------

struct WorkerStats {
  std::vector<double> lease_ms;  // leases that returned trials
  // The same but each worker's first: a fleet that starts at once queues its first leases
  // behind each other (the job's binding and first proposals), which a running fleet does not.
  std::vector<double> lease_after_first_ms;
  std::vector<double> report_ms;
  int64_t empty_leases = 0, trials = 0, errors = 0, not_accepted = 0;
  std::string first_error;
};

std::shared_ptr<grpc::Channel> NewChannel(const std::string& address) {
  grpc::ChannelArguments args;
  // Each simulated worker its own connection, as separate machines would have.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

// What the simulated workers share with the driver.
struct FleetClock {
  std::atomic<bool> stop{false};
  std::atomic<int> polling{0};  // workers that have sent their first LeaseTrials
  // When the current job was submitted (steady clock, ns): a lease sent while the fleet had no
  // job waited for one, which is no latency of the coordinator's, so it counts from here.
  std::atomic<int64_t> job_since_ns{0};
};

void RunWorker(const Options& o, kiln::v1::WorkerService::Stub* stub, const std::string& id,
               FleetClock* fleet, WorkerStats* stats) {
  const std::atomic<bool>& stop = fleet->stop;
  auto fail = [&](const grpc::Status& s, const char* what) {
    stats->errors++;
    if (stats->first_error.empty())
      stats->first_error = std::string(what) + ": " + s.error_message();
  };
  // --batch auto: kiln-worker's own pacing (its default --compile-ahead 4 for slow trials).
  kiln::LeasePacing pacing(4);
  std::mt19937_64 rng(std::hash<std::string>()(id));
  kiln::v1::ReportResultsRequest report;
  auto send = [&] {
    if (report.results_size() == 0) return;
    report.set_worker_id(id);
    kiln::v1::ReportResultsResponse answer;
    grpc::ClientContext rctx;
    rctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    auto t2 = Clock::now();
    grpc::Status s = stub->ReportResults(&rctx, report, &answer);
    stats->report_ms.push_back(Ms(Clock::now() - t2));
    if (s.ok()) {
      stats->trials += report.results_size();
      stats->not_accepted += report.results_size() - answer.accepted();
    } else {
      fail(s, "ReportResults");
    }
    report.Clear();
  };
  while (!stop) {
    kiln::v1::LeaseTrialsRequest lease;
    lease.set_worker_id(id);
    lease.set_max_trials(o.batch > 0 ? o.batch : pacing.lease_size());
    lease.set_wait_ms(kiln::LeasePacing::kLeaseWaitMs);  // as kiln-worker
    kiln::v1::LeaseTrialsResponse leased;
    grpc::ClientContext lctx;
    lctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    auto t0 = Clock::now();
    if (stats->lease_ms.empty() && stats->empty_leases == 0) fleet->polling++;
    grpc::Status s = stub->LeaseTrials(&lctx, lease, &leased);
    auto t1 = Clock::now();
    t0 = std::max(t0, Clock::time_point(std::chrono::nanoseconds(fleet->job_since_ns.load())));
    if (!s.ok()) {
      fail(s, "LeaseTrials");
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    if (leased.trials().empty()) {
      stats->empty_leases++;
      continue;
    }
    stats->lease_ms.push_back(Ms(t1 - t0));
    if (stats->lease_ms.size() > 1) stats->lease_after_first_ms.push_back(Ms(t1 - t0));
    if (o.batch > 0) {  // a fixed lease size: every result in one report a lease
      if (o.fake_us > 0)
        std::this_thread::sleep_for(
            std::chrono::microseconds(static_cast<int64_t>(o.fake_us * leased.trials_size())));
      for (const auto& t : leased.trials()) *report.add_results() = ResultOf(t, o.fake_us);
      send();
      continue;
    }
    Clock::time_point held_since;
    for (const auto& t : leased.trials()) {
      // Each trial takes fake_us +-20%: kernels differ, so a fleet's trials do not all end in
      // the same millisecond (without it, workers started together report in lockstep bursts).
      const double us = o.fake_us * std::uniform_real_distribution<>(0.8, 1.2)(rng);
      if (us > 0) std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(us)));
      if (report.results_size() == 0) held_since = Clock::now();
      *report.add_results() = ResultOf(t, us);
      if (kiln::LeasePacing::ReportNow(Ms(Clock::now() - held_since) / 1e3, us / 1e6)) send();
    }
    send();
    pacing.BatchRan(leased.trials_size(), Ms(Clock::now() - t1) / 1e3);
  }
}

void RaiseFileLimit() {
  rlimit r;
  if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
  }
}

const char* StateName(kiln::v1::JobState s) { return kiln::v1::JobState_Name(s).c_str(); }

}  // namespace

int main(int argc, char** argv) {
  kiln::DisableMutexDeadlockDetection();  // the simulated workers' gRPC, as kiln-worker's
  Options o;
  auto number = [](const std::string& v, double lo, double hi, const char* flag, double* out) {
    char* end = nullptr;
    double x = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0' || !(x >= lo && x <= hi)) {
      char why[160];
      std::snprintf(why, sizeof why, "%s: expected a number in %g..%g, got '%s'", flag, lo, hi,
                    v.substr(0, 20).c_str());
      return std::string(why);
    }
    *out = x;
    return std::string();
  };
  auto integer = [&](int* dst, double lo, double hi, const char* flag) {
    return [=, &number](const std::string& v) {
      double x = 0;
      std::string why = number(v, lo, hi, flag, &x);
      if (why.empty()) *dst = static_cast<int>(x);
      return why;
    };
  };
  auto text = [](std::string* dst) {
    return [dst](const std::string& v) {
      *dst = v;
      return std::string();
    };
  };
  auto flag_switch = [](bool* dst) {
    return [dst](const std::string&) {
      *dst = true;
      return std::string();
    };
  };
  bool help = false;
  const std::vector<kiln::Flag> flags = {
      {"--workers", kiln::Flag::kValue, integer(&o.workers, 1, 4096, "--workers")},
      {"--idle-workers", kiln::Flag::kValue, integer(&o.idle_workers, 0, 4096, "--idle-workers")},
      {"--trials", kiln::Flag::kValue, integer(&o.trials, 1, 1000000, "--trials")},
      {"--jobs", kiln::Flag::kValue, integer(&o.jobs, 1, 10000, "--jobs")},
      {"--batch", kiln::Flag::kValue,
       [&](const std::string& v) {
         if (v == "auto") return (o.batch = 0, std::string());
         return integer(&o.batch, 1, 64, "--batch")(v);
       }},
      {"--store", kiln::Flag::kValue, text(&o.store)},
      {"--strategy", kiln::Flag::kValue, text(&o.strategy)},
      {"--coordinator", kiln::Flag::kValue, text(&o.coordinator)},
      {"--fake-us", kiln::Flag::kValue,
       [&](const std::string& v) { return number(v, 0, 60e6, "--fake-us", &o.fake_us); }},
      {"--timeout", kiln::Flag::kValue,
       [&](const std::string& v) { return number(v, 1, 86400, "--timeout", &o.timeout_s); }},
      {"--json", kiln::Flag::kSwitch, flag_switch(&o.json)},
      {"--keep", kiln::Flag::kSwitch, flag_switch(&o.keep)},
      {"--help", kiln::Flag::kSwitch, flag_switch(&help), /*stop=*/true},
  };
  if (auto err = kiln::ParseFlags(argc, argv, flags)) {
    std::fprintf(stderr, "kiln-bench-load: %s\n%s", err->message.c_str(), kUsage);
    return 2;
  }
  if (help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (o.coordinator.empty()) {  // the build tree's layout, else an installed bin/ beside this one
    const std::filesystem::path self_dir =
        std::filesystem::path(kiln::SelfExecutable()).parent_path();
    o.coordinator = (self_dir.parent_path() / "server" / "kiln-coordinator").string();
    if (access(o.coordinator.c_str(), X_OK) != 0)
      o.coordinator = (self_dir / "kiln-coordinator").string();
  }
  if (access(o.coordinator.c_str(), X_OK) != 0) {
    std::fprintf(stderr, "kiln-bench-load: no coordinator binary at %s (--coordinator PATH)\n",
                 o.coordinator.c_str());
    return 1;
  }
  RaiseFileLimit();  // one connection per simulated worker, on both sides (inherited by the child)
  char tmpl[] = "/tmp/kiln-bench-load-XXXXXX";
  if (!mkdtemp(tmpl)) {
    std::perror("kiln-bench-load: mkdtemp");
    return 1;
  }
  const std::string dir = tmpl;
  std::string error;
  auto coordinator = StartCoordinatorChild(o, dir, &error);
  if (!coordinator) {
    std::fprintf(stderr, "kiln-bench-load: %s\n", error.c_str());
    if (!o.keep) std::filesystem::remove_all(dir);
    return 1;
  }
  int rc = 0;
  {
    // Register the fleet: one connection (channel) per simulated worker.
    std::vector<std::shared_ptr<grpc::Channel>> channels;
    std::vector<std::unique_ptr<kiln::v1::WorkerService::Stub>> stubs;
    const int fleet_size = o.workers + o.idle_workers;
    std::vector<std::string> ids(fleet_size);
    const kiln::v1::ChipFingerprint chip = SimChip(), idle_chip = SimChip("replay-load-idle");
    for (int i = 0; i < fleet_size; ++i) {
      channels.push_back(NewChannel(coordinator->address));
      stubs.push_back(kiln::v1::WorkerService::NewStub(channels.back()));
      kiln::v1::RegisterRequest req;
      req.set_name("load-sim-" + std::to_string(i));
      *req.mutable_chip() = i < o.workers ? chip : idle_chip;
      req.set_slots(1);
      kiln::v1::RegisterResponse resp;
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
      grpc::Status s = stubs.back()->Register(&ctx, req, &resp);
      if (!s.ok()) {
        std::fprintf(stderr, "kiln-bench-load: Register of worker %d: %s\n", i,
                     s.error_message().c_str());
        StopCoordinator(*coordinator);
        return 1;
      }
      ids[i] = resp.worker_id();
    }
    auto tuning = kiln::v1::TuningService::NewStub(NewChannel(coordinator->address));

    FleetClock fleet;
    std::vector<WorkerStats> stats(fleet_size);
    std::vector<std::thread> threads;
    threads.reserve(o.workers);
    const std::string before_metrics = ScrapeMetrics(coordinator->metrics_port);
    const double cpu0 = CpuUs(coordinator->pid);
    const double client_cpu0 = SelfCpuUs();
    const double rss_before_mb = StatusMb(coordinator->pid, "VmRSS");  // fleet registered, no job

    kiln::v1::SubmitJobRequest submit;
    auto* spec = submit.mutable_spec();
    spec->mutable_workload()->set_op(kiln::v1::GEMM);
    spec->mutable_workload()->set_dtype(kiln::v1::FP32);
    for (const char* d : {"M", "N", "K"}) (*spec->mutable_workload()->mutable_dims())[d] = 256;
    spec->set_chip(chip.chip_type());
    spec->set_budget_trials(o.trials);
    spec->set_strategy(o.strategy);
    spec->set_seed(1);
    kiln::v1::SubmitJobResponse submitted;
    for (int i = 0; i < fleet_size; ++i)
      threads.emplace_back(RunWorker, std::cref(o), stubs[i].get(), ids[i], &fleet, &stats[i]);
    // The fleet is up and polling before the job comes, as a lab's is: the time its threads take
    // to start is no dispatch time.
    for (int waited_ms = 0; fleet.polling < fleet_size && waited_ms < 30000; waited_ms += 10)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // their leases parked
    const auto start = Clock::now();

    kiln::v1::Job job;
    Clock::time_point end;
    double rss_peak_mb = 0, rss_first_job_mb = 0, done = 0;
    for (int j = 0; j < o.jobs && rc == 0; ++j) {
      spec->set_seed(1 + j);
      {
        grpc::ClientContext ctx;
        fleet.job_since_ns =
            std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
                .count();
        grpc::Status s = tuning->SubmitJob(&ctx, submit, &submitted);
        if (!s.ok()) {
          std::fprintf(stderr, "kiln-bench-load: SubmitJob: %s\n", s.error_message().c_str());
          rc = 1;
          break;
        }
      }
      for (;;) {
        grpc::ClientContext ctx;
        kiln::v1::GetJobRequest req;
        req.set_job_id(submitted.job_id());
        grpc::Status s = tuning->GetJob(&ctx, req, &job);
        end = Clock::now();
        rss_peak_mb = std::max(rss_peak_mb, StatusMb(coordinator->pid, "VmRSS"));
        if (s.ok() && job.state() != kiln::v1::QUEUED && job.state() != kiln::v1::RUNNING) break;
        if (int status; waitpid(coordinator->pid, &status, WNOHANG) == coordinator->pid) {
          coordinator->pid = -1;
          std::fprintf(stderr, "kiln-bench-load: the coordinator exited during the job: %s\n",
                       ReadFile(dir + "/coordinator.log").substr(0, 500).c_str());
          rc = 1;
          break;
        }
        if (std::chrono::duration<double>(end - start).count() > o.timeout_s) {
          std::fprintf(stderr,
                       "kiln-bench-load: the job did not finish in %.0f s (%d trials done)\n",
                       o.timeout_s, job.trials_done());
          rc = 1;
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      done += job.trials_done();
      if (job.state() != kiln::v1::SUCCEEDED || job.trials_done() != o.trials) rc = 1;
      if (j == 0) {
        // After the coordinator's next tick a finished job holds no trials in memory.
        std::this_thread::sleep_for(std::chrono::milliseconds(600));
        rss_first_job_mb = StatusMb(coordinator->pid, "VmRSS");
      }
    }
    const double cpu_us = CpuUs(coordinator->pid) - cpu0;
    const double client_cpu_us = SelfCpuUs() - client_cpu0;
    const double rss_mb = StatusMb(coordinator->pid, "VmRSS");
    const double hwm_mb = StatusMb(coordinator->pid, "VmHWM");
    const std::string after_metrics = ScrapeMetrics(coordinator->metrics_port);
    fleet.stop = true;
    for (auto& t : threads) t.join();

    WorkerStats all;
    int64_t idle_leases = 0, idle_trials = 0;
    for (int i = o.workers; i < fleet_size; ++i) {
      idle_leases += stats[i].empty_leases + static_cast<int64_t>(stats[i].lease_ms.size());
      idle_trials += stats[i].trials;
    }
    stats.resize(o.workers);  // the figures are the busy workers'
    for (auto& s : stats) {
      all.lease_ms.insert(all.lease_ms.end(), s.lease_ms.begin(), s.lease_ms.end());
      all.lease_after_first_ms.insert(all.lease_after_first_ms.end(),
                                      s.lease_after_first_ms.begin(), s.lease_after_first_ms.end());
      all.report_ms.insert(all.report_ms.end(), s.report_ms.begin(), s.report_ms.end());
      all.empty_leases += s.empty_leases;
      all.trials += s.trials;
      all.errors += s.errors;
      all.not_accepted += s.not_accepted;
      if (all.first_error.empty()) all.first_error = s.first_error;
    }
    const double seconds = std::chrono::duration<double>(end - start).count();
    const double per_trial = done > 0 ? 1.0 / done : 0;
    auto delta = [&](const std::string& name, const std::vector<std::string>& labels) {
      return CounterSum(after_metrics, name, labels) - CounterSum(before_metrics, name, labels);
    };
    const double store_ops = delta("kiln_store_operations_total", {});
    const double store_writes = delta("kiln_store_operations_total", {"op=\"write\""});
    const double rpcs = delta("kiln_rpc_requests_total", {});
    const bool succeeded = job.state() == kiln::v1::SUCCEEDED;
    if (!succeeded) rc = 1;
    if (done != 1.0 * o.trials * o.jobs) rc = 1;

    nlohmann::ordered_json out;
    out["workers"] = o.workers;
    if (o.idle_workers > 0) {
      out["idle_workers"] = o.idle_workers;
      out["idle_leases"] = idle_leases;  // answered: each an idle long-poll run to its end
      out["idle_trials"] = idle_trials;  // none: no job is for their chip type
    }
    out["trials"] = o.trials;
    out["strategy"] = o.strategy;
    out["store"] =
        o.store.empty() ? "sqlite" : (o.store.rfind("postgres", 0) == 0 ? "postgresql" : "sqlite");
    out["fake_us"] = o.fake_us;
    if (o.batch > 0)
      out["batch"] = o.batch;
    else
      out["batch"] = "auto";
    out["jobs"] = o.jobs;
    out["job_state"] = kiln::v1::JobState_Name(job.state());
    out["job_trials_done"] = job.trials_done();
    out["trials_reported"] = all.trials;  // every kind: baseline, re-measurements, final rounds
    out["seconds"] = kiln::RoundTo(seconds, 3);
    out["trials_per_s"] = kiln::RoundTo(seconds > 0 ? done / seconds : 0, 1);
    out["round_trips_per_s"] = kiln::RoundTo(seconds > 0 ? all.trials / seconds : 0, 1);
    out["lease_p50_ms"] = kiln::RoundTo(Percentile(all.lease_ms, 0.5), 3);
    out["lease_p99_ms"] = kiln::RoundTo(Percentile(all.lease_ms, 0.99), 3);
    out["lease_p99_after_first_ms"] = kiln::RoundTo(Percentile(all.lease_after_first_ms, 0.99), 3);
    std::vector<double> first_ms;
    for (const auto& s : stats)
      if (!s.lease_ms.empty()) first_ms.push_back(s.lease_ms.front());
    out["first_lease_p50_ms"] = kiln::RoundTo(Percentile(first_ms, 0.5), 3);
    out["first_lease_max_ms"] = kiln::RoundTo(Percentile(first_ms, 1.0), 3);
    out["report_p50_ms"] = kiln::RoundTo(Percentile(all.report_ms, 0.5), 3);
    out["report_p99_ms"] = kiln::RoundTo(Percentile(all.report_ms, 0.99), 3);
    out["empty_leases"] = all.empty_leases;
    out["rpc_errors"] = all.errors;
    out["results_not_accepted"] = all.not_accepted;
    out["cpu_us_per_trial"] = kiln::RoundTo(cpu_us * per_trial, 1);
    out["coordinator_cpu_s"] = kiln::RoundTo(cpu_us / 1e6, 3);
    // The simulated fleet shares the machine's cores with the coordinator: what it took.
    out["client_cpu_us_per_trial"] = kiln::RoundTo(client_cpu_us * per_trial, 1);
    out["store_us_per_trial"] =
        kiln::RoundTo(delta("kiln_store_operation_seconds_sum", {}) * 1e6 * per_trial, 1);
    out["store_ops_per_trial"] = kiln::RoundTo(store_ops * per_trial, 3);
    out["store_writes_per_trial"] = kiln::RoundTo(store_writes * per_trial, 3);
    out["rpcs_per_trial"] = kiln::RoundTo(rpcs * per_trial, 3);
    {
      // Which store operations the trials cost ("write", "find_record", ...).
      auto after = CounterByLabel(after_metrics, "kiln_store_operations_total", "op");
      auto before = CounterByLabel(before_metrics, "kiln_store_operations_total", "op");
      nlohmann::ordered_json by_op = nlohmann::ordered_json::object();
      for (const auto& [op, n] : after)
        if (n - before[op] > 0) by_op[op] = kiln::RoundTo((n - before[op]) * per_trial, 3);
      out["store_ops_per_trial_by_op"] = by_op;
    }
    out["rss_mb"] = kiln::RoundTo(rss_mb, 1);
    out["rss_before_job_mb"] = kiln::RoundTo(rss_before_mb, 1);
    // With --jobs N: the RSS after the first job finished; the last one's is rss_mb. Memory that
    // follows the active work keeps them close however many jobs finished.
    if (o.jobs > 1) out["rss_after_first_job_mb"] = kiln::RoundTo(rss_first_job_mb, 1);
    out["rss_peak_mb"] = kiln::RoundTo(std::max(rss_peak_mb, hwm_mb), 1);
    if (!all.first_error.empty()) out["first_error"] = all.first_error.substr(0, 200);
    if (!succeeded && !job.message().empty()) out["job_message"] = job.message().substr(0, 200);

    if (o.json) {
      std::printf("%s\n", kiln::JsonText(out).c_str());
    } else {
      std::printf("kiln-bench-load: %d workers, %d trials, strategy %s, store %s, fake %.0f us\n",
                  o.workers, o.trials, o.strategy.c_str(), out["store"].get<std::string>().c_str(),
                  o.fake_us);
      for (const auto& [key, value] : out.items()) {
        if (key == "workers" || key == "trials" || key == "strategy" || key == "store" ||
            key == "fake_us")
          continue;
        std::printf("  %-24s %s\n", key.c_str(),
                    value.is_string() ? value.get<std::string>().c_str() : value.dump().c_str());
      }
    }
    if (!succeeded)
      std::fprintf(stderr, "kiln-bench-load: the job ended %s, not SUCCEEDED\n",
                   StateName(job.state()));
    else if (done != o.trials)
      std::fprintf(stderr, "kiln-bench-load: the job counted %d trials, not %d\n",
                   job.trials_done(), o.trials);
  }
  StopCoordinator(*coordinator);
  if (!o.keep)
    std::filesystem::remove_all(dir);
  else
    std::fprintf(stderr, "kiln-bench-load: kept %s\n", dir.c_str());
  return rc;
}
