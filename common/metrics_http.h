// A small HTTP endpoint that serves a prometheus-cpp registry at /metrics (text format 0.0.4).
// The daemons use it instead of prometheus::Exposer: civetweb starts its threads with a fixed
// 100 KB stack, which glibc refuses (pthread_create: EINVAL) in a process whose static TLS is
// larger, as it is once libtorch, glog and OpenBLAS are linked in.
#pragma once

#include <prometheus/registry.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace kiln {

class MetricsEndpoint {
 public:
  // Listens on `listen` (HOST:PORT; port 0 picks a free one). `flag` names the option in errors.
  static absl::StatusOr<std::unique_ptr<MetricsEndpoint>> Start(
      const std::string& listen, std::shared_ptr<prometheus::Registry> registry,
      const std::string& flag = "--metrics-listen");
  ~MetricsEndpoint();  // stops serving
  int port() const { return port_; }
  // GET /ready answers 200 while `ready` says so, else 503 (a standby coordinator: Kubernetes
  // sends traffic to the leader only). Without one, always 200.
  void SetReady(std::function<bool()> ready) {
    std::lock_guard<std::mutex> lock(ready_mu_);
    ready_ = std::move(ready);
  }

 private:
  MetricsEndpoint(int fd, int port, std::shared_ptr<prometheus::Registry> registry);
  void Serve();
  void Answer(int conn);

  int fd_;
  int port_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex ready_mu_;
  std::function<bool()> ready_;
};

}  // namespace kiln
