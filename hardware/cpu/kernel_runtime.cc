// The one thread pool of a process that loads CPU kernels. Every kernel template's loops call
// kiln_rt::ParallelFor (codegen/cpu/templates/parallel.h), which runs them here when the loading
// process exports this hook: one set of helper threads for every loaded kernel, instead of a pool
// per kernel whose idle helpers spin on the cores the next kernel needs. Executables that link
// kiln_hardware export the symbol (hardware/CMakeLists.txt); kernels resolve it when loaded.
#include "hardware/cpu/kernel_runtime.h"

#include <dlfcn.h>

#define KILN_RT_HOST 1
#include "codegen/cpu/templates/parallel.h"

extern "C" __attribute__((visibility("default"))) void kiln_rt_parallel_for_v1(
    long n, int nt, void (*call)(const void*, long), const void* body) {
  kiln_rt::the_pool.Run(n, nt, [&](long i) { call(body, i); });
}

namespace kiln::hardware {

void RunOnKernelPool(long n, int nt, const std::function<void(long)>& body) {
  kiln_rt::the_pool.Run(n, nt, body);
}

absl::Status CheckKernelHost() {
  if (dlsym(RTLD_DEFAULT, "kiln_rt_parallel_for_v1")) return absl::OkStatus();
  return absl::FailedPreconditionError(
      "this executable does not export kiln_rt_parallel_for_v1, the thread pool Kiln's CPU "
      "kernels run on: link it against kiln_hardware, which adds the export "
      "(hardware/CMakeLists.txt); loaded here, the kernels would run single-threaded");
}

}  // namespace kiln::hardware
