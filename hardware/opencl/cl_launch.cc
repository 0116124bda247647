#include "hardware/opencl/cl_launch.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "hardware/operands.h"
#ifdef KILN_HAVE_CLBLAST
#include <clblast_c.h>
#endif

namespace kiln::hardware {
namespace {

v1::Measurement Failed(v1::MeasurementStatus status, std::string message) {
  v1::Measurement m;
  m.set_status(status);
  m.set_message(std::move(message));
  return m;
}

// The operands' device buffers, `sets` copies, behind MeasureOnDevice; `run` gets one set's
// buffers in argument order.
v1::Measurement MeasureWithBuffers(
    ClRuntime& rt, const v1::Workload& w, const v1::ChipFingerprint& chip,
    const MeasureOptions& opts,
    const std::function<absl::Status(const std::vector<cl_mem>& args)>& run) {
  auto layout = OperandsOf(w);
  if (!layout.ok()) return Failed(v1::UNSUPPORTED, std::string(layout.status().message()));
  std::vector<std::vector<ClMem>> sets;
  DeviceOperands dev;
  dev.allocate = [&](int n) -> absl::Status {
    sets.resize(n);
    for (auto& set : sets)
      for (size_t floats : layout->floats) {
        auto m = rt.Alloc(floats * sizeof(float));
        if (!m.ok()) return m.status();
        set.push_back(std::move(*m));
      }
    return absl::OkStatus();
  };
  dev.upload = [&](int set, int operand, const float* data) {
    return rt.Write(sets[set][operand].get(), data, layout->floats[operand] * sizeof(float));
  };
  dev.download_output = [&](int set, float* out) {
    return rt.Read(sets[set].back().get(), out, layout->floats.back() * sizeof(float));
  };
  dev.run = [&](int set) {
    std::vector<cl_mem> args;
    for (const ClMem& m : sets[set]) args.push_back(m.get());
    return run(args);
  };
  return MeasureOnDevice(w, dev, chip, opts);
}

}  // namespace

v1::Measurement MeasureClKernel(ClRuntime& rt, const v1::Workload& w, cl_kernel kernel,
                                const codegen::Launch& launch, const v1::ChipFingerprint& chip,
                                const MeasureOptions& opts) {
  size_t global[3], local[3], wg = 1;
  for (int i = 0; i < 3; ++i) {
    global[i] = static_cast<size_t>(launch.global[i]);
    local[i] = static_cast<size_t>(launch.local[i]);
    wg *= local[i];
  }
  size_t kernel_max = 0;
  clGetKernelWorkGroupInfo(kernel, rt.info().device, CL_KERNEL_WORK_GROUP_SIZE, sizeof(kernel_max),
                           &kernel_max, nullptr);
  if (kernel_max > 0 && wg > kernel_max)
    return Failed(v1::UNSUPPORTED, absl::StrCat("the built kernel allows ", kernel_max,
                                                " work-items per group; the launch needs ", wg));
  return MeasureWithBuffers(rt, w, chip, opts, [&](const std::vector<cl_mem>& args) {
    for (size_t i = 0; i < args.size(); ++i) {
      cl_int err = clSetKernelArg(kernel, static_cast<cl_uint>(i), sizeof(cl_mem), &args[i]);
      if (err != CL_SUCCESS) return ClStatus(err, "clSetKernelArg");
    }
    return rt.Run(kernel, 3, global, local);
  });
}

#ifdef KILN_HAVE_CLBLAST
bool HaveClBlast() { return true; }

void WarmClBlastInBackground(int index) {
  const pid_t child = fork();
  if (child < 0) return;
  if (child > 0) {  // the child exits at once; the grandchild is reparented
    waitpid(child, nullptr, 0);
    return;
  }
  if (fork() != 0) _exit(0);
  setsid();
  if (nice(10) < 0) { /* best effort */
  }
  int null_fd = open("/dev/null", O_RDWR);
  if (null_fd >= 0) dup2(null_fd, 1), dup2(null_fd, 2);
  auto rt = ClRuntime::Open(index);
  if (rt.ok()) {
    // The direct kernel (small problems) and the indirect one with its copy/pad kernels.
    for (size_t n : {16, 512}) {
      auto a = (*rt)->Alloc(n * n * 4), b = (*rt)->Alloc(n * n * 4), c = (*rt)->Alloc(n * n * 4);
      if (!a.ok() || !b.ok() || !c.ok()) break;
      cl_command_queue queue = (*rt)->queue();
      CLBlastSgemm(CLBlastLayoutRowMajor, CLBlastTransposeNo, CLBlastTransposeNo, n, n, n, 1.0f,
                   a->get(), 0, n, b->get(), 0, n, 0.0f, c->get(), 0, n, &queue, nullptr);
      clFinish(queue);
    }
  }
  _exit(0);
}

v1::Measurement MeasureClBlastGemm(ClRuntime& rt, const v1::Workload& w,
                                   const v1::ChipFingerprint& chip, const MeasureOptions& opts) {
  const size_t M = w.dims().at("M"), N = w.dims().at("N"), K = w.dims().at("K");
  return MeasureWithBuffers(rt, w, chip, opts, [&](const std::vector<cl_mem>& args) {
    cl_command_queue queue = rt.queue();
    CLBlastStatusCode s =
        CLBlastSgemm(CLBlastLayoutRowMajor, CLBlastTransposeNo, CLBlastTransposeNo, M, N, K, 1.0f,
                     args[0], 0, K, args[1], 0, N, 0.0f, args[2], 0, N, &queue, nullptr);
    if (s != CLBlastSuccess) return absl::InternalError(absl::StrCat("CLBlastSgemm: status ", s));
    return ClStatus(clFinish(queue), "clFinish");
  });
}
#else
bool HaveClBlast() { return false; }
void WarmClBlastInBackground(int) {}

v1::Measurement MeasureClBlastGemm(ClRuntime&, const v1::Workload&, const v1::ChipFingerprint&,
                                   const MeasureOptions&) {
  return Failed(v1::UNSUPPORTED, "this build has no CLBlast (apt install libclblast-dev)");
}
#endif

}  // namespace kiln::hardware
