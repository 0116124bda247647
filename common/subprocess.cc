#include "common/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>

#include "absl/strings/str_cat.h"

extern char** environ;

namespace kiln {
namespace {

void CloseFd(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

}  // namespace

std::string SubprocessResult::Describe() const {
  if (!started) return "could not start: " + error;
  if (timed_out) return absl::StrCat("timed out after ", seconds, " s");
  if (term_signal != 0)
    return absl::StrCat("killed by signal ", term_signal, " (", strsignal(term_signal), ")");
  return absl::StrCat("exited with code ", exit_code);
}

std::string SelfExecutable() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  buf[n] = 0;
  return buf;
}

ChildProcess StartChild(const std::vector<std::string>& argv, const SubprocessOptions& opts) {
  ChildProcess c;
  int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1};
  if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC)) {
    c.error = strerror(errno);
    for (int fd : {in[0], in[1], out[0], out[1], err[0], err[1]})
      if (fd >= 0) close(fd);
    return c;
  }
  // Everything the child needs is prepared before fork: only async-signal-safe calls after it.
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> env_store;
  for (char** e = environ; *e; ++e) env_store.emplace_back(*e);
  for (const auto& e : opts.extra_env) env_store.push_back(e);
  std::vector<char*> envp;
  for (auto& e : env_store) envp.push_back(e.data());
  envp.push_back(nullptr);
  rlimit mem{static_cast<rlim_t>(opts.memory_limit_bytes),
             static_cast<rlim_t>(opts.memory_limit_bytes)};

  pid_t pid = fork();
  if (pid < 0) {
    c.error = strerror(errno);
    for (int fd : {in[0], in[1], out[0], out[1], err[0], err[1]}) close(fd);
    return c;
  }
  if (pid == 0) {
    setpgid(0, 0);
    dup2(in[0], 0);
    dup2(out[1], 1);
    dup2(err[1], 2);
    if (opts.memory_limit_bytes > 0) setrlimit(RLIMIT_AS, &mem);
    signal(SIGPIPE, SIG_DFL);  // an ignored SIGPIPE (gRPC, the trial server) would be inherited
    execve(args[0], args.data(), envp.data());
    const char msg[] = "exec failed\n";
    (void)!write(2, msg, sizeof(msg) - 1);
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  close(err[1]);
  c.pid = pid;
  c.in = in[1];
  c.out = out[0];
  c.err = err[0];
  return c;
}

int EndChild(ChildProcess& child, bool kill_it) {
  CloseFd(child.in);
  CloseFd(child.out);
  CloseFd(child.err);
  if (child.pid < 0) return -1;
  if (kill_it) {
    kill(-child.pid, SIGKILL);
    kill(child.pid, SIGKILL);
  }
  int status = 0;
  while (waitpid(child.pid, &status, 0) < 0 && errno == EINTR) {
  }
  child.pid = -1;
  return status;
}

std::chrono::steady_clock::time_point DeadlineAfter(std::chrono::steady_clock::time_point start,
                                                    double seconds) {
  return start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                     std::chrono::duration<double>(seconds));
}

int EndChildBy(ChildProcess& child, std::chrono::steady_clock::time_point deadline, bool* killed) {
  CloseFd(child.in);
  CloseFd(child.out);
  CloseFd(child.err);
  *killed = false;
  if (child.pid < 0) return -1;
  int status = 0;
  while (true) {
    pid_t w = waitpid(child.pid, &status, WNOHANG);
    if (w == child.pid) {
      child.pid = -1;
      return status;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      *killed = true;
      return EndChild(child, /*kill_it=*/true);
    }
    usleep(2000);
  }
}

SubprocessResult RunSubprocess(const std::vector<std::string>& argv,
                               const SubprocessOptions& opts) {
  SubprocessResult r;
  auto start = std::chrono::steady_clock::now();
  ChildProcess child = StartChild(argv, opts);
  if (child.pid < 0) {
    r.error = child.error;
    return r;
  }
  r.started = true;
  int in_fd = child.in, out_fd = child.out, err_fd = child.err;
  fcntl(in_fd, F_SETFL, O_NONBLOCK);
  size_t written = 0;
  if (opts.stdin_data.empty()) CloseFd(in_fd);
  const auto deadline = DeadlineAfter(start, opts.timeout_seconds);
  char buf[65536];
  while (out_fd >= 0 || err_fd >= 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      r.timed_out = true;
      break;
    }
    pollfd fds[3];
    int n = 0;
    if (out_fd >= 0) fds[n++] = {out_fd, POLLIN, 0};
    if (err_fd >= 0) fds[n++] = {err_fd, POLLIN, 0};
    if (in_fd >= 0) fds[n++] = {in_fd, POLLOUT, 0};
    int pr = poll(fds, n, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (pr < 0 && errno != EINTR) break;
    for (int i = 0; i < n; ++i) {
      if (!fds[i].revents) continue;
      if (fds[i].fd == in_fd) {
        ssize_t w =
            write(in_fd, opts.stdin_data.data() + written, opts.stdin_data.size() - written);
        if (w > 0) written += w;
        if (w < 0 && errno != EAGAIN) CloseFd(in_fd);
        if (written == opts.stdin_data.size()) CloseFd(in_fd);
        continue;
      }
      int& fd = fds[i].fd == out_fd ? out_fd : err_fd;
      std::string& dst = &fd == &out_fd ? r.stdout_data : r.stderr_data;
      ssize_t got = read(fd, buf, sizeof(buf));
      if (got > 0) {
        if (dst.size() < opts.max_output_bytes)
          dst.append(buf, std::min<size_t>(got, opts.max_output_bytes - dst.size()));
      } else if (got == 0 || (errno != EAGAIN && errno != EINTR)) {
        CloseFd(fd);
      }
    }
  }
  CloseFd(in_fd);
  CloseFd(out_fd);
  CloseFd(err_fd);
  child.in = child.out = child.err = -1;  // closed above
  int status = 0;
  if (r.timed_out) {
    status = EndChild(child, /*kill_it=*/true);
  } else {
    // Output closed; the child is exiting (or closed its pipes and hangs: bounded by the deadline).
    status = EndChildBy(child, deadline, &r.timed_out);
  }
  if (!r.timed_out) {
    if (WIFSIGNALED(status)) r.term_signal = WTERMSIG(status);
    if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

}  // namespace kiln
