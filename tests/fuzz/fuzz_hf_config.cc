// The HuggingFace config.json reader: bytes -> ParseHfConfig, and an accepted architecture on to
// the model plan the coordinator builds from it (where its sizes are multiplied into shapes).
// Findings: a crash, a sanitizer report (signed overflow aborts), an error that echoes its input.
#include <cstddef>
#include <cstdint>
#include <string>

#include "server/planner/planner.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto arch = kiln::server::ParseHfConfig(text);
  kiln::fuzz::CheckErrorSize(arch.status(), "ParseHfConfig");
  if (!arch.ok()) return 0;
  if (arch->hidden() <= 0 || arch->layers() <= 0 || arch->vocab() <= 0)
    kiln::fuzz::Finding("accepted a non-positive size", arch->ShortDebugString());
  // Both phases, as SubmitJob plans them after NormalizeJobSpec's defaults.
  for (const char* phase : {"decode", "prefill"}) {
    kiln::v1::JobSpec spec;
    spec.set_hf_config_json(text);
    spec.set_chip("cpu");
    spec.set_phase(phase);
    spec.set_batch(1);
    spec.set_context(1024);
    spec.set_prefill_tokens(512);
    spec.set_dtype(kiln::v1::FP32);
    auto plan = kiln::server::PlanModelJob(spec);
    kiln::fuzz::CheckErrorSize(plan.status(), "PlanModelJob");
  }
  return 0;
}
