#include "cli/local.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>

#if KILN_HAVE_LOCAL
#include "server/coordinator_server.h"
#include "workers/worker.h"
#endif

namespace kiln::cli {

#if KILN_HAVE_LOCAL

int MaybeRunTrialChild(int argc, char** argv) { return workers::MaybeTrialChild(argc, argv); }

namespace {

// Write end of the Ctrl-C pipe: the handler only writes a byte (async-signal-safe); a thread
// does the rest. A handler, not a blocked signal mask: exec'd children (compilers, trial
// children) start with default signal handling and an unchanged mask.
int g_interrupt_fd = -1;

extern "C" void OnInterrupt(int) {
  const char c = 'i';
  if (g_interrupt_fd >= 0) (void)!write(g_interrupt_fd, &c, 1);
}

}  // namespace

int RunLocal(const Invocation& inv, Io& io) {
  std::error_code ignored;
  std::filesystem::create_directories(inv.data_dir, ignored);
  server::CoordinatorOptions co;
  co.listen = "127.0.0.1:0";
  co.data_dir = inv.data_dir;
  co.metrics_listen = "";
  co.quiet = true;
  auto coordinator = server::StartCoordinator(co);
  if (!coordinator.ok()) {
    io.err << "kiln: cannot start the local coordinator: " << coordinator.status() << "\n";
    return 1;
  }
  const std::string address = (*coordinator)->address();
  if (inv.local_jobs || !inv.local_cancel.empty()) {  // the local store: no worker, no new job
    Invocation remote = inv;
    remote.command = inv.local_jobs ? "jobs" : "cancel";
    remote.job_id = inv.local_cancel;
    remote.coordinator = address;
    remote.local = false;
    int rc = RunRemoteCommand(remote, io);
    (*coordinator)->Shutdown();
    return rc;
  }
  workers::WorkerOptions wo;
  wo.coordinator = address;
  wo.device = "cpu";
  wo.metrics_listen = "";
  wo.quiet = true;
  auto worker = workers::NewWorker(wo);
  if (!worker.ok()) {
    io.err << "kiln: cannot start the local cpu worker: " << worker.status() << "\n";
    (*coordinator)->Shutdown();
    return 1;
  }

  // If the worker dies, cancel the job so that the watch ends instead of waiting forever.
  std::mutex mu;
  std::string job_id;
  bool worker_done = false;
  absl::Status worker_status;
  auto cancel_if_worker_failed = [&] {
    std::string id;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!worker_done || worker_status.ok() || job_id.empty()) return;
      id = job_id;
    }
    (void)Client(address).CancelJob(id);
  };
  std::thread thread([&] {
    absl::Status status = (*worker)->Run(/*handle_signals=*/false);
    {
      std::lock_guard<std::mutex> lock(mu);
      worker_done = true;
      worker_status = status;
    }
    cancel_if_worker_failed();
  });

  // Ctrl-C: the first cancels the job, so that it does not stay RUNNING in the data folder and
  // the watch ends with its results so far; a second quits at once.
  std::atomic<bool> interrupted{false};
  int pipe_fds[2] = {-1, -1};
  struct sigaction old_sigint = {};
  std::thread interrupt_thread;
  if (pipe2(pipe_fds, O_CLOEXEC) == 0) {
    g_interrupt_fd = pipe_fds[1];
    struct sigaction sa = {};
    sa.sa_handler = OnInterrupt;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, &old_sigint);
    interrupt_thread = std::thread([&, read_fd = pipe_fds[0]] {
      char c = 0;
      int count = 0;
      while (true) {
        ssize_t n = read(read_fd, &c, 1);
        if (n < 0 && errno == EINTR) continue;
        if (n != 1 || c != 'i') return;  // 'q': the run is over
        std::string id;
        {
          std::lock_guard<std::mutex> lock(mu);
          id = job_id;
        }
        if (++count == 1 && !id.empty()) {
          interrupted = true;
          io.err << "\nkiln: Ctrl-C: cancelling job " << id << " (Ctrl-C again quits at once)\n"
                 << std::flush;
          auto state = Client(address).CancelJob(id);
          if (!state.ok())
            io.err << "kiln: could not cancel job " << id << ": " << state.status().message()
                   << "\n"
                   << std::flush;
          continue;
        }
        io.err << "\nkiln: quitting"
               << (id.empty() ? std::string()
                              : "; job " + id + " may be left unfinished in " + inv.data_dir +
                                    " (kiln tune --local --cancel " + id + ")")
               << "\n"
               << std::flush;
        std::_Exit(130);
      }
    });
  }

  Client client(address);
  int rc =
      SubmitAndWait(client, inv, inv.json ? WaitOutput::kResultsJson : WaitOutput::kResultsTable,
                    io, [&](const std::string& id) {
                      {
                        std::lock_guard<std::mutex> lock(mu);
                        job_id = id;
                      }
                      cancel_if_worker_failed();
                    });
  if (interrupt_thread.joinable()) {
    const char quit = 'q';
    (void)!write(pipe_fds[1], &quit, 1);
    interrupt_thread.join();
    sigaction(SIGINT, &old_sigint, nullptr);
    g_interrupt_fd = -1;
    close(pipe_fds[0]);
    close(pipe_fds[1]);
  }
  if (interrupted) {
    io.err << "kiln: job " << job_id << " was cancelled by Ctrl-C; its results so far are above\n";
    rc = 130;  // the shell's convention for a run ended by SIGINT
  }
  (*worker)->Stop();
  thread.join();
  if (!worker_status.ok()) io.err << "kiln: the local worker stopped: " << worker_status << "\n";
  (*coordinator)->Shutdown();
  return rc;
}

#else  // !KILN_HAVE_LOCAL

int MaybeRunTrialChild(int, char**) { return -1; }

int RunLocal(const Invocation&, Io& io) {
  io.err << "kiln: tune --local is not built into this kiln (it needs the kiln_server and "
            "kiln_workers libraries); run kiln-coordinator and kiln-worker, then kiln submit "
            "--wait\n";
  return 1;
}

#endif  // KILN_HAVE_LOCAL

}  // namespace kiln::cli
