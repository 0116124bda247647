// kiln-worker: the daemon attached to one device; pulls trials from the coordinator.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "workers/worker.h"

namespace {

constexpr char kUsage[] =
    "usage: kiln-worker --coordinator HOST:PORT\n"
    "                   --device cpu | opencl[:N] | cuda[:N] | sim:NAME | replay:PATH\n"
    "                   [--metrics-listen HOST:PORT] [--name NAME]\n"
    "                   [--trial-timeout SECONDS] [--trial-memory-mb MB] [--compile-ahead N]\n"
    "                   [--max-lease N]\n"
    "                   [--tls-ca FILE [--tls-cert FILE --tls-key FILE]] [--token-file FILE]\n"
    "defaults: --coordinator $KILN_COORDINATOR or 127.0.0.1:50051, --metrics-listen "
    "127.0.0.1:9465\n"
    "security: --tls-ca: the CA of the coordinator's certificate (TLS); --tls-cert/--tls-key: "
    "this\n"
    "         worker's client certificate (coordinators with --tls-client-ca); --token-file: a "
    "file\n"
    "         whose first line is a worker token (kiln token create --role worker)\n"
    "devices: opencl:N is the N-th OpenCL device over all platforms (PoCL: the CPU); cuda:N the\n"
    "         N-th NVIDIA GPU; sim:systolic-RxC[-<S>kb][-<B>gbs][-<F>mhz] a simulated systolic\n"
    "         array (e.g. sim:systolic-128x128); see docs/backends.md\n";

}  // namespace

int main(int argc, char** argv) {
  if (int code = kiln::workers::MaybeTrialChild(argc, argv); code >= 0) return code;
  kiln::workers::WorkerOptions o;
  if (const char* env = std::getenv("KILN_COORDINATOR")) o.coordinator = env;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "kiln-worker: %s needs a value (or is unknown)\n%s", a.c_str(), kUsage);
      return 2;
    }
    std::string v = argv[++i];
    char* end = nullptr;
    if (a == "--coordinator")
      o.coordinator = v;
    else if (a == "--device")
      o.device = v;
    else if (a == "--metrics-listen")
      o.metrics_listen = v;
    else if (a == "--name")
      o.name = v;
    else if (a == "--tls-ca")
      o.tls_ca = v;
    else if (a == "--tls-cert")
      o.tls_cert = v;
    else if (a == "--tls-key")
      o.tls_key = v;
    else if (a == "--token-file")
      o.token_file = v;
    else if (a == "--trial-timeout") {
      o.trial_timeout_seconds = std::strtod(v.c_str(), &end);
      if (*end || o.trial_timeout_seconds <= 0) {
        std::fprintf(stderr, "kiln-worker: --trial-timeout must be a positive number of seconds\n");
        return 2;
      }
    } else if (a == "--compile-ahead") {
      o.compile_ahead = static_cast<int>(std::strtol(v.c_str(), &end, 10));
      if (*end || o.compile_ahead < 1 || o.compile_ahead > 64) {
        std::fprintf(stderr, "kiln-worker: --compile-ahead must be a number in 1..64\n");
        return 2;
      }
    } else if (a == "--max-lease") {
      o.max_lease = static_cast<int>(std::strtol(v.c_str(), &end, 10));
      if (*end || o.max_lease < 1 || o.max_lease > 64) {
        std::fprintf(stderr, "kiln-worker: --max-lease must be a number in 1..64\n");
        return 2;
      }
    } else if (a == "--trial-memory-mb") {
      long long mb = std::strtoll(v.c_str(), &end, 10);
      if (*end || mb < 64) {
        std::fprintf(stderr, "kiln-worker: --trial-memory-mb must be a number >= 64\n");
        return 2;
      }
      o.trial_memory_bytes = mb << 20;
    } else {
      std::fprintf(stderr, "kiln-worker: unknown flag %s\n%s", a.c_str(), kUsage);
      return 2;
    }
  }
  auto worker = kiln::workers::NewWorker(o);
  if (!worker.ok()) {
    std::fprintf(stderr, "kiln-worker: %s\n", std::string(worker.status().message()).c_str());
    return 1;
  }
  auto status = (*worker)->Run(/*handle_signals=*/true);
  if (!status.ok()) {
    std::fprintf(stderr, "kiln-worker: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
