// kiln-coordinator: the central gRPC service (store, scheduler, agent) as a daemon.
#include <malloc.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/daemon.h"
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

}  // namespace

int main(int argc, char** argv) {
  // gRPC serves each call on a thread of a pool that grows and shrinks; glibc gives threads
  // arenas of their own (up to 8 a core), and trial-sized allocations freed in one arena are not
  // reused by the next thread's: the resident size grew with every finished job. Two arenas keep
  // it flat (and dispatch no slower: the coordinator's own mutex serializes most work anyway).
  mallopt(M_ARENA_MAX, 2);
  kiln::server::CoordinatorOptions o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    auto value = [&](std::string& dst) {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "kiln-coordinator: %s needs a value\n%s", a.c_str(), kUsage);
        std::exit(2);
      }
      dst = argv[++i];
    };
    std::string v;
    if (a == "--listen")
      value(o.listen);
    else if (a == "--data-dir")
      value(o.data_dir);
    else if (a == "--checkpoint-dir")
      value(o.checkpoint_dir);
    else if (a == "--store")
      value(o.store);
    else if (a == "--metrics-listen")
      value(o.metrics_listen);
    else if (a == "--tls-cert")
      value(o.tls_cert);
    else if (a == "--tls-key")
      value(o.tls_key);
    else if (a == "--tls-client-ca")
      value(o.tls_client_ca);
    else if (a == "--tokens")
      value(o.tokens);
    else if (a == "--insecure")
      o.insecure = true;
    else if (a == "--port-file")
      value(o.port_file);
    else if (a == "--no-racing")
      o.racing = false;
    else if (a == "--final-rounds" || a == "--finalists") {
      value(v);
      char* end = nullptr;
      const long n = std::strtol(v.c_str(), &end, 10);
      const long lo = a == "--finalists" ? 2 : 0, hi = 10;
      if (v.empty() || *end != '\0' || n < lo || n > hi) {
        std::fprintf(stderr, "kiln-coordinator: %s must be a whole number in %ld..%ld, got '%s'\n",
                     a.c_str(), lo, hi, v.c_str());
        return 2;
      }
      (a == "--final-rounds" ? o.final_rounds : o.finalists) = static_cast<int>(n);
    } else if (a == "--worker-purge-after" || a == "--job-retention-days") {
      value(v);
      char* end = nullptr;
      const double n = std::strtod(v.c_str(), &end);
      const double unit_ms = a == "--worker-purge-after" ? 1e3 : 86400e3;
      if (v.empty() || *end != '\0' || !(n >= 0) || n > 36500 * 86400e3 / unit_ms) {
        std::fprintf(stderr, "kiln-coordinator: %s must be a number >= 0, got '%.32s'\n", a.c_str(),
                     v.c_str());
        return 2;
      }
      (a == "--worker-purge-after" ? o.worker_purge_after_ms : o.job_retention_ms) =
          static_cast<int64_t>(n * unit_ms);
    } else if (a == "--lease-ttl-ms" || a == "--heartbeat-ms") {
      value(v);
      int n = std::atoi(v.c_str());
      if (n < 100) {
        std::fprintf(stderr, "kiln-coordinator: %s must be a number of milliseconds >= 100\n",
                     a.c_str());
        return 2;
      }
      (a == "--lease-ttl-ms" ? o.lease_ttl_ms : o.heartbeat_interval_ms) = n;
    } else {
      std::fprintf(stderr, "kiln-coordinator: unknown flag %s\n%s", a.c_str(), kUsage);
      return 2;
    }
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
