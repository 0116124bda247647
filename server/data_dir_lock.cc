#include "server/data_dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "server/store/store.h"

namespace kiln::server {
namespace {

// mkdir -p of `dir`.
void MakeDirs(const std::string& dir) {
  for (size_t i = dir.find('/', 1); i != std::string::npos; i = dir.find('/', i + 1))
    mkdir(dir.substr(0, i).c_str(), 0755);
  mkdir(dir.c_str(), 0755);
}

std::string Holder(int fd) {
  char buf[256] = {};
  ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
  std::string s(buf, n > 0 ? n : 0);
  s = s.substr(0, s.find('\n'));
  return s.empty() ? "a process that has not written its pid yet" : s;
}

}  // namespace

DataDirLock::~DataDirLock() { close(fd_); }

std::string DataDirLock::PathFor(const std::string& store_spec, const std::string& data_dir) {
  if (IsPostgresSpec(store_spec)) return "";
  std::string db = std::string(absl::StripPrefix(store_spec, "sqlite:"));
  if (db.empty()) return data_dir + "/coordinator.lock";
  size_t slash = db.rfind('/');
  return slash == std::string::npos ? "coordinator.lock"
                                    : db.substr(0, slash + 1) + "coordinator.lock";
}

absl::StatusOr<std::unique_ptr<DataDirLock>> DataDirLock::Acquire(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash != std::string::npos && slash > 0) MakeDirs(path.substr(0, slash));
  // No O_TRUNC: the holder's pid stays readable until the lock is ours.
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    return absl::UnavailableError(
        absl::StrCat("cannot open the lock file ", path, ": ", strerror(errno)));
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    std::string holder = Holder(fd);
    close(fd);
    if (err == EWOULDBLOCK)
      return absl::FailedPreconditionError(
          absl::StrCat("the data dir is in use by another kiln-coordinator (", holder, "; lock ",
                       path, "): stop that one, or give this one another --data-dir / --store"));
    return absl::UnavailableError(absl::StrCat("cannot lock ", path, ": ", strerror(err)));
  }
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  const std::string who = absl::StrCat("pid ", getpid(), " host ", host, "\n");
  // Best effort: on a full disk the lock still holds without the note.
  if (ftruncate(fd, 0) == 0 && pwrite(fd, who.data(), who.size(), 0) < 0) {
  }
  return std::unique_ptr<DataDirLock>(new DataDirLock(fd));
}

}  // namespace kiln::server
