#include "common/metrics_http.h"

#include <netdb.h>
#include <poll.h>
#include <prometheus/text_serializer.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/daemon.h"

namespace kiln {
namespace {

void SendAll(int fd, const std::string& data) {
  for (size_t off = 0; off < data.size();) {
    ssize_t n = send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return;
    off += n;
  }
}

std::string Response(const std::string& status, const std::string& type, const std::string& body,
                     bool head) {
  return absl::StrCat("HTTP/1.1 ", status, "\r\nContent-Type: ", type,
                      "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n\r\n",
                      head ? "" : body);
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(
    const std::string& listen, std::shared_ptr<prometheus::Registry> registry,
    const std::string& flag) {
  auto hp = ParseHostPort(listen, flag);
  if (!hp.ok()) return hp.status();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  std::string port = std::to_string(hp->port);
  int rc = getaddrinfo(hp->host.empty() ? nullptr : hp->host.c_str(), port.c_str(), &hints, &found);
  if (rc != 0)
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": cannot resolve '", hp->host, "': ", gai_strerror(rc)));
  std::string error = "no address";
  int fd = -1;
  for (addrinfo* a = found; a && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 64) != 0) {
      error = strerror(errno);
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd < 0)
    return absl::UnavailableError(absl::StrCat(flag, ": cannot listen on ", listen, ": ", error));
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  char serv[16] = "0";
  getnameinfo(reinterpret_cast<sockaddr*>(&bound), len, nullptr, 0, serv, sizeof(serv),
              NI_NUMERICSERV);
  return std::unique_ptr<MetricsEndpoint>(
      new MetricsEndpoint(fd, std::atoi(serv), std::move(registry)));
}

MetricsEndpoint::MetricsEndpoint(int fd, int port, std::shared_ptr<prometheus::Registry> registry)
    : fd_(fd), port_(port), registry_(std::move(registry)) {
  thread_ = std::thread([this] { Serve(); });
}

MetricsEndpoint::~MetricsEndpoint() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  close(fd_);
}

void MetricsEndpoint::Serve() {
  while (!stop_) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, 200) <= 0) continue;
    int conn = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (conn < 0) continue;
    timeval timeout{2, 0};  // a client that sends nothing does not hold the endpoint up
    setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    setsockopt(conn, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
    Answer(conn);
    close(conn);
  }
}

void MetricsEndpoint::Answer(int conn) {
  std::string request;
  char buf[2048];
  while (request.find("\r\n\r\n") == std::string::npos && request.size() < 16384) {
    ssize_t n = recv(conn, buf, sizeof(buf), 0);
    if (n <= 0) break;
    request.append(buf, n);
  }
  std::string line = request.substr(0, request.find("\r\n"));
  bool head = absl::StartsWith(line, "HEAD ");
  if (!absl::StartsWith(line, "GET ") && !head) {
    SendAll(conn, Response("405 Method Not Allowed", "text/plain", "GET /metrics\n", false));
    return;
  }
  std::string path = line.substr(line.find(' ') + 1);
  path = path.substr(0, path.find_first_of(" ?"));
  if (path == "/metrics") {
    std::string body = prometheus::TextSerializer().Serialize(registry_->Collect());
    SendAll(conn, Response("200 OK", "text/plain; version=0.0.4; charset=utf-8", body, head));
  } else if (path == "/ready") {
    std::function<bool()> ready;
    {
      std::lock_guard<std::mutex> lock(ready_mu_);
      ready = ready_;
    }
    const bool yes = !ready || ready();
    SendAll(conn, Response(yes ? "200 OK" : "503 Service Unavailable", "text/plain",
                           yes ? "ready\n" : "not ready (standing by)\n", head));
  } else if (path == "/") {
    SendAll(conn, Response("200 OK", "text/plain", "Kiln: metrics at /metrics\n", head));
  } else {
    SendAll(conn, Response("404 Not Found", "text/plain", "not found; try /metrics\n", head));
  }
}

}  // namespace kiln
