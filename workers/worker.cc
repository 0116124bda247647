// The worker daemon. A Boost.Asio io_context owns heartbeats and signals; a runner thread does
// the blocking lease → run → report cycle, reconnecting with backoff while the coordinator is away.
#include "workers/worker.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio.hpp>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "codegen/kernel_template.h"
#include "common/client_auth.h"
#include "common/leader_follower.h"
#include "common/lease_pacing.h"
#include "hardware/device.h"
#include "kiln/v1/worker_service.grpc.pb.h"
#include "workers/sandbox.h"
#include "workers/worker_metrics.h"

namespace kiln::workers {
namespace {

std::string Hostname() {
  char buf[256] = {0};
  gethostname(buf, sizeof(buf) - 1);
  return buf;
}

class WorkerImpl final : public Worker {
 public:
  WorkerImpl(WorkerOptions o, std::unique_ptr<hardware::Device> device, ClientAuth auth)
      : o_(std::move(o)),
        device_(std::move(device)),
        metrics_(device_->Fingerprint().chip_type()),
        auth_(std::move(auth)),
        coordinators_(o_.coordinator, [this](const std::string& address) {
          return grpc::CreateChannel(address, auth_.ChannelCredentials());
        }) {
    if (o_.name.empty()) o_.name = absl::StrCat(Hostname(), "-", o_.device);
    limits_.timeout_seconds = o_.trial_timeout_seconds;
    limits_.memory_bytes = o_.trial_memory_bytes;
  }

  absl::Status Init() { return metrics_.Serve(o_.metrics_listen); }

  absl::Status Run(bool handle_signals) override {
    boost::asio::io_context io;
    boost::asio::signal_set signals(io);
    if (handle_signals) {
      signals.add(SIGTERM);
      signals.add(SIGINT);
      signals.async_wait([this](const boost::system::error_code& ec, int sig) {
        if (ec) return;
        Log(absl::StrCat(strsignal(sig), " received: finishing the current trial, then exiting"));
        Stop();
      });
    }
    boost::asio::steady_timer heartbeat(io);
    std::function<void()> beat = [&] {
      if (stop_) {
        signals.cancel();
        return;
      }
      SendHeartbeat();
      heartbeat.expires_after(std::chrono::milliseconds(heartbeat_ms_.load()));
      heartbeat.async_wait([&](const boost::system::error_code& ec) {
        if (!ec) beat();
      });
    };
    // The stop check needs a short tick so Stop() from another thread ends the loop promptly.
    boost::asio::steady_timer stop_poll(io);
    std::function<void()> poll = [&] {
      if (stop_) {
        heartbeat.cancel();
        signals.cancel();
        return;
      }
      stop_poll.expires_after(std::chrono::milliseconds(100));
      stop_poll.async_wait([&](const boost::system::error_code& ec) {
        if (!ec) poll();
      });
    };
    beat();
    poll();
    std::thread runner([this] { RunnerLoop(); });
    io.run();
    runner.join();
    Deregister();
    Log("stopped");
    return absl::OkStatus();
  }

  void Stop() override {
    stop_ = true;
    std::lock_guard<std::mutex> lock(ctx_mu_);
    if (lease_ctx_) lease_ctx_->TryCancel();
  }

 private:
  void Log(const std::string& msg) {
    if (!o_.quiet) std::fprintf(stderr, "kiln-worker %s: %s\n", o_.name.c_str(), msg.c_str());
  }

  std::unique_ptr<grpc::ClientContext> Ctx(int seconds) {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
    auth_.Apply(ctx.get());  // every call to the coordinator is made here
    return ctx;
  }

  // One call to the coordinator in use; UNAVAILABLE (down, or a standby) moves on to the next
  // --coordinator address for the next call.
  template <typename Request, typename Response>
  grpc::Status Call(grpc::Status (v1::WorkerService::Stub::*method)(grpc::ClientContext*,
                                                                    const Request&, Response*),
                    grpc::ClientContext* ctx, const Request& req, Response* resp) {
    std::shared_ptr<v1::WorkerService::Stub> stub = coordinators_.stub();
    grpc::Status s = (stub.get()->*method)(ctx, req, resp);
    if (s.error_code() == grpc::StatusCode::UNAVAILABLE) coordinators_.Failover(stub);
    return s;
  }

  void SendHeartbeat() {
    std::string id = WorkerId();
    if (id.empty()) return;
    v1::HeartbeatRequest req;
    req.set_worker_id(id);
    v1::HeartbeatResponse resp;
    auto ctx = Ctx(5);
    grpc::Status s = Call(&v1::WorkerService::Stub::Heartbeat, ctx.get(), req, &resp);
    if (s.ok() && !resp.known()) need_register_ = true;
  }

  std::string WorkerId() {
    std::lock_guard<std::mutex> lock(ctx_mu_);
    return worker_id_;
  }

  // Sleeps up to `ms`, returning early on Stop().
  void Backoff(int ms) {
    for (int waited = 0; waited < ms && !stop_; waited += 50)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }

  bool EnsureRegistered() {
    int delay = 200;
    while (!stop_ && (need_register_ || WorkerId().empty())) {
      v1::RegisterRequest req;
      req.set_name(o_.name);
      *req.mutable_chip() = device_->Fingerprint();
      req.set_slots(1);
      req.set_worker_id(WorkerId());
      v1::RegisterResponse resp;
      auto ctx = Ctx(10);
      grpc::Status s = Call(&v1::WorkerService::Stub::Register, ctx.get(), req, &resp);
      if (s.ok()) {
        {
          std::lock_guard<std::mutex> lock(ctx_mu_);
          worker_id_ = resp.worker_id();
        }
        heartbeat_ms_ = std::max(200, resp.heartbeat_interval_ms());
        need_register_ = false;
        metrics_.SetConnected(true);
        Log(absl::StrCat("registered as ", resp.worker_id(), " (",
                         device_->Fingerprint().chip_type(), ") with ", o_.coordinator,
                         "; tuning trials run in ", TrialExecutable(v1::TUNE)));
        return true;
      }
      metrics_.SetConnected(false);
      if (s.error_code() == grpc::StatusCode::INVALID_ARGUMENT) {
        Log("registration refused: " + s.error_message());
        stop_ = true;
        return false;
      }
      Log(absl::StrCat("coordinator at ", o_.coordinator, " unavailable (", s.error_message(),
                       "); retrying in ", delay, " ms"));
      Backoff(delay);
      delay = std::min(delay * 2, 5000);
    }
    return !stop_;
  }

  void RunnerLoop() {
    int delay = 200;
    while (!stop_) {
      if (!EnsureRegistered()) break;
      v1::LeaseTrialsRequest req;
      req.set_worker_id(WorkerId());
      req.set_max_trials(pacing_.lease_size());
      req.set_wait_ms(LeasePacing::kLeaseWaitMs);
      v1::LeaseTrialsResponse resp;
      grpc::Status s;
      {
        auto ctx = Ctx(15);
        {
          std::lock_guard<std::mutex> lock(ctx_mu_);
          lease_ctx_ = ctx.get();
        }
        s = Call(&v1::WorkerService::Stub::LeaseTrials, ctx.get(), req, &resp);
        std::lock_guard<std::mutex> lock(ctx_mu_);
        lease_ctx_ = nullptr;
      }
      if (!s.ok()) {
        if (stop_) break;
        if (s.error_code() == grpc::StatusCode::NOT_FOUND) {
          need_register_ = true;
          continue;
        }
        metrics_.SetConnected(false);
        Log(absl::StrCat("lease failed (", s.error_message(), "); retrying in ", delay, " ms"));
        Backoff(delay);
        delay = std::min(delay * 2, 5000);
        continue;
      }
      delay = 200;
      metrics_.SetConnected(true);
      if (resp.trials_size() == 0) trial_server_.Stop();  // idle: give its memory back
      const auto batch_start = std::chrono::steady_clock::now();
      Precompile(resp);
      int ran = 0;
      for (int i = 0; i < resp.trials_size(); ++i) {
        if (stop_) {  // hand back what was not started
          Report();
          Release(resp, i);
          break;
        }
        RunAndReport(resp.trials(i));
        ++ran;
      }
      Report();
      pacing_.BatchRan(ran, Seconds(batch_start));
      compile_seconds_.clear();
    }
  }

  static double Seconds(std::chrono::steady_clock::time_point since) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
  }

  // Compiles every leased kernel before any is timed, on all cores at once, so compilation
  // overlaps compilation and never a measurement (timing runs alone). The compiled objects
  // land in the device's cache, where RunTrial finds them.
  // Sets compile_share_: its wall time over the kernels it compiled.
  void Precompile(const v1::LeaseTrialsResponse& resp) {
    compile_share_ = 0;
    if (resp.trials_size() < 2) return;
    const auto start = std::chrono::steady_clock::now();
    const v1::ChipFingerprint& chip = device_->Fingerprint();
    std::atomic<int> next{0};
    std::mutex mu;
    auto work = [&] {
      for (int i = next++; i < resp.trials_size() && !stop_; i = next++) {
        const v1::Trial& t = resp.trials(i);
        if (t.kind() == v1::BASELINE || !device_->Supports(t.workload())) continue;
        auto tmpl = codegen::FindTemplate(t.workload(), chip.kind());
        if (!tmpl.ok()) continue;
        auto kernel = (*tmpl)->Render(t.workload(), codegen::FromProto(t.config()),
                                      codegen::TraitsFromFingerprint(chip));
        if (!kernel.ok()) continue;
        auto compiled = device_->Compile(*kernel);
        if (!compiled.ok()) continue;  // RunTrial compiles again and reports the diagnostics
        std::lock_guard<std::mutex> lock(mu);
        compile_seconds_[t.id()] = compiled->compile_seconds;
      }
    };
    std::vector<std::thread> threads;
    int n = std::min<int>(resp.trials_size(), std::max(1u, std::thread::hardware_concurrency()));
    for (int i = 0; i < n; ++i) threads.emplace_back(work);
    for (auto& t : threads) t.join();
    if (!compile_seconds_.empty())
      compile_share_ =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
          compile_seconds_.size();
  }

  void Release(const v1::LeaseTrialsResponse& resp, int from) {
    v1::ReleaseTrialsRequest req;
    req.set_worker_id(WorkerId());
    for (int i = from; i < resp.trials_size(); ++i) req.add_trial_ids(resp.trials(i).id());
    v1::ReleaseTrialsResponse out;
    auto ctx = Ctx(5);
    Call(&v1::WorkerService::Stub::ReleaseTrials, ctx.get(), req, &out);
  }

  // After the runner has handed back its leases: tells the coordinator this worker is gone, so
  // it stops counting it alive (and jobs for its chip say they wait) at once, not after the
  // heartbeat timeout. Best effort: if it fails, the heartbeats' silence says the same later.
  void Deregister() {
    std::string id = WorkerId();
    if (id.empty()) return;
    v1::DeregisterRequest req;
    req.set_worker_id(id);
    v1::DeregisterResponse out;
    auto ctx = Ctx(3);
    grpc::Status s = Call(&v1::WorkerService::Stub::Deregister, ctx.get(), req, &out);
    if (!s.ok()) Log("could not deregister (" + s.error_message() + "); it will be seen as lost");
  }

  void RunAndReport(const v1::Trial& trial) {
    metrics_.SetBusy(true);
    const auto start = std::chrono::steady_clock::now();
    const int started_before = trial_server_.started();
    TrialOutcome outcome = RunTrial(*device_, o_.device, trial, limits_, &trial_server_);
    metrics_.TrialProcessesStarted(trial_server_.started() - started_before);
    double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    auto pre = compile_seconds_.find(trial.id());
    if (pre != compile_seconds_.end()) {  // compiled ahead: report that compile, not the cache hit
      outcome.measurement.set_compile_seconds(pre->second);
      wall += compile_share_;
    }
    outcome.measurement.set_trial_seconds(wall);
    metrics_.SetBusy(false);
    const v1::Measurement& m = outcome.measurement;
    metrics_.TrialFinished(v1::MeasurementStatus_Name(m.status()), m.compile_seconds(),
                           m.measure_seconds());
    Log(absl::StrCat(trial.id(), trial.kind() == v1::BASELINE ? " baseline " : " ",
                     v1::MeasurementStatus_Name(m.status()),
                     m.status() == v1::OK ? absl::StrCat(" ", m.median_us(), " us")
                                          : " " + m.message().substr(0, 200)));
    if (report_.results_size() == 0) held_since_ = std::chrono::steady_clock::now();
    v1::TrialResult* r = report_.add_results();
    r->set_trial_id(trial.id());
    r->set_attempt(trial.attempt());
    *r->mutable_measurement() = m;
    r->set_source_hash(outcome.source_hash);
    r->set_toolchain(outcome.toolchain);
    r->set_implementation(outcome.implementation);
    if (LeasePacing::ReportNow(Seconds(held_since_), wall)) Report();
  }

  // Sends the results held (LeasePacing: fast trials' results go together).
  void Report() {
    if (report_.results_size() == 0) return;
    v1::ReportResultsRequest req = std::exchange(report_, {});
    req.set_worker_id(WorkerId());
    // Reports are idempotent per attempt, so retrying is safe; give up only when stopping.
    for (int delay = 200, tries = 0;; delay = std::min(delay * 2, 5000), ++tries) {
      v1::ReportResultsResponse resp;
      auto ctx = Ctx(10);
      grpc::Status s = Call(&v1::WorkerService::Stub::ReportResults, ctx.get(), req, &resp);
      if (s.ok()) return;
      if (s.error_code() == grpc::StatusCode::NOT_FOUND) {
        need_register_ = true;
        EnsureRegistered();
        req.set_worker_id(WorkerId());
        continue;
      }
      if (s.error_code() == grpc::StatusCode::INVALID_ARGUMENT) {
        Log("report refused: " + s.error_message());
        return;
      }
      if (stop_ && tries >= 3) {
        Log(absl::StrCat(
            "could not report ", req.results(0).trial_id(),
            req.results_size() > 1 ? absl::StrCat(" and ", req.results_size() - 1, " more") : "",
            " before exiting; the leases will expire"));
        return;
      }
      Log(absl::StrCat("report failed (", s.error_message(), "); retrying in ", delay, " ms"));
      Backoff(delay);
      if (stop_) std::this_thread::sleep_for(std::chrono::milliseconds(delay));
    }
  }

  WorkerOptions o_;
  std::unique_ptr<hardware::Device> device_;
  WorkerMetrics metrics_;
  ClientAuth auth_;  // before coordinators_: the channels are made from it
  LeaderFollower<v1::WorkerService> coordinators_;
  SandboxLimits limits_;
  TrialServer trial_server_;  // measures tuning trials; stopped while there is no work
  std::atomic<bool> stop_{false};
  std::atomic<bool> need_register_{false};
  std::atomic<int> heartbeat_ms_{2000};
  std::mutex ctx_mu_;
  grpc::ClientContext* lease_ctx_ = nullptr;
  std::string worker_id_;
  std::map<std::string, double> compile_seconds_;  // trial id -> seconds, from Precompile
  LeasePacing pacing_{o_.compile_ahead, o_.max_lease};
  v1::ReportResultsRequest report_;  // results held, not yet sent (Report)
  std::chrono::steady_clock::time_point held_since_;
  double compile_share_ = 0;  // the last Precompile's wall time over the kernels it compiled
};

}  // namespace

absl::StatusOr<std::unique_ptr<Worker>> NewWorker(const WorkerOptions& o) {
  if (o.trial_timeout_seconds <= 0)
    return absl::InvalidArgumentError("--trial-timeout: must be > 0");
  // Credentials are read once, before the device is opened: a missing file fails at once.
  auto auth = ClientAuth::Load({o.tls_ca, o.tls_cert, o.tls_key, o.token_file});
  if (!auth.ok()) return auth.status();
  auto device = hardware::OpenDevice(o.device);
  if (!device.ok()) return device.status();
  auto w = std::make_unique<WorkerImpl>(o, std::move(*device), std::move(*auth));
  if (auto s = w->Init(); !s.ok()) return s;
  return std::unique_ptr<Worker>(std::move(w));
}

}  // namespace kiln::workers
