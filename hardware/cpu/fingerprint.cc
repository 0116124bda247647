#include "hardware/cpu/fingerprint.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "codegen/knob_space.h"
#include "common/daemon.h"
#include "common/subprocess.h"
#include "hardware/cpu/peak_probe_source.h"  // generated: kKilnCpuPeakProbeSource

namespace kiln::hardware {
namespace {

// First value of each "key : value" line of /proc/cpuinfo that we care about.
struct CpuInfo {
  std::string vendor, model, flags;
};

CpuInfo ReadCpuInfo() {
  CpuInfo info;
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key(absl::StripAsciiWhitespace(line.substr(0, colon)));
    std::string value(absl::StripAsciiWhitespace(line.substr(colon + 1)));
    if (info.vendor.empty() && (key == "vendor_id" || key == "CPU implementer"))
      info.vendor = value;
    if (info.model.empty() && (key == "model name" || key == "Model" || key == "Hardware"))
      info.model = value;
    if (info.flags.empty() && (key == "flags" || key == "Features")) info.flags = value;
  }
  return info;
}

int64_t Sysconf(int name) {
  long v = sysconf(name);
  return v > 0 ? v : 0;
}

// Parses the probe's "key value" lines into `fp`. False unless the FMA peak and the read
// bandwidth are there and every value is plausible (0 is a peak the chip lacks, such as bf16 on
// AVX2): a kept file that is truncated or forged is measured again, not believed.
bool ParsePeaks(absl::string_view text, v1::ChipFingerprint* fp) {
  v1::ChipFingerprint out;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> kv = absl::StrSplit(line, ' ');
    double v = 0;
    if (kv.size() != 2 || !absl::SimpleAtod(kv[1], &v)) continue;
    if (!(v >= 0 && v < 1e8)) return false;  // also refuses NaN
    if (kv[0] == "peak_gflops") out.set_peak_gflops(v);
    if (kv[0] == "peak_bf16_gflops") out.set_peak_bf16_gflops(v);
    if (kv[0] == "peak_int8_gops") out.set_peak_int8_gops(v);
    if (kv[0] == "read_gbytes_per_s") out.set_read_gbytes_per_s(v);
  }
  if (out.peak_gflops() <= 0 || out.read_gbytes_per_s() <= 0) return false;
  fp->set_peak_gflops(out.peak_gflops());
  fp->set_peak_bf16_gflops(out.peak_bf16_gflops());
  fp->set_peak_int8_gops(out.peak_int8_gops());
  fp->set_read_gbytes_per_s(out.read_gbytes_per_s());
  return true;
}

std::string PeaksText(const v1::ChipFingerprint& fp) {
  return absl::StrCat("peak_gflops ", fp.peak_gflops(), "\npeak_bf16_gflops ",
                      fp.peak_bf16_gflops(), "\npeak_int8_gops ", fp.peak_int8_gops(),
                      "\nread_gbytes_per_s ", fp.read_gbytes_per_s(), "\n");
}

std::string BootId() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return std::string(absl::StripAsciiWhitespace(id));
}

// Runs the peak probe; fills peak_gflops and read_gbytes_per_s when it succeeds. The figures
// are kept for the rest of the boot beside the probe (<name>-<boot and sizes>.peaks): the probe
// takes a second or more (much of it the kernel zeroing its sweep's pages), which every worker
// start and test process would otherwise pay. `fresh` measures again (and keeps the higher).
void MeasurePeaks(const Toolchain& tc, bool fresh, v1::ChipFingerprint* fp) {
  CompileRequest req;
  req.source = kKilnCpuPeakProbeSource;
  req.name = "peak-probe-" + HexHash(req.source + tc.Describe() + fp->model() + fp->compiler());
  req.shared = false;
  auto built = CompileCached(tc, req);
  if (!built.ok()) return;
  // Four times the (capped) LLC, at least 512 MiB (as much as the cold timing rotates through,
  // hardware/measure.cc) and 16 MiB per core, at most a quarter of memory: every thread's part of
  // the sweep comes from DRAM, not from a cache. Over 128 MiB this VM's probe read anywhere from
  // 62 to 98 GB/s from one run to the next (some of it served from a cache the VM does not
  // report); over 512 MiB and more, 79-85.
  int64_t mib = std::clamp<int64_t>(4 * fp->l3_bytes() >> 20, 512, 1024);
  mib = std::max<int64_t>(mib, 16 * fp->cores());
  if (fp->memory_bytes() > 0) mib = std::min<int64_t>(mib, (fp->memory_bytes() >> 20) / 4);
  const std::string boot = BootId();
  const std::string cached =
      boot.empty()
          ? std::string()
          : absl::StrCat(built->path, "-", HexHash(absl::StrCat(boot, " ", fp->cores(), " ", mib)),
                         ".peaks");
  v1::ChipFingerprint kept;
  bool have_kept = false;
  if (!cached.empty()) {
    std::ifstream in(cached);
    std::stringstream text;
    text << in.rdbuf();
    have_kept = in && ParsePeaks(text.str(), &kept);
  }
  if (!fresh && have_kept) return (void)ParsePeaks(PeaksText(kept), fp);
  SubprocessOptions opts;
  opts.timeout_seconds = 30;
  SubprocessResult r =
      RunSubprocess({built->path, std::to_string(fp->cores()), std::to_string(mib)}, opts);
  if (!r.ok() || !ParsePeaks(r.stdout_data, fp)) return;
  if (cached.empty()) return;
  // A probe on a busy machine reads low, never high: what is kept is the best of every probe
  // this boot, so that one probe taken during a compile does not stand for the whole boot.
  KeepHigherPeaks(*fp, &kept);
  WriteFileAtomically(cached, PeaksText(kept)).IgnoreError();
}

}  // namespace

void KeepHigherPeaks(const v1::ChipFingerprint& from, v1::ChipFingerprint* into) {
  into->set_peak_gflops(std::max(into->peak_gflops(), from.peak_gflops()));
  into->set_peak_bf16_gflops(std::max(into->peak_bf16_gflops(), from.peak_bf16_gflops()));
  into->set_peak_int8_gops(std::max(into->peak_int8_gops(), from.peak_int8_gops()));
  into->set_read_gbytes_per_s(std::max(into->read_gbytes_per_s(), from.read_gbytes_per_s()));
}

std::vector<std::string> RelevantIsaFeatures(const std::string& flags_line) {
  static const std::set<std::string> kKnown = {
      "sse4_2",      "avx",        "avx2",     "fma",      "f16c",        "avx512f",
      "avx512dq",    "avx512cd",   "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
      "avx512_fp16", "avx512vbmi", "avx_vnni", "neon",     "asimd",       "asimdhp",
      "sve",         "sve2",       "bf16",     "i8mm"};
  std::vector<std::string> out;
  for (absl::string_view f : absl::StrSplit(flags_line, ' ', absl::SkipEmpty())) {
    std::string flag(f);
    if (kKnown.count(flag) || absl::StartsWith(flag, "amx")) out.push_back(flag);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::string CpuChipType(const std::string& machine, const std::vector<std::string>& features) {
  auto has = [&](const char* f) {
    return std::find(features.begin(), features.end(), f) != features.end();
  };
  if (machine == "x86_64" && has("avx512f")) return "cpu-x86_64-avx512";
  if (machine == "x86_64" && has("avx2")) return "cpu-x86_64-avx2";
  return "cpu-" + (machine.empty() ? std::string("unknown") : machine);
}

v1::ChipFingerprint ProbeCpuFingerprint(const Toolchain* toolchain, bool fresh) {
  v1::ChipFingerprint fp;
  CpuInfo info = ReadCpuInfo();
  fp.set_kind("cpu");
  fp.set_vendor(info.vendor.empty() ? "unknown" : info.vendor);
  fp.set_model(info.model.empty() ? "unknown" : info.model);
  std::vector<std::string> features = RelevantIsaFeatures(info.flags);
  for (const auto& f : features) fp.add_isa_features(f);
  fp.set_cores(std::max(1u, std::thread::hardware_concurrency()));
  fp.set_l1d_bytes(Sysconf(_SC_LEVEL1_DCACHE_SIZE));
  fp.set_l2_bytes(Sysconf(_SC_LEVEL2_CACHE_SIZE));
  fp.set_l3_bytes(codegen::SaneL3Bytes(Sysconf(_SC_LEVEL3_CACHE_SIZE), fp.cores()));
  fp.set_memory_bytes(Sysconf(_SC_PHYS_PAGES) * Sysconf(_SC_PAGESIZE));
  utsname u{};
  uname(&u);
  fp.set_chip_type(CpuChipType(u.machine, features));
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  fp.set_hostname(host);
  if (toolchain) {
    fp.set_compiler(toolchain->version);
    MeasurePeaks(*toolchain, fresh, &fp);
  }
  return fp;
}

}  // namespace kiln::hardware
