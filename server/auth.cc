#include "server/auth.h"

#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/security/server_credentials.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "server/authenticator.h"

namespace kiln::server {
namespace {

// Callers of the RPCs now being handled, by their ServerContext (CallerScope).
struct ScopeRegistry {
  std::mutex mu;
  std::map<const grpc::ServerContextBase*, Caller> callers;
};
ScopeRegistry& Scopes() {
  static auto* r = new ScopeRegistry;
  return *r;
}

// Live authenticators that demand credentials: while one exists, a context outside any
// CallerScope is nobody rather than the anonymous admin of an open loopback coordinator.
std::atomic<int> g_enforcing{0};

std::array<unsigned char, 32> Sha256(std::string_view data) {
  std::array<unsigned char, 32> out{};
  unsigned int n = 0;
  EVP_Digest(data.data(), data.size(), out.data(), &n, EVP_sha256(), nullptr);
  return out;
}

bool ParseHexDigest(std::string_view hex, std::array<unsigned char, 32>* out) {
  if (hex.size() != 64) return false;
  for (size_t i = 0; i < 32; ++i) {
    int v = 0;
    for (char c : hex.substr(2 * i, 2)) {
      int d = absl::ascii_isdigit(c)   ? c - '0'
              : (c >= 'a' && c <= 'f') ? c - 'a' + 10
              : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                       : -1;
      if (d < 0) return false;
      v = v * 16 + d;
    }
    (*out)[i] = static_cast<unsigned char>(v);
  }
  return true;
}

absl::StatusOr<std::string> ReadSmallFile(const std::string& flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(flag, ": cannot read ", path));
  std::ostringstream s;
  s << in.rdbuf();
  std::string text = s.str();
  if (text.size() > (4 << 20))
    return absl::InvalidArgumentError(absl::StrCat(flag, ": ", path, " is larger than 4 MiB"));
  if (text.empty()) return absl::InvalidArgumentError(absl::StrCat(flag, ": ", path, " is empty"));
  return text;
}

std::string FirstProperty(const grpc::AuthContext& a, const char* name) {
  auto values = a.FindPropertyValues(name);
  return values.empty() ? "" : std::string(values.front().data(), values.front().size());
}

}  // namespace

Role ParseRole(std::string_view text) {
  if (text == "submit") return Role::kSubmit;
  if (text == "worker") return Role::kWorker;
  if (text == "admin") return Role::kAdmin;
  return Role::kNone;
}

const char* RoleName(Role role) {
  switch (role) {
    case Role::kSubmit:
      return "submit";
    case Role::kWorker:
      return "worker";
    case Role::kAdmin:
      return "admin";
    case Role::kNone:
      break;
  }
  return "none";
}

absl::Status ValidateCredentialName(std::string_view name) {
  if (name.empty()) return absl::InvalidArgumentError("name: must not be empty");
  if (name.size() > kMaxCredentialNameLength)
    return absl::InvalidArgumentError(
        absl::StrCat("name: at most ", kMaxCredentialNameLength, " characters"));
  for (char c : name)
    if (c <= ' ' || c > '~')
      return absl::InvalidArgumentError(
          "name: printable ASCII only, without whitespace (letters, digits, -_.@ ...)");
  return absl::OkStatus();
}

std::string Sha256Hex(std::string_view data) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char b : Sha256(data)) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

absl::StatusOr<std::vector<TokenEntry>> ParseTokens(std::string_view text,
                                                    const std::string& path) {
  std::vector<TokenEntry> out;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(absl::string_view(text.data(), text.size()), '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> f =
        absl::StrSplit(line, absl::ByAnyChar(" \t\r\v\f"), absl::SkipEmpty());
    auto bad = [&](const std::string& what) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": line ", line_no, ": ", what, " (expected ROLE NAME SHA256-HEX)"));
    };
    if (f.size() != 3) return bad(absl::StrCat(f.size(), " fields"));
    TokenEntry e;
    e.role = ParseRole(f[0]);
    if (e.role == Role::kNone) return bad("ROLE must be submit, worker or admin");
    if (absl::Status s = ValidateCredentialName(f[1]); !s.ok())
      return bad(std::string(s.message()));
    e.name = std::string(f[1]);
    if (!ParseHexDigest(f[2], &e.digest)) return bad("the digest must be 64 hex digits");
    out.push_back(std::move(e));
  }
  return out;
}

absl::Status CheckAccess(const Caller& caller, Access access, const AuthPolicy& policy,
                         std::string* reason) {
  auto refuse = [&](absl::StatusCode code, const char* why, std::string msg) {
    *reason = why;
    return absl::Status(code, msg);
  };
  if (caller.role == Role::kNone) {
    if (*reason == "unknown_token")
      return refuse(absl::StatusCode::kUnauthenticated, "unknown_token",
                    "the bearer token is not known to this coordinator");
    return refuse(absl::StatusCode::kUnauthenticated, "no_token",
                  "a token is required (authorization: Bearer TOKEN; kiln --token-file)");
  }
  if (access == Access::kWorkerService) {
    if (policy.client_ca && !caller.client_certificate)
      return refuse(absl::StatusCode::kUnauthenticated, "no_client_certificate",
                    "WorkerService needs a client certificate signed by the coordinator's "
                    "--tls-client-ca");
    if (caller.role != Role::kWorker && caller.role != Role::kAdmin)
      return refuse(absl::StatusCode::kPermissionDenied, "wrong_role",
                    absl::StrCat("role ", RoleName(caller.role), " may not call WorkerService"));
    return absl::OkStatus();
  }
  if (caller.role != Role::kSubmit && caller.role != Role::kAdmin)
    return refuse(absl::StatusCode::kPermissionDenied, "wrong_role",
                  absl::StrCat("role ", RoleName(caller.role), " may not call TuningService"));
  return absl::OkStatus();
}

bool MayUseJob(const Caller& caller, const std::string& owner) {
  if (caller.role == Role::kAdmin) return true;
  return caller.role == Role::kSubmit && !caller.name.empty() && caller.name == owner;
}

Authenticator::Authenticator(AuthPolicy policy, std::vector<TokenEntry> tokens)
    : policy_(policy), tokens_(std::move(tokens)) {
  if (policy_.tokens || policy_.client_ca) ++g_enforcing;
}

Authenticator::~Authenticator() {
  if (policy_.tokens || policy_.client_ca) --g_enforcing;
}

absl::StatusOr<std::unique_ptr<Authenticator>> Authenticator::Load(const AuthFiles& f) {
  if (f.tls_cert.empty() != f.tls_key.empty())
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together; give both");
  if (!f.tls_client_ca.empty() && f.tls_cert.empty())
    return absl::InvalidArgumentError("--tls-client-ca needs --tls-cert and --tls-key");
  std::vector<TokenEntry> tokens;
  if (!f.tokens.empty()) {
    auto text = ReadSmallFile("--tokens", f.tokens);
    if (!text.ok()) return text.status();
    auto parsed = ParseTokens(*text, f.tokens);
    if (!parsed.ok())
      return absl::InvalidArgumentError(absl::StrCat("--tokens: ", parsed.status().message()));
    if (parsed->empty())
      return absl::InvalidArgumentError(
          absl::StrCat("--tokens: ", f.tokens, " holds no tokens (kiln token create adds one)"));
    tokens = std::move(*parsed);
  }
  AuthPolicy policy{!f.tokens.empty(), !f.tls_client_ca.empty()};
  auto a = std::make_unique<Authenticator>(policy, std::move(tokens));
  if (!f.tls_cert.empty()) {
    auto cert = ReadSmallFile("--tls-cert", f.tls_cert);
    if (!cert.ok()) return cert.status();
    auto key = ReadSmallFile("--tls-key", f.tls_key);
    if (!key.ok()) return key.status();
    a->cert_pem_ = *cert;
    a->key_pem_ = *key;
  }
  if (!f.tls_client_ca.empty()) {
    auto ca = ReadSmallFile("--tls-client-ca", f.tls_client_ca);
    if (!ca.ok()) return ca.status();
    a->client_ca_pem_ = *ca;
  }
  return a;
}

std::shared_ptr<grpc::ServerCredentials> Authenticator::ServerCredentials() const {
  if (cert_pem_.empty()) return grpc::InsecureServerCredentials();
  // With a client CA, a client certificate is verified when presented but not demanded at the
  // handshake: TuningService callers have none; WorkerService checks it per call.
  grpc::SslServerCredentialsOptions o(client_ca_pem_.empty()
                                          ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                          : GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
  o.pem_root_certs = client_ca_pem_;
  o.pem_key_cert_pairs.push_back({key_pem_, cert_pem_});
  return grpc::SslServerCredentials(o);
}

Caller Authenticator::Identify(const grpc::ServerContextBase& ctx, std::string* reason) const {
  const auto& md = ctx.client_metadata();
  auto range = md.equal_range("authorization");
  std::string header;
  int headers = 0;
  for (auto it = range.first; it != range.second; ++it, ++headers)
    header.assign(it->second.data(), it->second.size());
  bool cert = false;
  std::string cert_name;
  if (policy_.client_ca) {
    std::shared_ptr<const grpc::AuthContext> a = ctx.auth_context();
    // The handshake verified any presented certificate against --tls-client-ca (it fails
    // otherwise), so a peer certificate here is a verified one.
    if (a && !FirstProperty(*a, GRPC_X509_PEM_CERT_PROPERTY_NAME).empty()) {
      cert = true;
      cert_name = FirstProperty(*a, GRPC_X509_CN_PROPERTY_NAME);
      if (cert_name.empty()) cert_name = FirstProperty(*a, GRPC_X509_SUBJECT_PROPERTY_NAME);
    }
  }
  if (headers > 1) {
    *reason = "unknown_token";
    Caller none;
    none.client_certificate = cert;
    return none;
  }
  return IdentifyParts(headers ? &header : nullptr, cert, cert_name, reason);
}

Caller Authenticator::IdentifyParts(const std::string* authorization, bool client_certificate,
                                    const std::string& cert_name, std::string* reason) const {
  Caller c;
  c.client_certificate = client_certificate;
  if (!policy_.tokens) {
    c.role = Role::kAdmin;
    c.name = client_certificate ? cert_name.substr(0, kMaxCredentialNameLength) : "";
    return c;
  }
  if (!authorization) {
    *reason = "no_token";
    return c;
  }
  absl::string_view v = *authorization;
  if (!absl::ConsumePrefix(&v, "Bearer ") && !absl::ConsumePrefix(&v, "bearer ")) {
    *reason = "unknown_token";
    return c;
  }
  v = absl::StripAsciiWhitespace(v);
  const std::array<unsigned char, 32> digest = Sha256(std::string_view(v.data(), v.size()));
  // Every entry is compared in constant time, and the loop does not stop at a match.
  const TokenEntry* found = nullptr;
  for (const TokenEntry& e : tokens_)
    if (CRYPTO_memcmp(e.digest.data(), digest.data(), digest.size()) == 0 && !found) found = &e;
  if (!found || v.empty()) {
    *reason = "unknown_token";
    return c;
  }
  c.role = found->role;
  c.name = found->name;
  return c;
}

CallerScope::CallerScope(const grpc::ServerContextBase* ctx, const Caller& caller) : ctx_(ctx) {
  std::lock_guard<std::mutex> lock(Scopes().mu);
  Scopes().callers[ctx_] = caller;
}

CallerScope::~CallerScope() {
  std::lock_guard<std::mutex> lock(Scopes().mu);
  Scopes().callers.erase(ctx_);
}

Caller CallerOf(const grpc::ServerContextBase& ctx) {
  {
    std::lock_guard<std::mutex> lock(Scopes().mu);
    auto it = Scopes().callers.find(&ctx);
    if (it != Scopes().callers.end()) return it->second;
  }
  if (g_enforcing.load() > 0) return Caller{};  // outside a checked handler: nobody
  return Caller{Role::kAdmin, "", false};
}

bool IsLoopbackHost(const std::string& host_in) {
  std::string host = host_in;
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  if (absl::AsciiStrToLower(host) == "localhost") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, host.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);
  return false;
}

}  // namespace kiln::server
