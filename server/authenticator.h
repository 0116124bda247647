// The coordinator's auth layer behind CallerOf (server/auth.h): the --tokens file, TLS server
// credentials, who a request's credentials prove it to be, and what each role may call.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/auth.h"

namespace grpc {
class ServerCredentials;
}

namespace kiln::server {

inline constexpr size_t kMaxCredentialNameLength = 64;

// "submit", "worker", "admin" -> the role; anything else -> Role::kNone.
Role ParseRole(std::string_view text);
const char* RoleName(Role role);

// A token's NAME (also a job's owner): 1..64 printable ASCII characters, no whitespace.
absl::Status ValidateCredentialName(std::string_view name);

// Lowercase hex SHA-256 of `data` (OpenSSL libcrypto).
std::string Sha256Hex(std::string_view data);

struct TokenEntry {
  Role role = Role::kNone;
  std::string name;
  std::array<unsigned char, 32> digest{};  // SHA-256 of the token
};

// Parses a tokens file: one `ROLE NAME SHA256-HEX-OF-TOKEN` per line; blank lines and lines
// starting with # are skipped. Errors name `path` and the line number (never the line's text).
absl::StatusOr<std::vector<TokenEntry>> ParseTokens(std::string_view text, const std::string& path);

// What an RPC asks of its caller.
enum class Access {
  kWorkerService,  // WorkerService: worker or admin; a verified client certificate with a CA
  kTuning,         // TuningService: submit or admin (job methods also check MayUseJob)
};

struct AuthPolicy {
  bool tokens = false;     // --tokens: every caller needs a known token
  bool client_ca = false;  // --tls-client-ca: WorkerService needs a verified client certificate
};

// OK, or UNAUTHENTICATED / PERMISSION_DENIED with a short message; `*reason` is then the
// kiln_rpc_refused_total label ("no_token", "unknown_token", "no_client_certificate",
// "wrong_role").
absl::Status CheckAccess(const Caller& caller, Access access, const AuthPolicy& policy,
                         std::string* reason);

// Whether `caller` may read, watch, cancel or export a job submitted by `owner`: admin always,
// submit only its own (a job without an owner, from a coordinator without tokens, is admin's).
bool MayUseJob(const Caller& caller, const std::string& owner);

// Files of the TLS and token flags of kiln-coordinator; empty: not given.
struct AuthFiles {
  std::string tls_cert, tls_key, tls_client_ca, tokens;
};

class Authenticator {
 public:
  // Reads the files once (errors name the flag and the file) and checks their combination.
  static absl::StatusOr<std::unique_ptr<Authenticator>> Load(const AuthFiles& files);
  // For tests: a token table without files.
  Authenticator(AuthPolicy policy, std::vector<TokenEntry> tokens);
  ~Authenticator();
  Authenticator(const Authenticator&) = delete;
  Authenticator& operator=(const Authenticator&) = delete;

  const AuthPolicy& policy() const { return policy_; }
  bool tls() const { return !cert_pem_.empty(); }
  // TLS credentials when --tls-cert was given, else plaintext ones.
  std::shared_ptr<grpc::ServerCredentials> ServerCredentials() const;

  // Who `ctx`'s credentials prove: the token's role and name (without --tokens an anonymous
  // admin), else the client certificate's subject CN as the name. Role::kNone with `*reason`
  // set when --tokens is given and the request has no or an unknown bearer token.
  Caller Identify(const grpc::ServerContextBase& ctx, std::string* reason) const;
  // The same from the parts (tests): `authorization` is the header's value, `cert_cn` the
  // verified client certificate's CN ("" = none).
  Caller IdentifyParts(const std::string* authorization, bool client_certificate,
                       const std::string& cert_name, std::string* reason) const;

 private:
  AuthPolicy policy_;
  std::vector<TokenEntry> tokens_;
  std::string cert_pem_, key_pem_, client_ca_pem_;
};

// Makes CallerOf(*ctx) answer `caller` while it lives (the body of one RPC handler).
class CallerScope {
 public:
  CallerScope(const grpc::ServerContextBase* ctx, const Caller& caller);
  ~CallerScope();
  CallerScope(const CallerScope&) = delete;
  CallerScope& operator=(const CallerScope&) = delete;

 private:
  const grpc::ServerContextBase* ctx_;
};

// Whether a --listen host is loopback only: localhost, 127.0.0.0/8, ::1.
bool IsLoopbackHost(const std::string& host);

}  // namespace kiln::server
