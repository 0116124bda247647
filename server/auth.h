// Who is calling: the role and name a request's credentials prove (token, client certificate).
#pragma once

#include <string>

namespace grpc {
class ServerContextBase;
}

namespace kiln::server {

// Roles of DESIGN.md §8. kAdmin may do everything; kSubmit submits, reads and cancels its own
// jobs; kWorker calls WorkerService only.
enum class Role { kNone, kSubmit, kWorker, kAdmin };

struct Caller {
  Role role = Role::kNone;
  // The credential's name: the token's NAME from the tokens file, else the client certificate's
  // subject. Empty for an unauthenticated caller (a coordinator without --tokens serves loopback
  // only and treats every caller as an anonymous admin).
  std::string name;
  bool client_certificate = false;  // a client certificate signed by --tls-client-ca was presented
};

// The caller of the request `ctx` belongs to, as the server's auth layer established it.
Caller CallerOf(const grpc::ServerContextBase& ctx);

}  // namespace kiln::server
