#include "server/long_poll.h"

#include <algorithm>
#include <utility>

namespace kiln::server {

PollExecutor::PollExecutor(int threads) {
  for (int i = 0; i < std::max(1, threads); ++i) threads_.emplace_back([this] { Work(); });
  timer_thread_ = std::thread([this] { Time(); });
}

PollExecutor::~PollExecutor() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  timer_cv_.notify_all();
  timer_thread_.join();  // it hands every pending timer to the workers as it leaves
  {
    std::lock_guard<std::mutex> lock(mu_);
    drained_ = true;  // only now may the workers leave, once the queue is empty
  }
  work_cv_.notify_all();
  for (std::thread& t : threads_) t.join();  // they leave once the queue is empty
}

void PollExecutor::Post(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(fn));
  }
  work_cv_.notify_one();
}

void PollExecutor::At(Clock::time_point when, std::function<void()> fn) {
  bool earliest;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) {  // no timer thread to wait for it: due now
      tasks_.push_back(std::move(fn));
      work_cv_.notify_one();
      return;
    }
    earliest = timers_.empty() || when < timers_.top().when;
    timers_.push(Timer{when, next_timer_++, std::move(fn)});
  }
  if (earliest) timer_cv_.notify_one();
}

void PollExecutor::Work() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    work_cv_.wait(lock, [this] { return !tasks_.empty() || drained_; });
    if (tasks_.empty()) return;  // stopping, and nothing left to run
    std::function<void()> fn = std::move(tasks_.front());
    tasks_.pop_front();
    lock.unlock();
    fn();
    fn = nullptr;  // what it holds is released without the mutex
    lock.lock();
  }
}

void PollExecutor::Time() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    if (timers_.empty()) {
      timer_cv_.wait(lock);
      continue;
    }
    const Clock::time_point when = timers_.top().when;
    if (Clock::now() < when) {
      timer_cv_.wait_until(lock, when);
      continue;
    }
    // priority_queue::top is const: the function is moved out through a copy of the node.
    Timer due = timers_.top();
    timers_.pop();
    tasks_.push_back(std::move(due.fn));
    work_cv_.notify_one();
  }
  while (!timers_.empty()) {  // stopping: every deadline is now
    Timer due = timers_.top();
    timers_.pop();
    tasks_.push_back(std::move(due.fn));
  }
}

bool WaitList::Wake(const std::shared_ptr<Waiter>& w) {
  if (w->resumed.exchange(true)) return false;
  executor_->Post([w] {
    Resume resume = std::move(w->resume);  // what it holds is released once it has run
    resume(false);
  });
  return true;
}

void WaitList::Park(PollExecutor::Clock::time_point deadline, Resume resume, int weight) {
  // Waiters whose deadline came first are dropped from the front as new ones arrive.
  while (!waiters_.empty() && waiters_.front()->resumed.load()) waiters_.pop_front();
  auto w = std::make_shared<Waiter>();
  w->resume = std::move(resume);
  w->weight = std::max(1, weight);
  waiters_.push_back(w);
  executor_->At(deadline, [w] {
    if (w->resumed.exchange(true)) return;
    Resume resume = std::move(w->resume);
    resume(true);
  });
}

int WaitList::NotifyUpTo(int n) {
  int woken = 0;
  while (woken < n && !waiters_.empty()) {
    std::shared_ptr<Waiter> w = std::move(waiters_.front());
    waiters_.pop_front();
    woken += Wake(w);
  }
  return woken;
}

void WaitList::NotifyWeight(int units) {
  while (units > 0 && !waiters_.empty()) {
    std::shared_ptr<Waiter> w = std::move(waiters_.front());
    waiters_.pop_front();
    if (Wake(w)) units -= w->weight;
  }
}

void WaitList::NotifyAll() {
  std::deque<std::shared_ptr<Waiter>> all;
  all.swap(waiters_);
  for (const auto& w : all) Wake(w);
}

}  // namespace kiln::server
