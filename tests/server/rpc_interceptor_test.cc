// The RPC interceptor: every RPC of a running coordinator is counted by method and status code.
#include "server/rpc_interceptor.h"

#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <mutex>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "kiln/v1/tuning_service.grpc.pb.h"
#include "server/coordinator_server.h"
#include "server/services.h"
#include "tests/server/test_util.h"

namespace kiln::server {
namespace {

// GET http://127.0.0.1:PORT/metrics (the exposition text).
std::string Scrape(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return "";
  }
  std::string req = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  if (write(fd, req.data(), req.size()) < 0) return "";
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) out.append(buf, n);
  close(fd);
  return out;
}

// A port free on loopback right now (civetweb, under prometheus-cpp, cannot bind port 0).
int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

TEST(GrpcCodeName, MatchesTheCanonicalNames) {
  for (int i = 0; i <= 16; ++i)
    EXPECT_EQ(GrpcCodeName(static_cast<grpc::StatusCode>(i)),
              absl::StatusCodeToString(static_cast<absl::StatusCode>(i)));
  EXPECT_EQ(GrpcCodeName(static_cast<grpc::StatusCode>(99)), "UNKNOWN");
}

TEST(RpcInterceptor, CountsEveryRpcOfARunningCoordinator) {
  CoordinatorOptions o;
  o.listen = "127.0.0.1:0";
  o.metrics_listen = "127.0.0.1:" + std::to_string(FreePort());
  o.data_dir = testing::TempDir();
  o.quiet = true;
  auto running = StartCoordinator(o);
  ASSERT_TRUE(running.ok()) << running.status();
  auto stub = v1::TuningService::NewStub(
      grpc::CreateChannel((*running)->address(), grpc::InsecureChannelCredentials()));
  for (int i = 0; i < 2; ++i) {
    grpc::ClientContext ctx;
    v1::ListJobsResponse resp;
    ASSERT_TRUE(stub->ListJobs(&ctx, v1::ListJobsRequest(), &resp).ok());
  }
  {
    grpc::ClientContext ctx;
    v1::GetJobRequest req;
    req.set_job_id("not a job id");
    v1::Job resp;
    EXPECT_EQ(stub->GetJob(&ctx, req, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  std::string text = Scrape((*running)->metrics_port());
  EXPECT_NE(text.find("kiln_rpc_requests_total{code=\"OK\",method=\"/kiln.v1.TuningService/"
                      "ListJobs\"} 2"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("kiln_rpc_requests_total{code=\"INVALID_ARGUMENT\",method=\"/kiln.v1."
                      "TuningService/GetJob\"} 1"),
            std::string::npos);
  EXPECT_NE(text.find("kiln_rpc_duration_seconds_count{method=\"/kiln.v1.TuningService/"
                      "ListJobs\"} 2"),
            std::string::npos);
  // The store under the core is metered too.
  EXPECT_NE(text.find("kiln_store_operations_total{op=\"load_jobs\",result=\"ok\"} 1"),
            std::string::npos);
  (*running)->Shutdown();
}

TEST(RpcInterceptor, ReportsMethodCodeAndTimeToItsObserver) {
  std::mutex mu;
  std::vector<std::string> seen;
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> factories;
  factories.push_back(NewRpcInterceptorFactory(
      [&](const std::string& method, const std::string& code, double seconds) {
        std::lock_guard<std::mutex> lock(mu);
        EXPECT_GE(seconds, 0);
        seen.push_back(method + " " + code);
      }));
  auto store = *OpenStore("", testing::TempDir());
  FakeClock clock;
  Coordinator core(store.get(), &clock, nullptr, CoreOptions{});
  TuningServiceImpl service(&core, nullptr);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  builder.experimental().SetInterceptorCreators(std::move(factories));
  auto server = builder.BuildAndStart();
  ASSERT_NE(port, 0);
  auto stub = v1::TuningService::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
  {
    grpc::ClientContext ctx;
    v1::ListWorkersResponse resp;
    ASSERT_TRUE(stub->ListWorkers(&ctx, v1::ListWorkersRequest(), &resp).ok());
  }
  {
    grpc::ClientContext ctx;
    v1::GetJobRequest req;
    req.set_job_id("j-000000000000");
    v1::Job resp;
    EXPECT_EQ(stub->GetJob(&ctx, req, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  server->Shutdown();
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(seen, (std::vector<std::string>{"/kiln.v1.TuningService/ListWorkers OK",
                                            "/kiln.v1.TuningService/GetJob NOT_FOUND"}));
}

}  // namespace
}  // namespace kiln::server
