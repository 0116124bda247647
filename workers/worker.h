// The worker daemon: register, heartbeat, lease, run sandboxed trials, report (Boost.Asio loop).
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "workers/trial_child.h"  // binaries hosting a worker host the trial child too

namespace kiln::workers {

struct WorkerOptions {
  std::string coordinator = "127.0.0.1:50051";
  std::string device = "cpu";
  std::string name;                               // default: hostname-device
  std::string metrics_listen = "127.0.0.1:9465";  // empty: none
  double trial_timeout_seconds = 30;              // wall clock for one sandboxed trial
  long long trial_memory_bytes = 8LL << 30;       // RLIMIT_AS of the trial child
  // Trials leased at once, their kernels compiled in parallel first; the lease grows up to 64 while
  // trials take under 50 ms each (common/lease_pacing.h).
  int compile_ahead = 4;
  // The most trials a lease grows to. 1 with --compile-ahead 1: one trial at a time, so that the
  // strategy is told each result before its next proposal (evaluating a strategy on replay).
  int max_lease = 64;
  bool quiet = false;
  // TLS to the coordinator (--tls-ca; with --tls-cert/--tls-key, the worker's client certificate
  // for a coordinator with --tls-client-ca) and the worker token (--token-file). Empty: none.
  std::string tls_ca, tls_cert, tls_key, token_file;
};

class Worker {
 public:
  virtual ~Worker() = default;
  // Serves until Stop() or SIGTERM/SIGINT (when handle_signals). Returns OK on a clean stop.
  virtual absl::Status Run(bool handle_signals) = 0;
  // Asks Run to finish the current trial, hand back other leases and return. Thread-safe.
  virtual void Stop() = 0;
};

absl::StatusOr<std::unique_ptr<Worker>> NewWorker(const WorkerOptions& o);

}  // namespace kiln::workers
