// The auth layer: the tokens file parser, token identification, the role rules, CallerOf, and
// a coordinator with --tokens refusing every RPC of both services without a token.
#include <google/protobuf/descriptor.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <map>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "kiln/v1/tuning_service.grpc.pb.h"
#include "kiln/v1/worker_service.grpc.pb.h"
#include "server/authenticator.h"
#include "server/coordinator_server.h"
#include "tests/server/test_util.h"

namespace kiln::server {
namespace {

using absl::StatusCode;

constexpr char kAbcSha256[] = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

std::string WriteFile(const std::string& text) {
  std::string path = testing::TempDir() + "/tokens";
  std::ofstream(path) << text;
  return path;
}

TEST(Tokens, Sha256HexIsTheStandardDigest) { EXPECT_EQ(Sha256Hex("abc"), kAbcSha256); }

TEST(Tokens, ParsesRolesNamesAndDigestsSkippingCommentsAndBlankLines) {
  auto t = ParseTokens(absl::StrCat("# lab tokens\n\n  submit alice ", kAbcSha256,
                                    "\nworker lab-1 ", absl::AsciiStrToUpper(kAbcSha256),
                                    "  \r\nadmin root@lab ", Sha256Hex("x"), "\n   # end\n"),
                       "tokens");
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->size(), 3u);
  EXPECT_EQ((*t)[0].role, Role::kSubmit);
  EXPECT_EQ((*t)[0].name, "alice");
  EXPECT_EQ((*t)[1].role, Role::kWorker);
  EXPECT_EQ((*t)[1].digest, (*t)[0].digest);  // hex case does not matter
  EXPECT_EQ((*t)[2].role, Role::kAdmin);
  EXPECT_EQ((*t)[2].name, "root@lab");
}

TEST(Tokens, AMalformedLineIsAnErrorNamingItsNumberNotItsText) {
  const std::string good = absl::StrCat("submit alice ", kAbcSha256, "\n");
  for (const std::string& bad :
       {absl::StrCat("submit alice\n"), absl::StrCat("root alice ", kAbcSha256, "\n"),
        absl::StrCat("submit alice ", std::string(64, 'g'), "\n"),
        absl::StrCat("submit alice ", kAbcSha256, "00\n"),
        absl::StrCat("submit ", std::string(65, 'n'), " ", kAbcSha256, "\n"),
        absl::StrCat("submit alice ", kAbcSha256, " extra\n")}) {
    auto t = ParseTokens("# header\n" + good + bad, "/etc/kiln/tokens");
    ASSERT_FALSE(t.ok()) << bad;
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(t.status().message().find("/etc/kiln/tokens: line 3:"), std::string::npos)
        << t.status();
    EXPECT_EQ(t.status().message().find(kAbcSha256), std::string::npos) << t.status();
  }
}

TEST(Tokens, NamesAreShortPrintableAndWithoutWhitespace) {
  EXPECT_TRUE(ValidateCredentialName("lab-1.cpu@site_2").ok());
  EXPECT_TRUE(ValidateCredentialName(std::string(64, 'a')).ok());
  EXPECT_FALSE(ValidateCredentialName("").ok());
  EXPECT_FALSE(ValidateCredentialName(std::string(65, 'a')).ok());
  EXPECT_FALSE(ValidateCredentialName("a b").ok());
  EXPECT_FALSE(ValidateCredentialName("a\nb").ok());
  EXPECT_FALSE(ValidateCredentialName("caf\xc3\xa9").ok());
}

Authenticator WithTokens(bool client_ca = false) {
  std::vector<TokenEntry> t = *ParseTokens(
      absl::StrCat("submit alice ", Sha256Hex("alice-secret"), "\nworker lab-1 ",
                   Sha256Hex("worker-secret"), "\nadmin root ", Sha256Hex("admin-secret"), "\n"),
      "tokens");
  return Authenticator(AuthPolicy{true, client_ca}, std::move(t));
}

TEST(Identify, ABearerTokenNamesItsRoleAndName) {
  Authenticator a = WithTokens();
  std::string reason;
  std::string h = "Bearer alice-secret";
  Caller c = a.IdentifyParts(&h, false, "", &reason);
  EXPECT_EQ(c.role, Role::kSubmit);
  EXPECT_EQ(c.name, "alice");
  h = "Bearer worker-secret";
  EXPECT_EQ(a.IdentifyParts(&h, true, "kiln-worker", &reason).name, "lab-1");  // token first
  EXPECT_TRUE(a.IdentifyParts(&h, true, "kiln-worker", &reason).client_certificate);
}

TEST(Identify, NoUnknownOrMalformedTokenIsNobody) {
  Authenticator a = WithTokens();
  std::string reason;
  EXPECT_EQ(a.IdentifyParts(nullptr, false, "", &reason).role, Role::kNone);
  EXPECT_EQ(reason, "no_token");
  for (std::string h : std::vector<std::string>{
           "Bearer alice-secreT", "Bearer ", "alice-secret", "Basic alice-secret",
           "Bearer alice-secret-and-more", std::string(4096, 'B')}) {
    reason.clear();
    EXPECT_EQ(a.IdentifyParts(&h, true, "kiln-worker", &reason).role, Role::kNone) << h;
    EXPECT_EQ(reason, "unknown_token");
  }
}

TEST(Identify, WithoutTokensEveryCallerIsAnAdminNamedByItsCertificate) {
  Authenticator a(AuthPolicy{false, true}, {});
  std::string reason;
  Caller c = a.IdentifyParts(nullptr, false, "", &reason);
  EXPECT_EQ(c.role, Role::kAdmin);
  EXPECT_EQ(c.name, "");
  c = a.IdentifyParts(nullptr, true, "lab-7", &reason);
  EXPECT_EQ(c.name, "lab-7");
  EXPECT_TRUE(c.client_certificate);
}

TEST(Rules, EachRoleReachesOnlyItsService) {
  const AuthPolicy tokens{true, false};
  struct Case {
    Role role;
    Access access;
    StatusCode want;
  } cases[] = {
      {Role::kNone, Access::kTuning, StatusCode::kUnauthenticated},
      {Role::kNone, Access::kWorkerService, StatusCode::kUnauthenticated},
      {Role::kSubmit, Access::kTuning, StatusCode::kOk},
      {Role::kSubmit, Access::kWorkerService, StatusCode::kPermissionDenied},
      {Role::kWorker, Access::kTuning, StatusCode::kPermissionDenied},
      {Role::kWorker, Access::kWorkerService, StatusCode::kOk},
      {Role::kAdmin, Access::kTuning, StatusCode::kOk},
      {Role::kAdmin, Access::kWorkerService, StatusCode::kOk},
  };
  for (const Case& c : cases) {
    std::string reason;
    absl::Status s = CheckAccess(Caller{c.role, "x", false}, c.access, tokens, &reason);
    EXPECT_EQ(s.code(), c.want) << RoleName(c.role) << " " << static_cast<int>(c.access);
    EXPECT_EQ(reason.empty(), s.ok());
    EXPECT_LT(s.message().size(), 200u);
  }
}

TEST(Rules, WithAClientCaWorkerServiceNeedsAVerifiedCertificate) {
  const AuthPolicy mtls{true, true};
  std::string reason;
  absl::Status s =
      CheckAccess(Caller{Role::kWorker, "lab-1", false}, Access::kWorkerService, mtls, &reason);
  EXPECT_EQ(s.code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(reason, "no_client_certificate");
  reason.clear();
  s = CheckAccess(Caller{Role::kAdmin, "root", false}, Access::kWorkerService, mtls, &reason);
  EXPECT_EQ(s.code(), StatusCode::kUnauthenticated);
  EXPECT_TRUE(
      CheckAccess(Caller{Role::kWorker, "lab-1", true}, Access::kWorkerService, mtls, &reason)
          .ok());
  // TuningService callers need no certificate.
  EXPECT_TRUE(
      CheckAccess(Caller{Role::kSubmit, "alice", false}, Access::kTuning, mtls, &reason).ok());
}

TEST(Rules, ASubmitterUsesOnlyItsOwnJobs) {
  EXPECT_TRUE(MayUseJob(Caller{Role::kSubmit, "alice", false}, "alice"));
  EXPECT_FALSE(MayUseJob(Caller{Role::kSubmit, "alice", false}, "bob"));
  EXPECT_FALSE(MayUseJob(Caller{Role::kSubmit, "alice", false}, ""));
  EXPECT_FALSE(MayUseJob(Caller{Role::kSubmit, "", false}, ""));
  EXPECT_FALSE(MayUseJob(Caller{Role::kWorker, "alice", false}, "alice"));
  EXPECT_TRUE(MayUseJob(Caller{Role::kAdmin, "root", false}, "bob"));
  EXPECT_TRUE(MayUseJob(Caller{Role::kAdmin, "", false}, ""));
}

TEST(Loopback, OnlyLoopbackHostsCount) {
  for (const char* h : {"127.0.0.1", "127.1.2.3", "localhost", "LOCALHOST", "::1", "[::1]"})
    EXPECT_TRUE(IsLoopbackHost(h)) << h;
  for (const char* h : {"0.0.0.0", "", "::", "[::]", "10.0.0.1", "128.0.0.1", "lab.example",
                        "127.0.0.1.example", "::ffff:10.0.0.1"})
    EXPECT_FALSE(IsLoopbackHost(h)) << h;
}

TEST(CallerOf, AnswersTheScopesCallerAndAnAnonymousAdminWithoutAuth) {
  grpc::ServerContext ctx;
  Caller c = CallerOf(ctx);
  EXPECT_EQ(c.role, Role::kAdmin);
  EXPECT_EQ(c.name, "");
  EXPECT_FALSE(c.client_certificate);
  {
    CallerScope scope(&ctx, Caller{Role::kWorker, "lab-1", true});
    EXPECT_EQ(CallerOf(ctx).name, "lab-1");
    EXPECT_TRUE(CallerOf(ctx).client_certificate);
  }
  EXPECT_EQ(CallerOf(ctx).name, "");
  Authenticator enforcing = WithTokens();  // outside a checked handler: nobody
  EXPECT_EQ(CallerOf(ctx).role, Role::kNone);
}

// A coordinator with --tokens (plaintext on loopback: TLS is the integration test's part).
class TokenServer : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::TempDir();
    CoordinatorOptions o;
    o.listen = "127.0.0.1:0";
    o.data_dir = dir_;
    o.metrics_listen = "";
    o.quiet = true;
    o.tokens = WriteFile(absl::StrCat("submit alice ", Sha256Hex("alice-secret"), "\nsubmit bob ",
                                      Sha256Hex("bob-secret"), "\nworker lab-1 ",
                                      Sha256Hex("worker-secret"), "\nadmin root ",
                                      Sha256Hex("admin-secret"), "\n"));
    auto running = StartCoordinator(o);
    ASSERT_TRUE(running.ok()) << running.status();
    server_ = std::move(*running);
    auto channel = grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials());
    tuning_ = v1::TuningService::NewStub(channel);
    workers_ = v1::WorkerService::NewStub(channel);
  }
  void TearDown() override {
    if (server_) server_->Shutdown();
  }

  std::unique_ptr<grpc::ClientContext> Ctx(const std::string& token) {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    if (!token.empty()) ctx->AddMetadata("authorization", "Bearer " + token);
    return ctx;
  }
  grpc::Status Submit(const std::string& token, std::string* id) {
    v1::SubmitJobRequest req;
    *req.mutable_spec() = testing::GemmSpec(8, 4);
    req.mutable_spec()->set_owner("someone-else");  // the coordinator decides the owner
    v1::SubmitJobResponse resp;
    grpc::Status s = tuning_->SubmitJob(Ctx(token).get(), req, &resp);
    if (id) *id = resp.job_id();
    return s;
  }
  grpc::Status Get(const std::string& token, const std::string& id, v1::Job* job) {
    v1::GetJobRequest req;
    req.set_job_id(id);
    return tuning_->GetJob(Ctx(token).get(), req, job);
  }

  std::string dir_;
  std::unique_ptr<RunningCoordinator> server_;
  std::unique_ptr<v1::TuningService::Stub> tuning_;
  std::unique_ptr<v1::WorkerService::Stub> workers_;
};

// Every RPC of both services, called with `token`; returns the status codes by method name.
std::map<std::string, grpc::StatusCode> CallEverything(
    v1::TuningService::Stub* t, v1::WorkerService::Stub* w,
    const std::function<std::unique_ptr<grpc::ClientContext>()>& ctx) {
  std::map<std::string, grpc::StatusCode> got;
  const std::string job = "j-000000000000";
  {
    v1::SubmitJobRequest r;
    *r.mutable_spec() = testing::GemmSpec(8, 4);
    v1::SubmitJobResponse resp;
    got["SubmitJob"] = t->SubmitJob(ctx().get(), r, &resp).error_code();
  }
  {
    v1::GetJobRequest r;
    r.set_job_id(job);
    v1::Job resp;
    got["GetJob"] = t->GetJob(ctx().get(), r, &resp).error_code();
  }
  {
    v1::ListJobsResponse resp;
    got["ListJobs"] = t->ListJobs(ctx().get(), v1::ListJobsRequest(), &resp).error_code();
  }
  {
    v1::WatchJobRequest r;
    r.set_job_id(job);
    auto c = ctx();
    auto reader = t->WatchJob(c.get(), r);
    v1::JobEvent e;
    while (reader->Read(&e)) {
    }
    got["WatchJob"] = reader->Finish().error_code();
  }
  {
    v1::CancelJobRequest r;
    r.set_job_id(job);
    v1::CancelJobResponse resp;
    got["CancelJob"] = t->CancelJob(ctx().get(), r, &resp).error_code();
  }
  {
    v1::GetResultsRequest r;
    r.set_job_id(job);
    v1::GetResultsResponse resp;
    got["GetResults"] = t->GetResults(ctx().get(), r, &resp).error_code();
  }
  {
    v1::ListWorkersResponse resp;
    got["ListWorkers"] = t->ListWorkers(ctx().get(), v1::ListWorkersRequest(), &resp).error_code();
  }
  {
    v1::LookupBestResponse resp;
    got["LookupBest"] = t->LookupBest(ctx().get(), v1::LookupBestRequest(), &resp).error_code();
  }
  {
    v1::ExportKernelsRequest r;
    r.set_job_id(job);
    v1::ExportKernelsResponse resp;
    got["ExportKernels"] = t->ExportKernels(ctx().get(), r, &resp).error_code();
  }
  {
    v1::RegisterRequest r;
    *r.mutable_chip() = testing::CpuChip();
    r.set_slots(1);
    r.set_name("w");
    v1::RegisterResponse resp;
    got["Register"] = w->Register(ctx().get(), r, &resp).error_code();
  }
  {
    v1::HeartbeatResponse resp;
    got["Heartbeat"] = w->Heartbeat(ctx().get(), v1::HeartbeatRequest(), &resp).error_code();
  }
  {
    v1::LeaseTrialsResponse resp;
    got["LeaseTrials"] = w->LeaseTrials(ctx().get(), v1::LeaseTrialsRequest(), &resp).error_code();
  }
  {
    v1::ReportResultsResponse resp;
    got["ReportResults"] =
        w->ReportResults(ctx().get(), v1::ReportResultsRequest(), &resp).error_code();
  }
  {
    v1::ReleaseTrialsResponse resp;
    got["ReleaseTrials"] =
        w->ReleaseTrials(ctx().get(), v1::ReleaseTrialsRequest(), &resp).error_code();
  }
  {
    v1::DeregisterResponse resp;
    got["Deregister"] = w->Deregister(ctx().get(), v1::DeregisterRequest(), &resp).error_code();
  }
  return got;
}

TEST_F(TokenServer, EveryRpcOfBothServicesIsRefusedWithoutAToken) {
  for (const std::string& token : {std::string(), std::string("not-a-token")}) {
    auto got = CallEverything(tuning_.get(), workers_.get(), [&] { return Ctx(token); });
    std::set<std::string> methods;  // a method added to a service must be added here too
    for (const char* name :
         {v1::TuningService::service_full_name(), v1::WorkerService::service_full_name()}) {
      const auto* s = google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(name);
      ASSERT_NE(s, nullptr) << name;
      for (int i = 0; i < s->method_count(); ++i) methods.insert(s->method(i)->name());
    }
    ASSERT_EQ(got.size(), methods.size());
    for (const auto& [method, code] : got) {
      EXPECT_TRUE(methods.count(method)) << method;
      EXPECT_EQ(code, grpc::StatusCode::UNAUTHENTICATED) << method << " token '" << token << "'";
    }
  }
}

TEST_F(TokenServer, WrongRolesArePermissionDenied) {
  auto as_worker =
      CallEverything(tuning_.get(), workers_.get(), [&] { return Ctx("worker-secret"); });
  for (const char* m : {"SubmitJob", "GetJob", "ListJobs", "WatchJob", "CancelJob", "GetResults",
                        "ListWorkers", "LookupBest", "ExportKernels"})
    EXPECT_EQ(as_worker[m], grpc::StatusCode::PERMISSION_DENIED) << m;
  for (const char* m :
       {"Register", "Heartbeat", "LeaseTrials", "ReportResults", "ReleaseTrials", "Deregister"}) {
    EXPECT_NE(as_worker[m], grpc::StatusCode::PERMISSION_DENIED) << m;
    EXPECT_NE(as_worker[m], grpc::StatusCode::UNAUTHENTICATED) << m;
  }
  auto as_submit =
      CallEverything(tuning_.get(), workers_.get(), [&] { return Ctx("alice-secret"); });
  for (const char* m :
       {"Register", "Heartbeat", "LeaseTrials", "ReportResults", "ReleaseTrials", "Deregister"})
    EXPECT_EQ(as_submit[m], grpc::StatusCode::PERMISSION_DENIED) << m;
  EXPECT_EQ(as_submit["SubmitJob"], grpc::StatusCode::OK);
  EXPECT_EQ(as_submit["ListWorkers"], grpc::StatusCode::OK);
}

TEST_F(TokenServer, ASubmitterSeesAndCancelsOnlyItsOwnJobs) {
  std::string mine, theirs;
  ASSERT_TRUE(Submit("alice-secret", &mine).ok());
  ASSERT_TRUE(Submit("bob-secret", &theirs).ok());
  v1::Job job;
  ASSERT_TRUE(Get("alice-secret", mine, &job).ok());
  EXPECT_EQ(job.spec().owner(), "alice");
  EXPECT_EQ(Get("alice-secret", theirs, &job).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(Get("admin-secret", theirs, &job).ok());
  EXPECT_EQ(job.spec().owner(), "bob");
  {
    v1::CancelJobRequest r;
    r.set_job_id(theirs);
    v1::CancelJobResponse resp;
    EXPECT_EQ(tuning_->CancelJob(Ctx("alice-secret").get(), r, &resp).error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
    v1::GetResultsRequest g;
    g.set_job_id(theirs);
    v1::GetResultsResponse results;
    EXPECT_EQ(tuning_->GetResults(Ctx("alice-secret").get(), g, &results).error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
    r.set_job_id(mine);
    EXPECT_TRUE(tuning_->CancelJob(Ctx("alice-secret").get(), r, &resp).ok());
  }
  v1::ListJobsResponse list;
  ASSERT_TRUE(tuning_->ListJobs(Ctx("alice-secret").get(), v1::ListJobsRequest(), &list).ok());
  ASSERT_EQ(list.jobs_size(), 1);
  EXPECT_EQ(list.jobs(0).id(), mine);
  list.Clear();
  ASSERT_TRUE(tuning_->ListJobs(Ctx("admin-secret").get(), v1::ListJobsRequest(), &list).ok());
  EXPECT_EQ(list.jobs_size(), 2);
}

TEST(CoordinatorStart, ExposedPlaintextListenersAndBadTokenFilesAreRefused) {
  CoordinatorOptions o;
  o.data_dir = testing::TempDir();
  o.metrics_listen = "";
  o.quiet = true;
  for (const char* listen : {"0.0.0.0:0", "[::]:0"}) {
    o.listen = listen;
    auto r = StartCoordinator(o);
    ASSERT_FALSE(r.ok()) << listen;
    EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(r.status().message().find("--insecure"), std::string::npos) << r.status();
  }
  o.listen = "0.0.0.0:0";
  o.tokens = WriteFile(absl::StrCat("submit alice ", Sha256Hex("a"), "\n"));
  EXPECT_EQ(StartCoordinator(o).status().code(), StatusCode::kFailedPrecondition)  // no TLS
      << "tokens without TLS beyond loopback";
  o.listen = "127.0.0.1:0";
  o.tokens = WriteFile(absl::StrCat("submit alice ", Sha256Hex("a"), "\nsubmitter bob x\n"));
  auto r = StartCoordinator(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("line 2"), std::string::npos) << r.status();
  o.tokens = o.data_dir + "/missing";
  r = StartCoordinator(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("missing"), std::string::npos) << r.status();
  o.tokens.clear();
  o.tls_cert = o.data_dir + "/server.pem";  // without --tls-key
  EXPECT_EQ(StartCoordinator(o).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kiln::server
