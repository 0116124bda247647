#include "common/daemon.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace kiln {

void DisableMutexDeadlockDetection() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

absl::StatusOr<HostPort> ParseHostPort(const std::string& text, const std::string& flag) {
  auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0)
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": expected HOST:PORT (e.g. 127.0.0.1:50051), got '", text, "'"));
  HostPort hp;
  hp.host = text.substr(0, colon);
  if (hp.host.size() > 2 && hp.host.front() == '[' && hp.host.back() == ']')
    hp.host = hp.host.substr(1, hp.host.size() - 2);
  if (!absl::SimpleAtoi(text.substr(colon + 1), &hp.port) || hp.port < 0 || hp.port > 65535)
    return absl::InvalidArgumentError(absl::StrCat(
        flag, ": port must be a number in 0..65535, got '", text.substr(colon + 1), "'"));
  return hp;
}

absl::Status WriteFileAtomically(const std::string& path, const std::string& content) {
  std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  {
    std::ofstream f(tmp, std::ios::trunc);
    if (!f) return absl::UnavailableError(absl::StrCat("cannot write ", tmp));
    f << content;
    f.flush();
    if (!f) return absl::UnavailableError(absl::StrCat("cannot write ", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::UnavailableError(absl::StrCat("cannot rename ", tmp, " to ", path));
  }
  return absl::OkStatus();
}

void InstallTerminationBlock() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

void RequestStop() { kill(getpid(), SIGTERM); }

int WaitForTerminationSignal() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  int sig = 0;
  sigwait(&set, &sig);
  return sig;
}

}  // namespace kiln
