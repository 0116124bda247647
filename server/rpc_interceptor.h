// gRPC server interceptor that times every RPC and reports its method and status code.
#pragma once

#include <grpcpp/support/server_interceptor.h>

#include <functional>
#include <memory>
#include <string>

#include "server/metrics.h"

namespace kiln::server {

// Called once per finished RPC: the full method name ("/kiln.v1.WorkerService/LeaseTrials"),
// the gRPC status code name ("OK", "NOT_FOUND", ...) and the seconds from arrival to status.
using RpcObserver =
    std::function<void(const std::string& method, const std::string& code, double seconds)>;

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> NewRpcInterceptorFactory(
    RpcObserver observer);

// The factory that feeds kiln_rpc_requests_total and kiln_rpc_duration_seconds.
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> NewRpcMetricsInterceptor(
    CoordinatorMetrics* metrics);

// "OK", "CANCELLED", ..., "UNAUTHENTICATED": the canonical name of a gRPC status code.
std::string GrpcCodeName(grpc::StatusCode code);

}  // namespace kiln::server
