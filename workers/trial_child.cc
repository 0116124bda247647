#include "workers/trial_child.h"

#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>

#include "absl/strings/str_cat.h"
#include "hardware/cpu/step_runner.h"
#include "hardware/device.h"
#include "kiln/v1/types.pb.h"

namespace kiln::workers {

int TrialChildMain() {
  std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  v1::SandboxRequest req;
  if (!req.ParseFromString(input)) {
    std::fprintf(stderr, "trial child: malformed request on stdin\n");
    return 3;
  }
  auto device = hardware::OpenDevice(req.device(), &req.chip());
  if (!device.ok()) {
    std::fprintf(stderr, "trial child: %s\n", std::string(device.status().message()).c_str());
    return 3;
  }
  hardware::MeasureOptions opts;
  opts.warm = req.warm();
  if (req.max_seconds() > 0) opts.max_seconds = req.max_seconds();
  opts.race_us = req.race_us();
  opts.seed = req.seed();
  v1::Measurement m;
  if (req.kind() == v1::STEP) {
    hardware::StepOptions step_opts;
    step_opts.seed = req.seed();
    auto r = hardware::RunCpuStep(req.step(), req.chip(), step_opts);
    if (r.ok()) {
      m.set_status(v1::OK);
      m.set_median_us(r->step_us());
      for (double s : r->samples_us()) m.add_samples_us(s);
      *m.mutable_step() = *r;
    } else {
      m.set_status(v1::CRASHED);
      m.set_message(absl::StrCat("step: ", r.status().message()));
    }
  } else if (req.kind() == v1::BASELINE) {
    m = (*device)->MeasureBaseline(req.workload(), opts);
  } else {
    hardware::CompiledKernel k;
    k.artifact = req.artifact();
    k.entry = req.entry();
    m = (*device)->Measure(req.workload(), k, opts);
  }
  std::string out = m.SerializeAsString();
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fflush(stdout);
  return 0;
}

}  // namespace kiln::workers
