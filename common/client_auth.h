// Client side of the coordinator's TLS and role tokens (docs/security.md), shared by kiln and
// kiln-worker: channel credentials from PEM files and the bearer token from a token file.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace grpc {
class ChannelCredentials;
class ClientContext;
}  // namespace grpc

namespace kiln {

// Files named by --tls-ca, --tls-cert, --tls-key, --token-file; empty: not given.
struct ClientAuthFiles {
  std::string tls_ca, tls_cert, tls_key, token_file;
};

class ClientAuth {
 public:
  // Reads every named file once; a missing, unreadable or empty one is an error naming the flag
  // and the file. Without tls_ca the channel is plaintext (and tls_cert/tls_key are refused).
  static absl::StatusOr<ClientAuth> Load(const ClientAuthFiles& files);
  ClientAuth() = default;

  // TLS (server verified against the CA; the client key pair when given) or plaintext.
  std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials() const;
  // Adds `authorization: Bearer TOKEN` to a call when a token was loaded.
  void Apply(grpc::ClientContext* context) const;
  bool tls() const { return !ca_pem_.empty(); }
  bool has_token() const { return !token_.empty(); }

 private:
  std::string ca_pem_, cert_pem_, key_pem_, token_;
};

}  // namespace kiln
