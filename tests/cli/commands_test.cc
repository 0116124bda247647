// Tests of the kiln commands against an in-process fake TuningService (incl. watch reconnects).
#include "cli/commands.h"

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>

#include "cli/knobs.h"
#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "kiln/v1/tuning_service.grpc.pb.h"

namespace kiln::cli {
namespace {

using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::Not;

// Answers from a script; WatchJob sends `watch_script` and then ends, or hangs until cancelled.
class FakeTuning final : public v1::TuningService::Service {
 public:
  std::mutex mu;
  std::vector<v1::JobSpec> submitted;
  v1::Job job;
  std::vector<v1::Job> watch_script;
  bool hang_after_script = false;
  std::vector<v1::WorkerInfo> workers;
  std::atomic<int> events_sent{0};

  grpc::Status SubmitJob(grpc::ServerContext*, const v1::SubmitJobRequest* req,
                         v1::SubmitJobResponse* resp) override {
    std::lock_guard<std::mutex> lock(mu);
    if (req->spec().chip() == "tpu")
      return {grpc::StatusCode::INVALID_ARGUMENT, "chip: no worker has a chip type 'tpu*'"};
    submitted.push_back(req->spec());
    resp->set_job_id("job-1");
    return grpc::Status::OK;
  }
  grpc::Status GetJob(grpc::ServerContext*, const v1::GetJobRequest* req, v1::Job* resp) override {
    std::lock_guard<std::mutex> lock(mu);
    if (req->job_id() != job.id())
      return {grpc::StatusCode::NOT_FOUND, "job: no job " + req->job_id()};
    *resp = job;
    return grpc::Status::OK;
  }
  grpc::Status ListJobs(grpc::ServerContext*, const v1::ListJobsRequest*,
                        v1::ListJobsResponse* resp) override {
    std::lock_guard<std::mutex> lock(mu);
    *resp->add_jobs() = job;
    return grpc::Status::OK;
  }
  grpc::Status WatchJob(grpc::ServerContext* ctx, const v1::WatchJobRequest*,
                        grpc::ServerWriter<v1::JobEvent>* writer) override {
    std::vector<v1::Job> script;
    bool hang;
    {
      std::lock_guard<std::mutex> lock(mu);
      script = watch_script;
      hang = hang_after_script;
    }
    for (const v1::Job& snapshot : script) {
      {
        std::lock_guard<std::mutex> lock(mu);
        job = snapshot;
      }
      v1::JobEvent e;
      e.set_kind(v1::JobEvent::PROGRESS);
      *e.mutable_job() = snapshot;
      writer->Write(e);
      ++events_sent;
    }
    while (hang && !ctx->IsCancelled()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return grpc::Status::OK;
  }
  grpc::Status CancelJob(grpc::ServerContext*, const v1::CancelJobRequest*,
                         v1::CancelJobResponse* resp) override {
    resp->set_state(v1::CANCELLED);
    return grpc::Status::OK;
  }
  grpc::Status GetResults(grpc::ServerContext*, const v1::GetResultsRequest* req,
                          v1::GetResultsResponse* resp) override {
    std::lock_guard<std::mutex> lock(mu);
    if (req->job_id() != job.id())
      return {grpc::StatusCode::NOT_FOUND, "job: no job " + req->job_id()};
    *resp->mutable_job() = job;
    return grpc::Status::OK;
  }
  grpc::Status ExportKernels(grpc::ServerContext*, const v1::ExportKernelsRequest* req,
                             v1::ExportKernelsResponse* resp) override {
    std::lock_guard<std::mutex> lock(mu);
    if (req->job_id() != job.id())
      return {grpc::StatusCode::NOT_FOUND, "job: no job " + req->job_id()};
    resp->set_job_id(job.id());
    resp->mutable_chip()->set_chip_type("cpu-x86_64-avx2");
    resp->mutable_chip()->set_model("Test CPU");
    auto* k = resp->add_kernels();
    k->set_workload_key("gemm m=8 n=64 k=64 fp32");
    k->set_file_name("gemm_m8_n64_k64_fp32.cc");
    k->set_source("#define NB 64\nextern \"C\" void kiln_gemm() {}\n");
    k->set_dialect("cpp");
    k->set_entry("kiln_gemm");
    (*k->mutable_config()->mutable_knobs())["NB"] = 64;
    k->mutable_best()->set_median_us(12.5);
    k->mutable_best()->add_samples_us(12.5);
    return grpc::Status::OK;
  }
  // The tuning database: `records`, fastest first, of the chip type asked (exact; "" = any).
  std::vector<v1::TuningRecord> records;
  grpc::Status LookupBest(grpc::ServerContext*, const v1::LookupBestRequest* req,
                          v1::LookupBestResponse* resp) override {
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& r : records)
      if ((req->chip_type().empty() || r.chip_type() == req->chip_type()) &&
          resp->records_size() < req->k())
        *resp->add_records() = r;
    return grpc::Status::OK;
  }
  grpc::Status ListWorkers(grpc::ServerContext*, const v1::ListWorkersRequest*,
                           v1::ListWorkersResponse* resp) override {
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& w : workers) *resp->add_workers() = w;
    return grpc::Status::OK;
  }
};

std::unique_ptr<grpc::Server> Serve(FakeTuning* service, int* port) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:" + std::to_string(*port), grpc::InsecureServerCredentials(),
                           port);
  builder.RegisterService(service);
  return builder.BuildAndStart();
}

v1::Job MakeJob(v1::JobState state, int done) {
  v1::Job job;
  job.set_id("job-1");
  job.set_state(state);
  job.set_chip_type("cpu-x86_64-avx2");
  job.mutable_spec()->set_chip("cpu");
  job.mutable_spec()->set_budget_trials(8);
  job.set_trials_done(done);
  v1::TaskResult* task = job.add_tasks();
  task->set_workload_key("gemm m=8 n=64 k=64 fp32");
  task->set_count(1);
  task->set_trials_ok(done);
  task->set_trials_budget(8);
  if (done > 0) {
    task->mutable_best()->set_status(v1::OK);
    task->mutable_best()->set_median_us(10.0 + 8 - done);
    (*task->mutable_best_config()->mutable_knobs())["MR"] = 4;
  }
  return job;
}

class CommandsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = Serve(&fake_, &port_);
    ASSERT_TRUE(server_);
    address_ = "127.0.0.1:" + std::to_string(port_);
    fake_.job = MakeJob(v1::SUCCEEDED, 8);
    v1::WorkerInfo w;
    w.set_id("w-1");
    w.set_state("alive");
    w.mutable_chip()->set_chip_type("cpu-x86_64-avx2");
    w.mutable_chip()->set_model("Test CPU");
    fake_.workers.push_back(w);
  }
  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now());
  }

  int Run(std::vector<std::string> args) {
    out_.str("");
    err_.str("");
    Invocation inv;
    args.push_back("--coordinator=" + address_);
    absl::Status parsed = ParseCommandLine(args, nullptr, &inv);
    EXPECT_TRUE(parsed.ok()) << parsed;
    Io io{out_, err_, false, [] { return int64_t{1'000'000}; }};
    return RunRemoteCommand(inv, io);
  }

  FakeTuning fake_;
  int port_ = 0;
  std::string address_;
  std::unique_ptr<grpc::Server> server_;
  std::ostringstream out_, err_;
};

const std::vector<std::string> kSubmit = {"submit", "--op", "gemm",     "--shape", "M=8,N=64,K=64",
                                          "--chip", "cpu",  "--budget", "8"};

std::vector<std::string> With(std::vector<std::string> base, std::vector<std::string> extra) {
  base.insert(base.end(), extra.begin(), extra.end());
  return base;
}

TEST_F(CommandsTest, SubmitPrintsTheJobId) {
  EXPECT_EQ(Run(kSubmit), 0);
  EXPECT_EQ(out_.str(), "job-1\n");
  EXPECT_EQ(Run(With(kSubmit, {"--json"})), 0);
  EXPECT_EQ(out_.str(), "{\"job_id\":\"job-1\"}\n");
  ASSERT_EQ(fake_.submitted.size(), 2u);
  EXPECT_EQ(fake_.submitted[0].budget_trials(), 8);
  EXPECT_EQ(fake_.submitted[0].workload().dims().at("N"), 64);
}

TEST_F(CommandsTest, ServerErrorsPrintCodeAndMessage) {
  std::vector<std::string> args = kSubmit;
  args[6] = "tpu";
  EXPECT_EQ(Run(args), 2);  // refused as malformed: a usage error, as kiln's own refusals
  EXPECT_EQ(err_.str(), "kiln: INVALID_ARGUMENT: chip: no worker has a chip type 'tpu*'\n");
  EXPECT_EQ(Run({"results", "nope"}), 1);
  EXPECT_EQ(err_.str(), "kiln: NOT_FOUND: job: no job nope\n");
}

TEST_F(CommandsTest, SubmitWaitShowsProgressThenResults) {
  fake_.job = MakeJob(v1::QUEUED, 0);
  fake_.watch_script = {MakeJob(v1::RUNNING, 3), MakeJob(v1::RUNNING, 6),
                        MakeJob(v1::SUCCEEDED, 8)};
  EXPECT_EQ(Run(With(kSubmit, {"--wait"})), 0);
  EXPECT_THAT(err_.str(), HasSubstr("submitted job job-1"));
  EXPECT_THAT(err_.str(), HasSubstr("3/8 trials"));
  EXPECT_THAT(err_.str(), HasSubstr("SUCCEEDED"));
  EXPECT_THAT(out_.str(), HasSubstr("job job-1  SUCCEEDED  chip cpu-x86_64-avx2"));
  EXPECT_THAT(out_.str(), HasSubstr("best config: MR=4"));

  // --wait --json prints the results object, as tune --local --json and results --json do.
  fake_.job = MakeJob(v1::QUEUED, 0);
  EXPECT_EQ(Run(With(kSubmit, {"--wait", "--json"})), 0);
  google::protobuf::Struct parsed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(out_.str(), &parsed).ok()) << out_.str();
  EXPECT_EQ(parsed.fields().at("job_id").string_value(), "job-1");
  EXPECT_TRUE(parsed.fields().count("tasks")) << out_.str();
  const std::string waited = out_.str();
  EXPECT_EQ(Run({"results", "job-1", "--json"}), 0);
  EXPECT_EQ(waited, out_.str());
}

TEST_F(CommandsTest, SubmitWaitExitsOneWhenTheJobFails) {
  v1::Job failed = MakeJob(v1::FAILED, 2);
  failed.set_message("no worker matched chip cpu within 60 s");
  fake_.job = MakeJob(v1::QUEUED, 0);
  fake_.watch_script = {MakeJob(v1::RUNNING, 1), failed};
  EXPECT_EQ(Run(With(kSubmit, {"--wait"})), 1);
  EXPECT_THAT(err_.str(), HasSubstr("job job-1 FAILED: no worker matched"));
  EXPECT_THAT(out_.str(), HasSubstr("job job-1  FAILED"));
}

TEST_F(CommandsTest, WatchSkipsReplayedHistoryOlderThanTheSnapshot) {
  fake_.job = MakeJob(v1::RUNNING, 5);
  fake_.watch_script = {MakeJob(v1::QUEUED, 0), MakeJob(v1::RUNNING, 2), MakeJob(v1::RUNNING, 5),
                        MakeJob(v1::SUCCEEDED, 8)};
  EXPECT_EQ(Run({"watch", "job-1"}), 0);
  EXPECT_THAT(err_.str(), Not(HasSubstr("QUEUED")));
  EXPECT_THAT(err_.str(), Not(HasSubstr("2/8")));
  EXPECT_THAT(err_.str(), HasSubstr("5/8 trials"));
  EXPECT_THAT(err_.str(), HasSubstr("8/8 trials"));
}

TEST_F(CommandsTest, WatchOfAFinishedJobEndsAtOnce) {
  EXPECT_EQ(Run({"watch", "job-1"}), 0);
  EXPECT_EQ(out_.str(), "job job-1 SUCCEEDED\n");
}

TEST_F(CommandsTest, WatchReconnectsAfterACoordinatorRestart) {
  fake_.job = MakeJob(v1::RUNNING, 2);
  fake_.watch_script = {MakeJob(v1::RUNNING, 2), MakeJob(v1::RUNNING, 4)};
  fake_.hang_after_script = true;
  int rc = -1;
  std::thread watcher([&] { rc = Run({"watch", "job-1"}); });
  while (fake_.events_sent < 2) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  server_->Shutdown(std::chrono::system_clock::now());  // breaks the stream
  server_.reset();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  FakeTuning restarted;
  restarted.job = MakeJob(v1::SUCCEEDED, 8);
  restarted.watch_script = {MakeJob(v1::RUNNING, 6), MakeJob(v1::SUCCEEDED, 8)};
  int port = port_;
  server_ = Serve(&restarted, &port);
  ASSERT_TRUE(server_) << "could not rebind port " << port_;
  watcher.join();
  server_->Shutdown(std::chrono::system_clock::now());
  server_.reset();
  EXPECT_EQ(rc, 0) << err_.str();
  EXPECT_THAT(err_.str(), HasSubstr("lost the connection to the coordinator"));
  EXPECT_THAT(err_.str(), HasSubstr("reconnected"));
  EXPECT_THAT(err_.str(), HasSubstr("6/8 trials"));
  EXPECT_EQ(out_.str(), "job job-1 SUCCEEDED\n");
}

TEST_F(CommandsTest, JobsResultsWorkersCancel) {
  EXPECT_EQ(Run({"jobs"}), 0);
  EXPECT_THAT(out_.str(), HasSubstr("ID     STATE      CHIP"));
  EXPECT_THAT(out_.str(), HasSubstr("job-1  SUCCEEDED  cpu-x86_64-avx2  gemm m=8 n=64 k=64 fp32"));

  EXPECT_EQ(Run({"results", "job-1", "--json"}), 0);
  google::protobuf::Struct parsed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(out_.str(), &parsed).ok()) << out_.str();
  EXPECT_EQ(parsed.fields().at("state").string_value(), "SUCCEEDED");
  EXPECT_EQ(parsed.fields().at("chip").struct_value().fields().at("model").string_value(),
            "Test CPU");

  EXPECT_EQ(Run({"workers"}), 0);
  EXPECT_THAT(out_.str(), HasSubstr("w-1"));
  EXPECT_EQ(Run({"workers", "--json"}), 0);
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(out_.str(), &parsed).ok());

  EXPECT_EQ(Run({"cancel", "job-1"}), 0);
  EXPECT_EQ(out_.str(), "job job-1 CANCELLED\n");
}

TEST_F(CommandsTest, ExportWritesSourcesAndManifestAllOrNothing) {
  const std::string dir = ::testing::TempDir() + "/kiln-export-test-" + std::to_string(port_);
  std::filesystem::remove_all(dir);
  EXPECT_EQ(Run({"export", "job-1", "--out", dir}), 0) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("exported 1 kernel of job job-1 (tuned on cpu-x86_64-avx2"));
  EXPECT_THAT(out_.str(), HasSubstr("gemm_m8_n64_k64_fp32.cc  gemm m=8 n=64 k=64 fp32  12.50"));
  std::ifstream src(dir + "/gemm_m8_n64_k64_fp32.cc");
  std::string text((std::istreambuf_iterator<char>(src)), std::istreambuf_iterator<char>());
  EXPECT_THAT(text, HasSubstr("#define NB 64"));
  std::ifstream manifest(dir + "/manifest.json");
  std::string json((std::istreambuf_iterator<char>(manifest)), std::istreambuf_iterator<char>());
  google::protobuf::Struct parsed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json, &parsed).ok()) << json;
  const auto& k = parsed.fields().at("kernels").list_value().values(0).struct_value().fields();
  EXPECT_EQ(k.at("file").string_value(), "gemm_m8_n64_k64_fp32.cc");
  EXPECT_EQ(k.at("config").struct_value().fields().at("NB").number_value(), 64);
  EXPECT_EQ(parsed.fields().at("chip").struct_value().fields().at("model").string_value(),
            "Test CPU");
  // Nothing is overwritten: a second export into the same directory is refused.
  EXPECT_EQ(Run({"export", "job-1", "--out", dir}), 1);
  EXPECT_THAT(err_.str(), HasSubstr("exists and is not an empty directory; nothing was written"));
  // --json prints the manifest; an unknown job is the coordinator's NOT_FOUND.
  std::filesystem::remove_all(dir);
  EXPECT_EQ(Run({"export", "job-1", "--out", dir, "--json"}), 0);
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(out_.str(), &parsed).ok()) << out_.str();
  EXPECT_EQ(parsed.fields().at("job_id").string_value(), "job-1");
  EXPECT_EQ(Run({"export", "nope", "--out", dir + "-2"}), 1);
  EXPECT_THAT(err_.str(), HasSubstr("NOT_FOUND"));
  EXPECT_FALSE(std::filesystem::exists(dir + "-2"));
  std::filesystem::remove_all(dir);
}

v1::TuningRecord Record(const std::string& chip_type, double median_us, const std::string& job) {
  v1::TuningRecord r;
  r.set_workload_key("gemm m=8 n=64 k=64 fp32");
  r.mutable_workload()->set_op(v1::GEMM);
  (*r.mutable_workload()->mutable_dims())["M"] = 8;
  (*r.mutable_workload()->mutable_dims())["N"] = 64;
  (*r.mutable_workload()->mutable_dims())["K"] = 64;
  r.mutable_workload()->set_dtype(v1::FP32);
  r.set_chip_type(chip_type);
  r.mutable_chip()->set_model("Test CPU");
  (*r.mutable_config()->mutable_knobs())["NB"] = 64;
  r.set_config_key("NB=64");
  r.mutable_measurement()->set_status(v1::OK);
  r.mutable_measurement()->set_median_us(median_us);
  r.mutable_measurement()->set_gflops(8.0 * 64 * 64 * 2 / (median_us * 1e3));
  r.set_job_id(job);
  return r;
}

const std::vector<std::string> kBest = {"--op",          "gemm",   "--shape",
                                        "M=8,N=64,K=64", "--chip", "cpu"};

TEST_F(CommandsTest, BestPrintsTheBestKnownKernelOfTheChipPrefix) {
  fake_.records = {Record("sim-systolic-128x128", 1.0, "job-7"),
                   Record("cpu-x86_64-avx2", 12.5, "job-1"),
                   Record("cpu-x86_64-avx512", 20.0, "job-2")};
  EXPECT_EQ(Run(With({"best"}, kBest)), 0) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("best known kernel of gemm m=8 n=64 k=64 fp32 on chip 'cpu'"));
  EXPECT_THAT(out_.str(), HasSubstr("chip type  cpu-x86_64-avx2 (Test CPU)"));
  EXPECT_THAT(out_.str(), HasSubstr("median     12.50 µs"));
  EXPECT_THAT(out_.str(), HasSubstr("GFLOP/s    5.2"));
  EXPECT_THAT(out_.str(), HasSubstr("job        job-1"));
  EXPECT_THAT(out_.str(), HasSubstr("config     NB=64"));
  EXPECT_THAT(out_.str(), HasSubstr("cpu-x86_64-avx512"));
  EXPECT_THAT(out_.str(), Not(HasSubstr("sim-systolic")));  // another prefix
  EXPECT_EQ(Run(With({"best", "--json"}, kBest)), 0);
  google::protobuf::Struct parsed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(out_.str(), &parsed).ok()) << out_.str();
  const auto& best = parsed.fields().at("best").struct_value().fields();
  EXPECT_EQ(best.at("job_id").string_value(), "job-1");
  EXPECT_EQ(best.at("median_us").number_value(), 12.5);
  EXPECT_EQ(best.at("config").struct_value().fields().at("NB").number_value(), 64);
  EXPECT_EQ(parsed.fields().at("by_chip_type").list_value().values_size(), 2);
  // None known on the prefix: a clear message and exit 1 (JSON with "best": null).
  std::vector<std::string> opencl = With({"best"}, kBest);
  opencl.back() = "opencl";
  EXPECT_EQ(Run(opencl), 1);
  EXPECT_EQ(out_.str(), "");
  EXPECT_THAT(err_.str(), HasSubstr("no kernel of gemm m=8 n=64 k=64 fp32 is known on a chip "
                                    "type starting with 'opencl'"));
  EXPECT_EQ(Run(With(opencl, {"--json"})), 1);
  EXPECT_THAT(out_.str(), HasSubstr("\"best\":null"));
}

TEST_F(CommandsTest, ExportBestExportsTheBestKnownKernelWithoutAJobId) {
  fake_.records = {Record("cpu-x86_64-avx2", 12.5, "job-1")};
  const std::string dir = ::testing::TempDir() + "/kiln-export-best-" + std::to_string(port_);
  std::filesystem::remove_all(dir);
  EXPECT_EQ(Run(With({"export", "--best", "--out", dir}, kBest)), 0) << err_.str();
  EXPECT_THAT(err_.str(), HasSubstr("best known kernel of gemm m=8 n=64 k=64 fp32: 12.50 µs on "
                                    "cpu-x86_64-avx2, from job job-1"));
  EXPECT_THAT(out_.str(), HasSubstr("exported 1 kernel of job job-1"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/gemm_m8_n64_k64_fp32.cc"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/manifest.json"));
  std::filesystem::remove_all(dir);
  fake_.records.clear();
  EXPECT_EQ(Run(With({"export", "--best", "--out", dir}, kBest)), 1);
  EXPECT_THAT(err_.str(), HasSubstr("no kernel of gemm m=8 n=64 k=64 fp32 is known"));
  EXPECT_FALSE(std::filesystem::exists(dir));
}

// kiln knobs runs offline, from the templates: knobs, domains, the rules in words.
TEST(KnobsTest, ListsTheKnobsDomainsAndRules) {
  auto run = [](std::vector<std::string> args, std::string* out, std::string* err) {
    Invocation inv;
    absl::Status parsed = ParseCommandLine(args, nullptr, &inv);
    EXPECT_TRUE(parsed.ok()) << parsed;
    std::ostringstream o, e;
    Io io{o, e, false, [] { return int64_t{0}; }};
    int rc = RunKnobs(inv, io);
    *out = o.str();
    *err = e.str();
    return rc;
  };
  std::string out, err;
  ASSERT_EQ(
      run({"knobs", "--op", "gemm", "--shape", "M=8,N=4096,K=4096", "--chip", "cpu-x86_64-avx2"},
          &out, &err),
      0)
      << err;
  EXPECT_THAT(out, HasSubstr("gemm m=8 n=4096 k=4096 fp32 on cpu-x86_64-avx2: template"));
  EXPECT_THAT(out, HasSubstr("assuming a AVX2 (8 fp32 lanes, 16 vector registers)"));
  EXPECT_THAT(out, HasSubstr("MR          1, 2, 3, 4, 5, 6, 8, 12, 14"));
  EXPECT_THAT(out, HasSubstr("register-tile rows of C"));
  EXPECT_THAT(out, HasSubstr("NR % 8 == 0 (NR is whole 8-lane SIMD vectors)"));
  EXPECT_THAT(out, HasSubstr("--exclude KNOB=V1,V2"));
  ASSERT_EQ(run({"knobs", "--op", "gemm", "--shape", "M=8,N=64,K=64", "--chip", "cpu", "--json"},
                &out, &err),
            0);
  google::protobuf::Struct parsed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(out, &parsed).ok()) << out;
  const auto& knobs = parsed.fields().at("knobs").list_value();
  ASSERT_GT(knobs.values_size(), 0);
  EXPECT_EQ(knobs.values(0).struct_value().fields().at("name").string_value(), "MR");
  EXPECT_GT(parsed.fields().at("constraints").list_value().values_size(), 0);
  EXPECT_GT(parsed.fields().at("valid").number_value(), 0);  // a small space is counted
  // With constraints: the domains they leave (checked as submit checks them).
  ASSERT_EQ(
      run({"knobs", "--op", "gemm", "--shape", "M=8,N=4096,K=4096", "--chip", "cpu-x86_64-avx2",
           "--pin", "MR=4", "--range", "NR=16..32", "--exclude", "UNROLL=1"},
          &out, &err),
      0)
      << err;
  EXPECT_THAT(out, HasSubstr("\nMR          4  "));
  EXPECT_THAT(out, HasSubstr("\nNR          16, 32  "));
  EXPECT_THAT(out, HasSubstr("\nUNROLL      2, 4, 8  "));
  EXPECT_THAT(out, HasSubstr("those --pin, --exclude and --range leave"));
  EXPECT_EQ(run({"knobs", "--op", "gemm", "--shape", "M=8,N=64,K=64", "--chip", "tpu"}, &out, &err),
            2);
  EXPECT_THAT(err, HasSubstr("no kernel templates for chip kind 'tpu'"));
}

TEST_F(CommandsTest, UnreachableCoordinatorGetsAHelpfulMessage) {
  server_->Shutdown(std::chrono::system_clock::now());
  server_.reset();
  EXPECT_EQ(Run({"jobs"}), 1);
  EXPECT_EQ(err_.str(), "kiln: cannot reach the coordinator at " + address_ +
                            " (is kiln-coordinator running? set --coordinator or "
                            "KILN_COORDINATOR)\n");
}

}  // namespace
}  // namespace kiln::cli
