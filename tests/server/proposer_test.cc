// Proposing off the mutex (Coordinator::LeaseTrials): the lease that finds a task's proposals run
// out makes them with only the strategy's lock held, so a slow strategy holds up neither leasing
// nor reporting for another job, its job still runs exactly its budget, and a job cancelled, shed
// or evicted, or a coordinator shut down, while its strategy proposes is safe. A job's strategies
// are built the same way, by the lease that binds it.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "agent/strategy.h"
#include "common/status.h"
#include "gtest/gtest.h"
#include "server/coordinator.h"
#include "tests/server/test_util.h"

namespace kiln::server {
namespace {

using Millis = std::chrono::duration<double, std::milli>;
using testing::CpuRegistration;
using testing::GemmSpec;
using testing::LeaseRequest;
using testing::Ok;
using testing::ReportRequest;

// Holds the first Propose of the strategies it is given to until the test opens it, so that a
// test knows a Propose is running (entered) for as long as it needs, however loaded the machine:
// no sleep has to outlast the test's own calls. A gate never opened lets go after 10 s.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool entered = false;
  bool open = false;
  int proposes = 0;

  bool Entered() {
    std::lock_guard<std::mutex> lock(mu);
    return entered;
  }
  bool WaitEntered() {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(10), [&] { return entered; });
  }
  bool StillHeld() {
    std::lock_guard<std::mutex> lock(mu);
    return entered && !open;
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu);
    open = true;
    cv.notify_all();
  }
};

// `inner`'s proposals, slowly: the first Propose waits at the gate, later ones sleep `later_ms`
// (a policy's model update and screening), and with `dry` nothing is proposed at all (a space
// with nothing new left).
class SlowStrategy final : public agent::Strategy {
 public:
  SlowStrategy(std::unique_ptr<agent::Strategy> inner, std::shared_ptr<Gate> gate, int later_ms,
               bool dry)
      : inner_(std::move(inner)), gate_(std::move(gate)), later_ms_(later_ms), dry_(dry) {}
  std::string name() const override { return "slow-" + inner_->name(); }
  std::vector<codegen::Config> Propose(int n) override {
    bool first;
    {
      std::unique_lock<std::mutex> lock(gate_->mu);
      first = gate_->proposes++ == 0;
      if (first) {
        gate_->entered = true;
        gate_->cv.notify_all();
        gate_->cv.wait_for(lock, std::chrono::seconds(10), [&] { return gate_->open; });
      }
    }
    if (!first) std::this_thread::sleep_for(std::chrono::milliseconds(later_ms_));
    if (dry_) return {};
    return inner_->Propose(n);
  }
  void Observe(const std::vector<agent::Observation>& results) override {
    inner_->Observe(results);
  }
  void Exclude(const codegen::Config& config) override { inner_->Exclude(config); }

 private:
  std::unique_ptr<agent::Strategy> inner_;
  std::shared_ptr<Gate> gate_;
  int later_ms_;
  bool dry_;
};

constexpr int kSlowM = 8;         // the slow job's GEMM has M = 8, the fast one's M = 16
constexpr int kUnbindableM = 24;  // a job whose strategy cannot be built for the chip

class ProposerTest : public ::testing::Test {
 protected:
  // With `slow_build`, the slow job's strategy is held at bind_gate_ while it is built (a policy
  // network on a large space), rather than in its first Propose.
  void Start(bool dry = false, bool slow_build = false) {
    store_ = *OpenStore("", testing::TempDir());
    CoreOptions o{5000, 1000, 5000, 1};
    o.final_rounds = 0;  // only TUNE trials against the budget, plus each task's baseline
    o.finished_jobs_in_memory = 0;
    std::shared_ptr<Gate> gate = gate_;
    std::shared_ptr<Gate> bind_gate = bind_gate_;
    o.new_strategy =
        [gate, bind_gate, dry, slow_build](
            const std::string& name,
            agent::StrategyContext ctx) -> absl::StatusOr<std::unique_ptr<agent::Strategy>> {
      const int64_t m = ctx.workload.dims().at("M");
      if (m == kUnbindableM)
        return absl::InvalidArgumentError("no valid configuration is left (test)");
      const bool slow = m == kSlowM;
      if (slow && slow_build) {
        std::unique_lock<std::mutex> lock(bind_gate->mu);
        bind_gate->entered = true;
        ++bind_gate->proposes;  // here: strategies built
        bind_gate->cv.notify_all();
        bind_gate->cv.wait_for(lock, std::chrono::seconds(10), [&] { return bind_gate->open; });
      }
      ASSIGN_OR_RETURN(std::unique_ptr<agent::Strategy> inner,
                       agent::NewStrategy(name, std::move(ctx)));
      if (!slow || slow_build) return inner;
      return std::make_unique<SlowStrategy>(std::move(inner), gate, 30, dry);
    };
    core_ = std::make_unique<Coordinator>(store_.get(), &clock_, nullptr, o);
    ASSERT_TRUE(core_->Recover().ok());
    worker_ = core_->Register(CpuRegistration(), "")->worker_id();
  }

  std::string Submit(int m, int budget, int priority) {
    v1::JobSpec spec = GemmSpec(m, budget);
    spec.set_strategy("random");
    spec.set_priority(priority);
    auto id = core_->SubmitJob(spec);
    EXPECT_TRUE(id.ok()) << id.status();
    return *id;
  }

  // One trial leased, long-polling (a worker's way: it waits for proposals being made, and for
  // nothing else), with how long the call took.
  std::vector<v1::Trial> LeaseTimed(double* ms) {
    v1::LeaseTrialsRequest r = LeaseRequest(worker_, 1);
    r.set_wait_ms(3000);
    const auto start = std::chrono::steady_clock::now();
    auto resp = core_->LeaseTrials(r, "");
    *ms = Millis(std::chrono::steady_clock::now() - start).count();
    EXPECT_TRUE(resp.ok()) << resp.status();
    if (!resp.ok()) return {};
    return {resp->trials().begin(), resp->trials().end()};
  }

  double ReportTimed(const v1::Trial& t, double us) {
    const auto start = std::chrono::steady_clock::now();
    auto resp = core_->ReportResults(ReportRequest(worker_, t, Ok(us)), "");
    EXPECT_TRUE(resp.ok()) << resp.status();
    EXPECT_EQ(resp->accepted(), 1);
    return Millis(std::chrono::steady_clock::now() - start).count();
  }

  // Leases and answers trials (baselines, starting configurations, the fast job's) until a
  // lease is held at `gate`: the slow job's strategy asked for proposals (gate_) or being built
  // (bind_gate_). Each lease runs on a thread of its own: the held one stays there (holder_)
  // until the gate opens, as a worker's lease would.
  void RunUntilHeldAt(const std::shared_ptr<Gate>& gate, const char* never) {
    for (int i = 0; i < 100; ++i) {
      auto done = std::make_shared<std::atomic<bool>>(false);
      auto result = std::make_shared<absl::StatusOr<v1::LeaseTrialsResponse>>();
      std::thread lease([this, done, result] {
        *result = core_->LeaseTrials(LeaseRequest(worker_, 1), "");
        done->store(true);
      });
      while (!done->load() && !gate->Entered())
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      if (!done->load()) {
        holder_ = std::move(lease);
        held_ = result;
        return;
      }
      lease.join();
      ASSERT_TRUE(result->ok()) << result->status();
      for (const v1::Trial& t : (*result)->trials()) ReportTimed(t, 100 + i);
    }
    FAIL() << never;
  }
  void RunUntilProposing() {
    RunUntilHeldAt(gate_, "the slow strategy was never asked to propose");
  }
  void RunUntilBinding() { RunUntilHeldAt(bind_gate_, "the slow job's strategy was never built"); }

  // Once the gate is open: the held lease returns (with the trials it then took, answered here).
  void JoinHolder(bool report = true) {
    ASSERT_TRUE(holder_.joinable());
    holder_.join();
    ASSERT_TRUE(held_->ok()) << held_->status();
    if (report)
      for (const v1::Trial& t : (*held_)->trials()) ReportTimed(t, 70);
  }

  // 20 leases, each answered at once, while the slow job is held (`while_slow`: what it does):
  // each gets a trial, and the median lease and report are quick (one that waited for the slow
  // job would take the gate's 10 s; a loaded 2-core machine may delay a call or two, so the
  // slowest is only told apart from one that waited). Returns how many were the fast job's.
  int TwentyQuickRoundTrips(const std::string& fast, const std::string& while_slow) {
    std::vector<double> lease_ms, report_ms;
    int fast_trials = 0;
    for (int i = 0; i < 20; ++i) {
      double ms;
      auto t = LeaseTimed(&ms);
      EXPECT_EQ(t.size(), 1u) << "no trial for the fast job while the slow one " << while_slow;
      if (t.size() != 1) return fast_trials;
      lease_ms.push_back(ms);
      fast_trials += t[0].job_id() == fast;
      report_ms.push_back(ReportTimed(t[0], 500 + i));
    }
    std::sort(lease_ms.begin(), lease_ms.end());
    std::sort(report_ms.begin(), report_ms.end());
    EXPECT_LT(lease_ms[10], 100) << "median lease (ms)";
    EXPECT_LT(report_ms[10], 100) << "median report (ms)";
    EXPECT_LT(lease_ms.back(), 2000) << "slowest lease (ms)";
    EXPECT_LT(report_ms.back(), 2000) << "slowest report (ms)";
    return fast_trials;
  }

  void TearDown() override {
    gate_->Open();
    bind_gate_->Open();
    if (holder_.joinable()) holder_.join();
  }

  // Leases and answers trials until no job hands any out.
  void Drain() {
    double us = 50;
    for (int guard = 0; guard < 1000; ++guard) {
      auto leased = core_->LeaseTrials(LeaseRequest(worker_, 1), "");
      ASSERT_TRUE(leased.ok()) << leased.status();
      if (leased->trials().empty()) return;
      ReportTimed(leased->trials(0), us += 1);
    }
    FAIL() << "the jobs never ran out of trials";
  }

  // A finished job's TUNE trials: exactly `budget`, each configuration once.
  void ExpectExactBudget(const std::string& id, int budget) {
    auto results = core_->GetResults(id);
    ASSERT_TRUE(results.ok()) << results.status();
    EXPECT_EQ(results->job().state(), v1::SUCCEEDED) << results->job().message();
    std::set<std::string> configs;
    int tune = 0;
    for (const v1::Trial& t : results->trials()) {
      if (t.kind() != v1::TUNE) continue;
      ++tune;
      EXPECT_TRUE(configs.insert(codegen::ConfigKey(codegen::FromProto(t.config()))).second)
          << "proposed twice: " << t.config().ShortDebugString();
    }
    EXPECT_EQ(tune, budget) << id;
    EXPECT_EQ(results->job().trials_done(), budget) << id;
  }

  FakeClock clock_;
  std::shared_ptr<Gate> gate_ = std::make_shared<Gate>();
  std::shared_ptr<Gate> bind_gate_ = std::make_shared<Gate>();
  std::unique_ptr<Store> store_;
  std::unique_ptr<Coordinator> core_;
  std::string worker_;
  std::thread holder_;  // the lease held at the gate, proposing
  std::shared_ptr<absl::StatusOr<v1::LeaseTrialsResponse>> held_;
};

// While the slow job's strategy proposes (held at the gate), the worker keeps leasing and
// reporting the fast job's trials without waiting for it; once it is done, the slow job runs
// exactly its budget, each configuration once, and so does the fast one.
TEST_F(ProposerTest, ASlowStrategyHoldsUpNoOtherJob) {
  Start();
  // The slow job first in every lease (priority): each lease asks it for a trial first.
  const std::string slow = Submit(kSlowM, 12, 1);
  const std::string fast = Submit(16, 40, 0);
  RunUntilProposing();
  // The slow Propose is running, and stays so until the gate opens: every call below is made
  // while it runs.
  const int fast_trials = TwentyQuickRoundTrips(fast, "proposes");
  EXPECT_TRUE(gate_->StillHeld()) << "the slow Propose ended before the test's calls did";
  EXPECT_GE(fast_trials, 18);  // at most the slow job's re-measurement came between
  EXPECT_EQ(core_->GetJob(slow)->state(), v1::RUNNING);
  gate_->Open();
  JoinHolder();
  Drain();
  ExpectExactBudget(slow, 12);
  ExpectExactBudget(fast, 40);
  EXPECT_GT(gate_->proposes, 1);  // and its later batches were made while others ran
}

// A job cancelled while its strategy proposes, then shed and evicted from memory: none of this
// waits for the strategy, the proposals that come back have no task to join and are dropped, and
// the other job goes on.
TEST_F(ProposerTest, AJobGoneWhileItsStrategyProposesIsSafe) {
  Start();
  const std::string slow = Submit(kSlowM, 12, 1);
  const std::string fast = Submit(16, 6, 0);
  RunUntilProposing();
  const int before = core_->GetJob(slow)->trials_done();
  ASSERT_EQ(*core_->CancelJob(slow), v1::CANCELLED);
  core_->Tick();  // its trials and strategy shed, and it leaves memory (none kept)
  EXPECT_EQ(core_->JobsInMemory(), 1u);
  EXPECT_TRUE(gate_->StillHeld());
  gate_->Open();
  JoinHolder();
  for (const v1::Trial& t : (*held_)->trials()) EXPECT_EQ(t.job_id(), fast);
  auto job = core_->GetJob(slow);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), v1::CANCELLED);
  EXPECT_EQ(job->trials_done(), before);
  Drain();
  ExpectExactBudget(fast, 6);
  EXPECT_EQ(core_->GetJob(slow)->trials_done(), before);
}

// A strategy with nothing to propose still ends its task when it proposed off the mutex: the job
// finishes after its baseline and starting configurations, short of its budget.
TEST_F(ProposerTest, NothingProposedEndsTheTask) {
  Start(/*dry=*/true);
  const std::string slow = Submit(kSlowM, 50, 0);
  RunUntilProposing();
  EXPECT_EQ(core_->GetJob(slow)->state(), v1::RUNNING);
  gate_->Open();
  JoinHolder();
  Drain();
  auto job = *core_->GetJob(slow);
  EXPECT_EQ(job.state(), v1::SUCCEEDED) << job.message();
  EXPECT_GT(job.trials_done(), 0);
  EXPECT_LT(job.trials_done(), 50);
}

// A coordinator shut down while a lease proposes: the lease still lands its proposals under the
// mutex and returns without long-polling, and the coordinator is then destroyed safely.
TEST_F(ProposerTest, ShutdownWhileALeaseProposes) {
  Start();
  Submit(kSlowM, 12, 0);
  RunUntilProposing();
  core_->Shutdown();
  gate_->Open();
  JoinHolder(/*report=*/false);
  core_.reset();
  EXPECT_EQ(gate_->proposes, 1);
}

// A job whose strategy is slow to build (held at the gate) is bound by the lease that found it,
// with the mutex released: meanwhile the other job's leases and reports go on without waiting,
// no other lease binds it again, and once built it runs exactly its budget.
TEST_F(ProposerTest, ASlowBindHoldsUpNoOtherJob) {
  Start(/*dry=*/false, /*slow_build=*/true);
  const std::string fast = Submit(16, 40, 0);
  double ms;
  auto first = LeaseTimed(&ms);  // the fast job bound and running
  ASSERT_EQ(first.size(), 1u);
  ReportTimed(first[0], 400);
  const std::string slow = Submit(kSlowM, 12, 1);  // first in every lease from now on
  RunUntilBinding();
  const int fast_trials = TwentyQuickRoundTrips(fast, "is bound");
  EXPECT_TRUE(bind_gate_->StillHeld()) << "the slow bind ended before the test's calls did";
  EXPECT_EQ(fast_trials, 20);
  const v1::Job queued = *core_->GetJob(slow);
  EXPECT_EQ(queued.state(), v1::QUEUED);
  EXPECT_TRUE(queued.chip_type().empty());
  bind_gate_->Open();
  JoinHolder();
  EXPECT_EQ(core_->GetJob(slow)->state(), v1::RUNNING);
  Drain();
  ExpectExactBudget(slow, 12);
  ExpectExactBudget(fast, 40);
  EXPECT_EQ(bind_gate_->proposes, 1);  // built once: no other lease bound it again
}

// A job cancelled while its strategy is built is not bound when the build comes back; the other
// job goes on.
TEST_F(ProposerTest, AJobCancelledWhileItIsBoundStaysCancelled) {
  Start(/*dry=*/false, /*slow_build=*/true);
  const std::string slow = Submit(kSlowM, 12, 1);
  const std::string fast = Submit(16, 6, 0);
  RunUntilBinding();
  ASSERT_EQ(*core_->CancelJob(slow), v1::CANCELLED);
  bind_gate_->Open();
  JoinHolder();
  for (const v1::Trial& t : (*held_)->trials()) EXPECT_EQ(t.job_id(), fast);
  const v1::Job job = *core_->GetJob(slow);
  EXPECT_EQ(job.state(), v1::CANCELLED);
  EXPECT_TRUE(job.chip_type().empty());
  EXPECT_EQ(job.trials_done(), 0);
  Drain();
  ExpectExactBudget(fast, 6);
}

// A strategy that cannot be built for the worker's chip fails its job with the reason, as it did
// when jobs were bound under the mutex.
TEST_F(ProposerTest, AStrategyThatCannotBeBuiltFailsItsJob) {
  Start();
  const std::string bad = Submit(kUnbindableM, 12, 0);
  auto leased = core_->LeaseTrials(LeaseRequest(worker_, 1), "");
  ASSERT_TRUE(leased.ok()) << leased.status();
  EXPECT_TRUE(leased->trials().empty());
  const v1::Job job = *core_->GetJob(bad);
  EXPECT_EQ(job.state(), v1::FAILED);
  EXPECT_EQ(job.message(),
            "cannot tune on " + job.chip_type() + ": no valid configuration is left (test)");
  EXPECT_FALSE(job.chip_type().empty());
}

}  // namespace
}  // namespace kiln::server
