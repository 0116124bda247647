#include "server/group_commit.h"

#include <algorithm>
#include <utility>

namespace kiln::server {
namespace {

// Failed ranges kept for Wait: a waiter reads its verdict as soon as it wakes, long before this
// many more transactions can have failed.
constexpr size_t kFailedRangesKept = 1024;

}  // namespace

GroupCommit::GroupCommit(Store* store) : store_(store), writer_([this] { Run(); }) {}

GroupCommit::~GroupCommit() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  queued_cv_.notify_all();
  writer_.join();
}

absl::StatusOr<uint64_t> GroupCommit::Enqueue(WriteBatch batch) {
  if (batch.empty()) return 0;
  std::lock_guard<std::mutex> lock(mu_);
  if (!failure_.ok()) {
    failed_.push_back(std::move(batch));
    return failure_;
  }
  queue_.push_back(std::move(batch));
  queued_cv_.notify_one();
  return next_ticket_++;
}

bool GroupCommit::FailedTicket(uint64_t ticket, absl::Status* status) const {
  for (const FailedRange& r : failed_ranges_)
    if (ticket >= r.first && ticket <= r.last) {
      *status = r.status;
      return true;
    }
  return false;
}

absl::Status GroupCommit::Wait(uint64_t ticket) {
  if (ticket == 0) return absl::OkStatus();
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return done_through_ >= ticket; });
  absl::Status status;
  FailedTicket(ticket, &status);
  return status;
}

absl::Status GroupCommit::StatusOf(const std::vector<uint64_t>& tickets) const {
  absl::Status status;
  for (uint64_t t : tickets)
    if (t != 0 && FailedTicket(t, &status)) break;
  return status;
}

void GroupCommit::WhenDone(const std::vector<uint64_t>& tickets,
                           std::function<void(absl::Status)> fn) {
  const uint64_t last = tickets.empty() ? 0 : *std::max_element(tickets.begin(), tickets.end());
  absl::Status status;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (last > done_through_) {
      callbacks_.emplace(last, Callback{tickets, std::move(fn)});
      return;
    }
    status = StatusOf(tickets);
  }
  fn(std::move(status));
}

void GroupCommit::WaitForAll() {
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t last = next_ticket_ - 1;
  done_cv_.wait(lock, [&] { return done_through_ >= last; });
}

std::vector<WriteBatch> GroupCommit::TakeFailed() {
  std::lock_guard<std::mutex> lock(mu_);
  failure_ = absl::OkStatus();
  has_failed_ = false;
  return std::exchange(failed_, {});
}

uint64_t GroupCommit::transactions() {
  std::lock_guard<std::mutex> lock(mu_);
  return transactions_;
}

void GroupCommit::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    queued_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) break;  // stopping, and everything queued is written
    std::vector<WriteBatch> group;
    while (!queue_.empty() && group.size() < kMaxGroup) {
      group.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
    const uint64_t first = done_through_ + 1, last = done_through_ + group.size();
    lock.unlock();
    // The merged batch names every job, trial and worker of the group: after a failure it is
    // what the coordinator restores from the store.
    WriteBatch merged = MergeBatches(std::move(group));
    absl::Status written = store_->Write(merged);
    lock.lock();
    ++transactions_;
    if (written.ok()) {
      done_through_ = last;
    } else {
      // Everything queued since was made on top of the failed batches: it fails with them.
      const uint64_t through = last + queue_.size();
      failed_.push_back(std::move(merged));
      for (WriteBatch& b : queue_) failed_.push_back(std::move(b));
      queue_.clear();
      failure_ = written;
      has_failed_ = true;
      failed_ranges_.push_back({first, through, written});
      while (failed_ranges_.size() > kFailedRangesKept) failed_ranges_.pop_front();
      done_through_ = through;
    }
    done_cv_.notify_all();
    RunCallbacksLocked(lock);
  }
  RunCallbacksLocked(lock);  // none should be left: every ticket is done
}

void GroupCommit::RunCallbacksLocked(std::unique_lock<std::mutex>& lock) {
  std::vector<std::pair<absl::Status, std::function<void(absl::Status)>>> due;
  for (auto it = callbacks_.begin(); it != callbacks_.end() && it->first <= done_through_;) {
    due.emplace_back(StatusOf(it->second.tickets), std::move(it->second.fn));
    it = callbacks_.erase(it);
  }
  if (due.empty()) return;
  lock.unlock();
  for (auto& [status, fn] : due) fn(std::move(status));
  lock.lock();
}

}  // namespace kiln::server
