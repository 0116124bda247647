// Group commit: the coordinator's writes reach the store in the order they were made, several to
// a transaction, on a thread of its own.
//
// The coordinator changes memory under its mutex and queues the batch that makes the store agree
// (Enqueue, in the mutex's order); it answers the RPC only once that batch is committed (Wait,
// without the mutex). So no worker or client is told of anything the store does not hold, the
// mutex is not held through the store's write, and a burst of reports from many workers costs one
// transaction rather than one each.
//
// A failed transaction fails its batches and every batch queued after them (they were made on top
// of the failed ones), and refuses new batches until the coordinator takes them back (TakeFailed)
// and makes memory the store's again for what they touched.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/store/store.h"

namespace kiln::server {

class GroupCommit {
 public:
  // At most this many batches go into one transaction.
  static constexpr size_t kMaxGroup = 256;

  explicit GroupCommit(Store* store);
  ~GroupCommit();  // writes what is queued, then stops
  GroupCommit(const GroupCommit&) = delete;
  GroupCommit& operator=(const GroupCommit&) = delete;

  // Queues `batch` after every batch queued before it; its ticket for Wait. While an earlier
  // failure has not been taken back, the batch joins the failed ones and the failure is returned.
  absl::StatusOr<uint64_t> Enqueue(WriteBatch batch);
  // Until the ticket's batch is committed (OK) or failed (the store's error). Ticket 0: OK.
  absl::Status Wait(uint64_t ticket);
  // Calls `fn` once every one of `tickets` is committed (OK) or one failed (the store's error):
  // at once on this thread if they are, else on the writer's thread after their transaction. A
  // caller that must answer once stored holds no thread meanwhile. `fn` must not block (nor take
  // a lock held by anyone who waits for the writer).
  void WhenDone(const std::vector<uint64_t>& tickets, std::function<void(absl::Status)> fn);
  // Until every batch queued so far is committed or failed (a read of the store that must see
  // all of them). Without the coordinator's mutex held by the writer, safe under it.
  void WaitForAll();
  // The failed batches not yet taken back (empty when there are none), and the failure cleared.
  std::vector<WriteBatch> TakeFailed();
  bool HasFailed() const { return has_failed_.load(); }

  // Transactions written so far (a metric: transactions per trial).
  uint64_t transactions();

 private:
  void Run();
  // The callbacks whose tickets are all done, run with the mutex released.
  void RunCallbacksLocked(std::unique_lock<std::mutex>& lock);
  bool FailedTicket(uint64_t ticket, absl::Status* status) const;
  absl::Status StatusOf(const std::vector<uint64_t>& tickets) const;  // all done

  Store* store_;
  std::mutex mu_;
  std::condition_variable queued_cv_;  // a batch queued, or stop
  std::condition_variable done_cv_;    // a group written
  std::deque<WriteBatch> queue_;
  uint64_t next_ticket_ = 1;   // the ticket of the next batch queued
  uint64_t done_through_ = 0;  // every ticket up to this one is committed or failed
  struct FailedRange {
    uint64_t first, last;
    absl::Status status;
  };
  std::deque<FailedRange> failed_ranges_;  // the latest failures, for Wait
  std::vector<WriteBatch> failed_;         // not yet taken back
  absl::Status failure_;                   // non-OK while failed_ waits to be taken back
  std::atomic<bool> has_failed_{false};    // !failure_.ok(), read without the mutex
  struct Callback {
    std::vector<uint64_t> tickets;
    std::function<void(absl::Status)> fn;
  };
  std::multimap<uint64_t, Callback> callbacks_;  // by their last ticket
  uint64_t transactions_ = 0;
  bool stop_ = false;
  std::thread writer_;
};

}  // namespace kiln::server
