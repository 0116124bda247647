// kiln-coordinator: the central gRPC service (store, scheduler, agent) as a daemon.
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
    "                        [--lease-ttl-ms MS] [--heartbeat-ms MS] [--no-racing]\n"
    "                        [--final-rounds N] [--finalists K]\n"
    "--no-racing: time every tuning trial fully (by default a trial stops timing once its\n"
    "             median's 95% interval lies wholly above or below the task's best median;\n"
    "             a new best is then re-measured in full)\n"
    "--final-rounds N, --finalists K: once a task's budget is spent (a model job's: before\n"
    "             its composed step), time its K fastest configurations (those within 1.5x of\n"
    "             the best) again in turns for N rounds; the best is the fastest relative to\n"
    "             the others (default 3 and 3; N=0: no final rounds)\n"
    "defaults: --listen 127.0.0.1:50051 --data-dir ./kiln-data --metrics-listen 0.0.0.0:9464\n";

}  // namespace

int main(int argc, char** argv) {
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
    else if (a == "--store")
      value(o.store);
    else if (a == "--metrics-listen")
      value(o.metrics_listen);
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
  std::fprintf(stderr, "kiln-coordinator: serving on %s, metrics on :%d, store %s\n",
               (*running)->address().c_str(), (*running)->metrics_port(),
               o.store.empty() ? (o.data_dir + "/kiln.db").c_str()
                               : kiln::server::RedactStoreSpec(o.store).c_str());
  int sig = kiln::WaitForTerminationSignal();
  std::fprintf(stderr, "kiln-coordinator: %s received, shutting down\n", strsignal(sig));
  (*running)->Shutdown();
  return 0;
}
