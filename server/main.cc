// kiln-coordinator: the central gRPC service (store, scheduler, agent) as a daemon.
#include <malloc.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "common/daemon.h"
#include "common/flags.h"
#include "server/coordinator_server.h"
#include "server/store/store.h"

namespace {

constexpr char kUsage[] =
    "usage: kiln-coordinator [--listen HOST:PORT] [--data-dir DIR]\n"
    "                        [--store sqlite:PATH | postgresql://...]\n"
    "                        [--metrics-listen HOST:PORT] [--port-file FILE]\n"
    "                        [--checkpoint-dir DIR]\n"
    "                        [--lease-ttl-ms MS] [--heartbeat-ms MS] [--no-racing]\n"
    "                        [--final-rounds N] [--finalists K]\n"
    "                        [--worker-purge-after SECONDS] [--job-retention-days DAYS]\n"
    "                        [--tls-cert FILE --tls-key FILE [--tls-client-ca FILE]]\n"
    "                        [--tokens FILE] [--insecure]\n"
    "--no-racing: time every tuning trial fully (by default a trial stops timing once its\n"
    "             median's 95% interval lies wholly above or below the task's best median;\n"
    "             a new best is then re-measured in full)\n"
    "--final-rounds N, --finalists K: once a task's budget is spent (a model job's: before\n"
    "             its composed step), time its K fastest configurations (those within 1.5x of\n"
    "             the best) again in turns for N rounds; the best is the fastest relative to\n"
    "             the others (default 3 and 3; N=0: no final rounds)\n"
    "--checkpoint-dir DIR: where jobs' --strategy policy:NAME finds the pre-trained checkpoint\n"
    "             NAME or NAME.pt (default DATA_DIR/checkpoints; names only, never paths)\n"
    "--tls-cert, --tls-key: serve TLS with this PEM certificate and key; --tls-client-ca:\n"
    "             WorkerService calls need a client certificate signed by this CA\n"
    "--tokens FILE: role tokens, one 'ROLE NAME SHA256-HEX' a line (roles submit, worker,\n"
    "             admin; kiln token create adds one); callers send authorization: Bearer\n"
    "--insecure:  allow a --listen beyond loopback without TLS and tokens (not for networks\n"
    "             anyone else can reach; see docs/security.md)\n"
    "--data-dir, --store sqlite:PATH: one coordinator per data dir (a lock, DIR/coordinator.lock\n"
    "             or coordinator.lock beside PATH); a second one exits at once naming the\n"
    "             holder. postgresql://: one leads a database at a time; another started on\n"
    "             it stands by (answering UNAVAILABLE) and takes over within seconds of the\n"
    "             leader's end; give clients and workers every address: --coordinator A,B\n"
    "--worker-purge-after SECONDS: forget a worker not heard from for this long (default 3600;\n"
    "             0: never); its leases were requeued when they expired\n"
    "--job-retention-days DAYS: finished jobs older than this stay in the store but are not\n"
    "             loaded into memory at start (not in kiln jobs; kiln results/watch/export\n"
    "             still read them; default 7; 0: load all)\n"
    "defaults: --listen 127.0.0.1:50051 --data-dir ./kiln-data --metrics-listen 127.0.0.1:9464\n";

using Setter = std::function<std::string(const std::string&)>;

// A number >= 0 of `unit_ms` (seconds, days) into milliseconds, up to a century.
Setter Duration(const char* flag, double unit_ms, int64_t* dst_ms) {
  return [=](const std::string& v) {
    char* end = nullptr;
    const double n = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0' || !(n >= 0) || n > 36500 * 86400e3 / unit_ms)
      return std::string(flag) + " must be a number >= 0, got '" + v.substr(0, 32) + "'";
    *dst_ms = static_cast<int64_t>(n * unit_ms);
    return std::string();
  };
}

Setter Millis(const char* flag, int* dst) {
  return [=](const std::string& v) {
    const int n = std::atoi(v.c_str());
    if (n < 100) return std::string(flag) + " must be a number of milliseconds >= 100";
    *dst = n;
    return std::string();
  };
}

}  // namespace

int main(int argc, char** argv) {
  kiln::DisableMutexDeadlockDetection();
  // gRPC serves each call on a thread of a pool that grows and shrinks; glibc gives threads
  // arenas of their own (up to 8 a core), and trial-sized allocations freed in one arena are not
  // reused by the next thread's: the resident size grew with every finished job. Two arenas keep
  // it flat (and dispatch no slower: the coordinator's own mutex serializes most work anyway).
  mallopt(M_ARENA_MAX, 2);
  kiln::server::CoordinatorOptions o;
  bool help = false;
  const std::vector<kiln::Flag> flags = {
      {"-h", kiln::Flag::kSwitch, kiln::StoreBool(&help, true), /*stop=*/true},
      {"--help", kiln::Flag::kSwitch, kiln::StoreBool(&help, true), /*stop=*/true},
      {"--listen", kiln::Flag::kValue, kiln::StoreText(&o.listen)},
      {"--data-dir", kiln::Flag::kValue, kiln::StoreText(&o.data_dir)},
      {"--checkpoint-dir", kiln::Flag::kValue, kiln::StoreText(&o.checkpoint_dir)},
      {"--store", kiln::Flag::kValue, kiln::StoreText(&o.store)},
      {"--metrics-listen", kiln::Flag::kValue, kiln::StoreText(&o.metrics_listen)},
      {"--tls-cert", kiln::Flag::kValue, kiln::StoreText(&o.tls_cert)},
      {"--tls-key", kiln::Flag::kValue, kiln::StoreText(&o.tls_key)},
      {"--tls-client-ca", kiln::Flag::kValue, kiln::StoreText(&o.tls_client_ca)},
      {"--tokens", kiln::Flag::kValue, kiln::StoreText(&o.tokens)},
      {"--insecure", kiln::Flag::kSwitch, kiln::StoreBool(&o.insecure, true)},
      {"--port-file", kiln::Flag::kValue, kiln::StoreText(&o.port_file)},
      {"--no-racing", kiln::Flag::kSwitch, kiln::StoreBool(&o.racing, false)},
      {"--final-rounds", kiln::Flag::kValue,
       kiln::StoreInt("--final-rounds", 0, 10, &o.final_rounds)},
      {"--finalists", kiln::Flag::kValue, kiln::StoreInt("--finalists", 2, 10, &o.finalists)},
      {"--worker-purge-after", kiln::Flag::kValue,
       Duration("--worker-purge-after", 1e3, &o.worker_purge_after_ms)},
      {"--job-retention-days", kiln::Flag::kValue,
       Duration("--job-retention-days", 86400e3, &o.job_retention_ms)},
      {"--lease-ttl-ms", kiln::Flag::kValue, Millis("--lease-ttl-ms", &o.lease_ttl_ms)},
      {"--heartbeat-ms", kiln::Flag::kValue, Millis("--heartbeat-ms", &o.heartbeat_interval_ms)},
  };
  if (auto error = kiln::ParseFlags(argc, argv, flags)) {
    std::fprintf(stderr, "kiln-coordinator: %s\n%s", error->message.c_str(),
                 error->refused ? "" : kUsage);
    return 2;
  }
  if (help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  kiln::InstallTerminationBlock();
  auto running = kiln::server::StartCoordinator(o);
  if (!running.ok()) {
    std::fprintf(stderr, "kiln-coordinator: %s\n", std::string(running.status().message()).c_str());
    return 1;
  }
  std::fprintf(stderr, "kiln-coordinator: %s on %s, metrics on :%d, store %s\n",
               (*running)->standby() ? "standing by" : "serving", (*running)->address().c_str(),
               (*running)->metrics_port(),
               o.store.empty() ? (o.data_dir + "/kiln.db").c_str()
                               : kiln::server::RedactStoreSpec(o.store).c_str());
  int sig = kiln::WaitForTerminationSignal();
  std::fprintf(stderr, "kiln-coordinator: %s received, shutting down\n", strsignal(sig));
  (*running)->Shutdown();
  return 0;
}
