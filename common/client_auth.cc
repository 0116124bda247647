#include "common/client_auth.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/security/credentials.h>

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace kiln {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(flag, ": cannot read ", path));
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) return absl::InvalidArgumentError(absl::StrCat(flag, ": cannot read ", path));
  std::string text = s.str();
  if (text.size() > (1 << 20))
    return absl::InvalidArgumentError(absl::StrCat(flag, ": ", path, " is larger than 1 MiB"));
  if (text.empty()) return absl::InvalidArgumentError(absl::StrCat(flag, ": ", path, " is empty"));
  return text;
}

}  // namespace

absl::StatusOr<ClientAuth> ClientAuth::Load(const ClientAuthFiles& f) {
  ClientAuth a;
  if (f.tls_cert.empty() != f.tls_key.empty())
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together; give both");
  if (!f.tls_cert.empty() && f.tls_ca.empty())
    return absl::InvalidArgumentError("--tls-cert and --tls-key need --tls-ca");
  if (!f.tls_ca.empty()) {
    auto ca = ReadFile("--tls-ca", f.tls_ca);
    if (!ca.ok()) return ca.status();
    a.ca_pem_ = std::move(*ca);
  }
  if (!f.tls_cert.empty()) {
    auto cert = ReadFile("--tls-cert", f.tls_cert);
    if (!cert.ok()) return cert.status();
    auto key = ReadFile("--tls-key", f.tls_key);
    if (!key.ok()) return key.status();
    a.cert_pem_ = std::move(*cert);
    a.key_pem_ = std::move(*key);
  }
  if (!f.token_file.empty()) {
    auto text = ReadFile("--token-file", f.token_file);
    if (!text.ok()) return text.status();
    std::string first = text->substr(0, text->find('\n'));
    a.token_ = std::string(absl::StripAsciiWhitespace(first));
    if (a.token_.empty())
      return absl::InvalidArgumentError(
          absl::StrCat("--token-file: ", f.token_file, " has no token on its first line"));
    for (char c : a.token_)
      if (c < '!' || c > '~')
        return absl::InvalidArgumentError(
            absl::StrCat("--token-file: ", f.token_file, " holds characters a token cannot have"));
  }
  return a;
}

std::shared_ptr<grpc::ChannelCredentials> ClientAuth::ChannelCredentials() const {
  if (ca_pem_.empty()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = ca_pem_;
  o.pem_private_key = key_pem_;
  o.pem_cert_chain = cert_pem_;
  return grpc::SslCredentials(o);
}

void ClientAuth::Apply(grpc::ClientContext* context) const {
  if (!token_.empty()) context->AddMetadata("authorization", "Bearer " + token_);
}

}  // namespace kiln
