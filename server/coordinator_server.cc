#include "server/coordinator_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/daemon.h"
#include "common/metrics_http.h"
#include "common/status.h"
#include "server/authenticator.h"
#include "server/data_dir_lock.h"
#include "server/metered_store.h"
#include "server/rpc_interceptor.h"
#include "server/services.h"

namespace kiln::server {
namespace {

class RunningCoordinatorImpl final : public RunningCoordinator {
 public:
  ~RunningCoordinatorImpl() override { Shutdown(); }

  absl::Status Start(const CoordinatorOptions& o) {
    ASSIGN_OR_RETURN(HostPort listen, ParseHostPort(o.listen, "--listen"));
    // Credentials first: a bad tokens file or an exposed plaintext listener stops the start
    // before anything is opened.
    ASSIGN_OR_RETURN(auth_,
                     Authenticator::Load({o.tls_cert, o.tls_key, o.tls_client_ca, o.tokens}));
    if (!IsLoopbackHost(listen.host) && (o.tls_cert.empty() || o.tokens.empty())) {
      if (!o.insecure)
        return absl::FailedPreconditionError(absl::StrCat(
            "--listen ", o.listen,
            " is reachable beyond this host: give --tls-cert, --tls-key and --tokens (see "
            "docs/security.md), listen on 127.0.0.1, or say --insecure to serve anyone who "
            "reaches the port"));
      if (!o.quiet)
        std::fprintf(stderr,
                     "kiln-coordinator: WARNING: --insecure: serving %s without %s; anyone who "
                     "reaches the port may submit, cancel and register workers\n",
                     o.listen.c_str(),
                     o.tls_cert.empty() && o.tokens.empty() ? "TLS and tokens"
                     : o.tls_cert.empty()                   ? "TLS"
                                                            : "tokens");
    }
    metrics_ = std::make_unique<CoordinatorMetrics>();
    agent_sink_ = metrics_->AgentSink("");  // for strategies made outside a job
    agent::SetDefaultAgentMetrics(agent_sink_);
    agent::SetModelDirectory(o.data_dir + "/models");  // policy checkpoints per task
    // Jobs name pre-trained checkpoints; only files in this directory can be named.
    agent::SetCheckpointDirectory(o.checkpoint_dir.empty() ? o.data_dir + "/checkpoints"
                                                           : o.checkpoint_dir);
    // Before the store opens: a second coordinator on the same files leaves at once.
    if (std::string lock = DataDirLock::PathFor(o.store, o.data_dir); !lock.empty()) {
      ASSIGN_OR_RETURN(data_dir_lock_, DataDirLock::Acquire(lock));
    }
    options_ = o;
    // On a PostgreSQL database that another coordinator leads, this one stands by: it serves
    // UNAVAILABLE (clients move on to the next --coordinator address) and takes over as soon as
    // the leader's session, and with it the database lock, is gone.
    absl::StatusOr<std::unique_ptr<Store>> store = OpenStore(o.store, o.data_dir);
    const bool standby = !store.ok() && IsLeaderElsewhere(store.status());
    if (!store.ok() && !standby) return store.status();
    if (!o.metrics_listen.empty()) {
      ASSIGN_OR_RETURN(metrics_endpoint_,
                       MetricsEndpoint::Start(o.metrics_listen, metrics_->registry()));
      metrics_port_ = metrics_endpoint_->port();
      metrics_endpoint_->SetReady([this] { return leading_.load() != nullptr; });
    }
    tuning_ = std::make_unique<TuningServiceImpl>(nullptr, metrics_.get(), auth_.get());
    tuning_->SetWatchLimits(o.max_watch_streams_per_caller, o.max_watch_streams);
    workers_ = std::make_unique<WorkerServiceImpl>(nullptr, metrics_.get(), auth_.get());
    if (!standby) RETURN_IF_ERROR(Lead(*std::move(store)));
    if (standby) StartReader();
    grpc::EnableDefaultHealthCheckService(true);
    grpc::reflection::InitProtoReflectionServerBuilderPlugin();
    grpc::ServerBuilder builder;
    int bound = 0;
    std::string host =
        listen.host.find(':') != std::string::npos ? "[" + listen.host + "]" : listen.host;
    builder.AddListeningPort(absl::StrCat(host, ":", listen.port), auth_->ServerCredentials(),
                             &bound);
    builder.RegisterService(tuning_.get());
    builder.RegisterService(workers_.get());
    builder.SetMaxReceiveMessageSize(64 << 20);
    builder.SetMaxSendMessageSize(64 << 20);
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> icpt;
    icpt.push_back(NewRpcMetricsInterceptor(metrics_.get()));
    builder.experimental().SetInterceptorCreators(std::move(icpt));
    server_ = builder.BuildAndStart();
    if (!server_ || bound == 0)
      return absl::UnavailableError(
          absl::StrCat("--listen: cannot listen on ", o.listen, " (address in use or not local?)"));
    address_ = absl::StrCat(host, ":", bound);
    if (!o.port_file.empty())
      RETURN_IF_ERROR(WriteFileAtomically(o.port_file, absl::StrCat(bound, "\n")));
    server_->GetHealthCheckService()->SetServingStatus(!standby);
    ticker_ = std::thread([this, standby] {
      if (standby) StandBy();
      while (!stop_) {
        if (Coordinator* core = leading_.load()) core->Tick();
        for (int i = 0; i < 5 && !stop_; ++i)
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    });
    return absl::OkStatus();
  }

  bool standby() const override { return leading_.load() == nullptr; }

  std::string address() const override { return address_; }
  int metrics_port() const override { return metrics_port_; }

  void Shutdown() override {
    if (stop_.exchange(true)) return;
    { std::lock_guard<std::mutex> lock(lead_mu_); }  // a takeover under way finishes first
    if (tuning_) tuning_->Stop();
    if (core_) core_->Shutdown();
    if (reader_) reader_->Shutdown();
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    if (ticker_.joinable()) ticker_.join();
    if (agent_sink_ && agent::DefaultAgentMetrics() == agent_sink_)
      agent::SetDefaultAgentMetrics(nullptr);
  }

 private:
  // Builds the core on `store` (recovering its jobs) and serves it.
  absl::Status Lead(std::unique_ptr<Store> store) {
    store_ = NewMeteredStore(std::move(store), metrics_.get());
    CoreOptions core;
    core.lease_ttl_ms = options_.lease_ttl_ms;
    core.heartbeat_interval_ms = options_.heartbeat_interval_ms;
    core.racing = options_.racing;
    core.final_rounds = options_.final_rounds;
    core.finalists = options_.finalists;
    core.worker_purge_after_ms = options_.worker_purge_after_ms;
    core.job_retention_ms = options_.job_retention_ms;
    core_ = std::make_unique<Coordinator>(store_.get(), &clock_, metrics_.get(), core);
    RETURN_IF_ERROR(core_->Recover());
    tuning_->Activate(core_.get());
    workers_->Activate(core_.get());
    leading_ = core_.get();
    if (server_) server_->GetHealthCheckService()->SetServingStatus(true);
    return absl::OkStatus();
  }

  // A standby answers reads (GetJob, ListJobs, GetResults, LookupBest) from the leader's store
  // through a read-only session; without one (the database refuses it) it answers none.
  void StartReader() {
    absl::StatusOr<std::unique_ptr<Store>> reader = OpenStoreReader(options_.store);
    if (!reader.ok()) {
      if (!options_.quiet)
        std::fprintf(stderr, "kiln-coordinator: standing by without serving reads: %s\n",
                     std::string(reader.status().message()).c_str());
      return;
    }
    reader_store_ = *std::move(reader);
    CoreOptions core;
    core.read_only = true;
    core.job_retention_ms = options_.job_retention_ms;
    reader_ = std::make_unique<Coordinator>(reader_store_.get(), &clock_, nullptr, core);
    tuning_->SetReader(reader_.get());
  }

  // A standby: opens the store again and again (each try waits up to a few seconds for the
  // database lock) until the leader is gone, then leads.
  void StandBy() {
    if (!options_.quiet)
      std::fprintf(stderr,
                   "kiln-coordinator: standing by: another coordinator leads on %s; taking over "
                   "when it stops\n",
                   RedactStoreSpec(options_.store).c_str());
    while (!stop_) {
      absl::StatusOr<std::unique_ptr<Store>> store = OpenStore(options_.store, options_.data_dir);
      if (!store.ok()) {
        if (!IsLeaderElsewhere(store.status()) && !options_.quiet)
          std::fprintf(stderr, "kiln-coordinator: standing by: %s\n",
                       std::string(store.status().message()).c_str());
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        continue;
      }
      std::lock_guard<std::mutex> lock(lead_mu_);
      if (stop_) return;
      absl::Status led = Lead(*std::move(store));
      if (!options_.quiet)
        std::fprintf(stderr, "kiln-coordinator: %s\n",
                     led.ok() ? "leading: took over from the previous coordinator"
                              : absl::StrCat("could not take over: ", led.message()).c_str());
      if (led.ok()) return;
      core_.reset();
      store_.reset();
    }
  }

  CoordinatorOptions options_;
  std::mutex lead_mu_;
  std::atomic<Coordinator*> leading_{nullptr};  // null while standing by
  std::unique_ptr<DataDirLock> data_dir_lock_;  // released last
  SystemClock clock_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<CoordinatorMetrics> metrics_;
  std::shared_ptr<agent::AgentMetrics> agent_sink_;
  std::unique_ptr<MetricsEndpoint> metrics_endpoint_;
  std::unique_ptr<Authenticator> auth_;
  std::unique_ptr<Coordinator> core_;
  // A standby's reads (kept after a takeover: a call may still be using it).
  std::unique_ptr<Store> reader_store_;
  std::unique_ptr<Coordinator> reader_;
  std::unique_ptr<TuningServiceImpl> tuning_;
  std::unique_ptr<WorkerServiceImpl> workers_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  int metrics_port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread ticker_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<RunningCoordinator>> StartCoordinator(const CoordinatorOptions& o) {
  auto c = std::make_unique<RunningCoordinatorImpl>();
  RETURN_IF_ERROR(c->Start(o));
  return std::unique_ptr<RunningCoordinator>(std::move(c));
}

}  // namespace kiln::server
