// Converts absl::Status to grpc::Status at the service boundary (the only place gRPC types live).
#pragma once

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"

namespace kiln::server {

inline grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

}  // namespace kiln::server
