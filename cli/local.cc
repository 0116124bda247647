#include "cli/local.h"

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
