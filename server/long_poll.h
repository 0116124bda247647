// Long-polls that hold no thread while they wait.
//
// A LeaseTrials or WatchJob call that finds nothing to answer waits for new work or events, up to
// a deadline. With gRPC's synchronous API each such wait held a server thread, so a fleet of idle
// workers cost a thread each and every report woke all of them. Here a waiting call is a parked
// continuation in a WaitList (the coordinator signals the list under its own mutex, as it did a
// condition variable) and runs again on a PollExecutor thread when signalled or at its deadline;
// the gRPC callback API (server/services.cc) answers the call from there.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <queue>
#include <thread>
#include <vector>

namespace kiln::server {

// Calls `start(done)` and waits for the one answer it gives `done`, on whatever thread: the
// blocking form of an asynchronous call (Coordinator::LeaseTrials, WaitEvents).
template <typename T, typename Start>
T AwaitAnswer(Start&& start) {
  auto answered = std::make_shared<std::promise<T>>();
  std::future<T> answer = answered->get_future();
  start([answered](T r) { answered->set_value(std::move(r)); });
  return answer.get();
}

// A few threads that run continuations (which may block briefly: a store commit awaited, a
// strategy's proposals) and a timer for deadlines. Destroying it runs every timer still pending
// (as expired) and every queued task first, so a parked call is always answered.
class PollExecutor {
 public:
  using Clock = std::chrono::steady_clock;
  explicit PollExecutor(int threads);
  ~PollExecutor();
  PollExecutor(const PollExecutor&) = delete;
  PollExecutor& operator=(const PollExecutor&) = delete;

  void Post(std::function<void()> fn);
  // Runs `fn` on a pool thread once `when` has come.
  void At(Clock::time_point when, std::function<void()> fn);

 private:
  struct Timer {
    Clock::time_point when;
    uint64_t seq;  // ties run in the order they were set
    std::function<void()> fn;
    bool operator>(const Timer& o) const { return when != o.when ? when > o.when : seq > o.seq; }
  };
  void Work();
  void Time();

  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable timer_cv_;
  std::deque<std::function<void()>> tasks_;
  std::priority_queue<Timer, std::vector<Timer>, std::greater<Timer>> timers_;
  uint64_t next_timer_ = 0;
  bool stop_ = false;     // the timer thread leaves, handing its timers to the workers
  bool drained_ = false;  // then the workers leave, once nothing is queued
  std::vector<std::thread> threads_;
  std::thread timer_thread_;
};

// Continuations waiting for a condition, each resumed once, on the executor: by a notification
// (in the order they parked) or at its deadline (timed_out). Park and Notify* are called under
// the owner's mutex, like a condition variable's wait and notify; the continuation runs without
// it.
class WaitList {
 public:
  using Resume = std::function<void(bool timed_out)>;
  explicit WaitList(PollExecutor* executor) : executor_(executor) {}

  // `weight`: how much of what the waiters wait for this one would take (a lease's batch size).
  void Park(PollExecutor::Clock::time_point deadline, Resume resume, int weight = 1);
  void NotifyOne() { NotifyUpTo(1); }
  // Wakes the `n` oldest still waiting (fewer if fewer are); how many it woke.
  int NotifyUpTo(int n);
  // Wakes the oldest waiters until their weights add up to `units` (or none is left): `units`
  // of new work are taken up at once, not by one waiter after another waking the next.
  void NotifyWeight(int units);
  void NotifyAll();
  size_t size() const { return waiters_.size(); }  // parked, some perhaps already timed out

 private:
  struct Waiter {
    std::atomic<bool> resumed{false};
    Resume resume;
    int weight = 1;
  };
  // Resumes `w` unless its deadline or another notification did first; true if this did.
  bool Wake(const std::shared_ptr<Waiter>& w);

  PollExecutor* executor_;
  std::deque<std::shared_ptr<Waiter>> waiters_;
};

}  // namespace kiln::server
