// The replay file reader: bytes -> ParseReplaySet (Kernel Tuner cache files, Kiln record exports
// as JSON Lines or {"records": [...]}), then every query a replay device makes of the set.
// Findings: a crash or sanitizer report, an entry the set cannot find again.
#include <cstddef>
#include <cstdint>
#include <string>

#include "hardware/replay/replay_set.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto set = kiln::hardware::ParseReplaySet(text, "fuzz");
  if (!set.ok()) return 0;
  const kiln::hardware::ReplaySet& s = **set;
  for (const auto& e : s.entries) {
    const kiln::codegen::Config config = s.ConfigOf(e);
    if (s.Find(config) != &e) kiln::fuzz::Finding("a parsed entry is not found again", "");
    (void)s.MeasurementOf(e);
  }
  (void)s.BestUs();
  (void)s.CountWithin(0.9);
  (void)s.Workload();
  (void)s.Chip();
  kiln::codegen::KnobSpace space = s.Space();
  for (const auto& config : s.Configs()) (void)space.IsValid(config);
  return 0;
}
