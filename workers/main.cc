// kiln-worker: the daemon attached to one device; pulls trials from the coordinator.
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "common/daemon.h"
#include "common/flags.h"
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
  kiln::DisableMutexDeadlockDetection();
  if (int code = kiln::workers::MaybeTrialChild(argc, argv); code >= 0) return code;
  kiln::workers::WorkerOptions o;
  if (const char* env = std::getenv("KILN_COORDINATOR")) o.coordinator = env;
  bool help = false;
  const std::vector<kiln::Flag> flags = {
      {"-h", kiln::Flag::kSwitch, kiln::StoreBool(&help, true), /*stop=*/true},
      {"--help", kiln::Flag::kSwitch, kiln::StoreBool(&help, true), /*stop=*/true},
      {"--coordinator", kiln::Flag::kValue, kiln::StoreText(&o.coordinator)},
      {"--device", kiln::Flag::kValue, kiln::StoreText(&o.device)},
      {"--metrics-listen", kiln::Flag::kValue, kiln::StoreText(&o.metrics_listen)},
      {"--name", kiln::Flag::kValue, kiln::StoreText(&o.name)},
      {"--tls-ca", kiln::Flag::kValue, kiln::StoreText(&o.tls_ca)},
      {"--tls-cert", kiln::Flag::kValue, kiln::StoreText(&o.tls_cert)},
      {"--tls-key", kiln::Flag::kValue, kiln::StoreText(&o.tls_key)},
      {"--token-file", kiln::Flag::kValue, kiln::StoreText(&o.token_file)},
      {"--trial-timeout", kiln::Flag::kValue,
       [&o](const std::string& v) {
         char* end = nullptr;
         o.trial_timeout_seconds = std::strtod(v.c_str(), &end);
         return *end || o.trial_timeout_seconds <= 0
                    ? "--trial-timeout must be a positive number of seconds"
                    : "";
       }},
      {"--compile-ahead", kiln::Flag::kValue,
       kiln::StoreInt("--compile-ahead", 1, 64, &o.compile_ahead)},
      {"--max-lease", kiln::Flag::kValue, kiln::StoreInt("--max-lease", 1, 64, &o.max_lease)},
      {"--trial-memory-mb", kiln::Flag::kValue,
       [&o](const std::string& v) {
         char* end = nullptr;
         const long long mb = std::strtoll(v.c_str(), &end, 10);
         if (*end || mb < 64) return "--trial-memory-mb must be a number >= 64";
         o.trial_memory_bytes = mb << 20;
         return "";
       }},
  };
  if (auto error = kiln::ParseFlags(argc, argv, flags)) {
    std::fprintf(stderr, "kiln-worker: %s\n%s", error->message.c_str(),
                 error->refused ? "" : kUsage);
    return 2;
  }
  if (help) {
    std::fputs(kUsage, stdout);
    return 0;
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
