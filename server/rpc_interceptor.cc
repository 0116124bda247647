#include "server/rpc_interceptor.h"

#include <chrono>

#include "absl/status/status.h"

namespace kiln::server {
namespace {

using grpc::experimental::InterceptionHookPoints;

class RpcInterceptor final : public grpc::experimental::Interceptor {
 public:
  RpcInterceptor(const RpcObserver* observer, const char* method)
      : observer_(observer),
        method_(method ? method : "unknown"),
        start_(std::chrono::steady_clock::now()) {}

  // An RPC whose status was never sent (the client went away first) counts as CANCELLED.
  ~RpcInterceptor() override {
    if (!reported_) Report("CANCELLED");
  }

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS))
      Report(GrpcCodeName(methods->GetSendStatus().error_code()));
    methods->Proceed();
  }

 private:
  void Report(const std::string& code) {
    reported_ = true;
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    (*observer_)(method_, code, seconds);
  }

  const RpcObserver* observer_;
  std::string method_;
  std::chrono::steady_clock::time_point start_;
  bool reported_ = false;
};

class RpcInterceptorFactory final : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit RpcInterceptorFactory(RpcObserver observer) : observer_(std::move(observer)) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new RpcInterceptor(&observer_, info->method());
  }

 private:
  RpcObserver observer_;
};

}  // namespace

std::string GrpcCodeName(grpc::StatusCode code) {
  // gRPC's and absl's codes are the same numbers with the same canonical names.
  std::string name = absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
  return name.empty() ? "UNKNOWN" : name;
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> NewRpcInterceptorFactory(
    RpcObserver observer) {
  return std::make_unique<RpcInterceptorFactory>(std::move(observer));
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> NewRpcMetricsInterceptor(
    CoordinatorMetrics* metrics) {
  return NewRpcInterceptorFactory(
      [metrics](const std::string& method, const std::string& code, double seconds) {
        metrics->RpcFinished(method, code, seconds);
      });
}

}  // namespace kiln::server
