// One coordinator per data dir: an exclusive flock on DIR/coordinator.lock held while it runs.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace kiln::server {

class DataDirLock {
 public:
  ~DataDirLock();  // releases the lock (the kernel also does when the process dies)
  DataDirLock(const DataDirLock&) = delete;
  DataDirLock& operator=(const DataDirLock&) = delete;

  // Takes the lock on `path` (creating its directory), or fails at once with FAILED_PRECONDITION
  // naming the holder's pid and host. The file then holds "pid PID host HOST".
  static absl::StatusOr<std::unique_ptr<DataDirLock>> Acquire(const std::string& path);
  // The lock file guarding the store `store_spec` under `data_dir`: DATA_DIR/coordinator.lock,
  // or coordinator.lock beside an SQLite file named by sqlite:PATH; "" for PostgreSQL (its own
  // advisory lock keeps one coordinator per database).
  static std::string PathFor(const std::string& store_spec, const std::string& data_dir);

 private:
  explicit DataDirLock(int fd) : fd_(fd) {}
  int fd_;
};

}  // namespace kiln::server
