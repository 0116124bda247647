#include "hardware/toolchain.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status.h"
#include "common/subprocess.h"

namespace kiln::hardware {
namespace fs = std::filesystem;
namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

std::string FindOnPath(const std::string& name) {
  if (name.find('/') != std::string::npos) return access(name.c_str(), X_OK) == 0 ? name : "";
  for (auto dir : absl::StrSplit(Env("PATH"), ':', absl::SkipEmpty())) {
    std::string candidate = absl::StrCat(dir, "/", name);
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

// A name beside `path`, unique to this process and call, to write to and rename over `path`.
std::string TempNameFor(const std::string& path) {
  static std::atomic<int> counter{0};
  return absl::StrCat(path, ".tmp.", getpid(), ".", counter++);
}

// Writes `text` to `path` through a temporary file and a rename.
absl::Status WriteAtomically(const std::string& path, const std::string& text) {
  std::string tmp = TempNameFor(path);
  {
    std::ofstream out(tmp, std::ios::binary);
    out << text;
    if (!out.good()) return absl::InternalError(absl::StrCat("cannot write ", tmp));
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot rename ", tmp, ": ", ec.message()));
  return absl::OkStatus();
}

// The flags every compile of `req` shares, before its defines and files.
std::vector<std::string> BaseFlags(const Toolchain& tc, bool shared) {
  std::vector<std::string> argv = {tc.compiler};
  argv.insert(argv.end(), tc.flags.begin(), tc.flags.end());
  // A shared kernel is linked against the C runtime only, not the C++ one: reading libstdc++'s
  // symbol table is a fixed cost on every link, a sizeable share of a small kernel's compile. A
  // kernel is only ever loaded into a C++ host (the worker's trial process, the step runner, the
  // benchmarks, the tests), so the few C++ runtime symbols a kernel may use (__cxa_thread_atexit
  // for the GEMM's per-thread scratch) are resolved from the host when it loads the kernel.
  if (shared) argv.insert(argv.end(), {"-shared", "-fPIC", "-nodefaultlibs"});
  return argv;
}

struct PreludeState {
  std::mutex mu;
  std::set<std::string> failed;  // headers not to use again in this process
};
PreludeState& Preludes() {
  static auto* state = new PreludeState;
  return *state;
}

// Builds <dir>/<stem>.h and its precompiled <stem>.h.gch unless both are there (both written
// atomically, so processes sharing the cache may race harmlessly; checked on every call, since
// the cache may be deleted at any time); returns the header to force-include, or "" when there
// is none to use (not GCC, or its build failed once in this process: compiles go on without
// it). GCC checks a .gch against each compile's options and reads the text when they differ, so
// a stale one costs time, never correctness.
std::string EnsurePrelude(const Toolchain& tc, const std::string& dir, const std::string& stem,
                          bool shared, double timeout_seconds) {
  if (tc.version.find("clang") != std::string::npos) return "";
  const std::string header = absl::StrCat(dir, "/", stem, ".h");
  const std::string gch = header + ".gch";
  PreludeState& state = Preludes();
  std::lock_guard<std::mutex> lock(state.mu);
  std::set<std::string>& failed = state.failed;
  if (failed.count(header)) return "";
  if (fs::exists(gch) && fs::exists(header)) return header;
  const std::string tmp = TempNameFor(gch);
  std::vector<std::string> argv = BaseFlags(tc, shared);
  argv.insert(argv.end(), {"-x", "c++-header", "-o", tmp, header});
  SubprocessOptions opts;
  opts.timeout_seconds = timeout_seconds;
  std::error_code ec;
  if (!WriteAtomically(header, PreludeSource()).ok() || !RunSubprocess(argv, opts).ok()) {
    fs::remove(tmp, ec);
    failed.insert(header);
    return "";
  }
  fs::rename(tmp, gch, ec);
  if (ec) {
    failed.insert(header);
    return "";
  }
  return header;
}

}  // namespace

const char* PreludeSource() {
  return "// Precompiled by Kiln (hardware/toolchain.cc): the system headers CPU kernels include.\n"
         "#include <math.h>\n"
         "#include <pthread.h>\n"
         "#include <sched.h>\n"
         "#include <stdint.h>\n"
         "#include <stdlib.h>\n"
         "#include <string.h>\n"
         "#include <time.h>\n"
         "#if defined(__AVX512F__) || defined(__AVX2__)\n"
         "#include <immintrin.h>\n"
         "#endif\n";
}

std::string Toolchain::Describe() const {
  return absl::StrCat(version, " ", absl::StrJoin(flags, " "));
}

absl::StatusOr<Toolchain> FindToolchain() {
  std::string name = Env("KILN_CXX").empty() ? "c++" : Env("KILN_CXX");
  Toolchain tc;
  tc.compiler = FindOnPath(name);
  if (tc.compiler.empty())
    return absl::FailedPreconditionError(
        absl::StrCat("no C++ compiler: '", name, "' is not an executable on $PATH (set KILN_CXX)"));
  SubprocessOptions opts;
  opts.timeout_seconds = 20;
  SubprocessResult r = RunSubprocess({tc.compiler, "--version"}, opts);
  if (!r.ok())
    return absl::FailedPreconditionError(
        absl::StrCat(tc.compiler, " --version failed: ", r.Describe()));
  tc.version = r.stdout_data.substr(0, r.stdout_data.find('\n'));
  return tc;
}

std::string CacheDir() {
  std::string dir = Env("KILN_CACHE_DIR");
  if (dir.empty() && !Env("XDG_CACHE_HOME").empty()) dir = Env("XDG_CACHE_HOME") + "/kiln";
  if (dir.empty()) dir = (Env("HOME").empty() ? std::string("/tmp") : Env("HOME")) + "/.cache/kiln";
  return dir;
}

absl::StatusOr<CompileResult> CompileCached(const Toolchain& tc, const CompileRequest& req) {
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  const std::string dir = CacheDir() + "/kernels";
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  CompileResult result;
  result.path = absl::StrCat(dir, "/", req.name, req.shared ? ".so" : ".bin");
  if (fs::exists(result.path)) {
    result.reused = true;
    result.seconds = elapsed();
    return result;
  }
  std::string header;  // the precompiled prelude, built (once) before the source is written
  if (!req.prelude.empty())
    header = EnsurePrelude(tc, dir, req.prelude, req.shared, std::min(req.timeout_seconds, 60.0));
  const std::string src = absl::StrCat(dir, "/", req.name, ".cc");
  RETURN_IF_ERROR(WriteAtomically(src, req.source));
  const std::string tmp = TempNameFor(result.path);
  auto compile = [&](const std::string& prelude) {
    std::vector<std::string> argv = BaseFlags(tc, req.shared);
    if (!prelude.empty()) argv.insert(argv.end(), {"-include", prelude});
    for (const auto& [name, value] : req.defines)
      argv.push_back(absl::StrCat("-D", name, "=", value));
    argv.insert(argv.end(), {"-o", tmp, src});
    if (req.shared) argv.insert(argv.end(), {"-lm", "-lgcc_s", "-lgcc", "-lc"});
    SubprocessOptions opts;
    opts.timeout_seconds = req.timeout_seconds;
    return RunSubprocess(argv, opts);
  };
  SubprocessResult r = compile(header);
  // A compile that fails with the prelude is tried once more without it, so the prelude only
  // ever costs time: a .gch the compiler stops at instead of reading the text, or a cache
  // deleted meanwhile, must not become a kernel's recorded compile error. A prelude still in
  // place that failed where the text compiles is not used again in this process.
  if (!r.ok() && r.started && !r.timed_out && !header.empty()) {
    r = compile("");
    if (r.ok() && fs::exists(header + ".gch")) {
      PreludeState& state = Preludes();
      std::lock_guard<std::mutex> lock(state.mu);
      state.failed.insert(header);
    }
  }
  if (!r.ok()) {
    fs::remove(tmp, ec);
    if (!r.started) return absl::UnavailableError(absl::StrCat("compiler: ", r.Describe()));
    if (r.timed_out)
      return absl::DeadlineExceededError(
          absl::StrCat("compile of ", src, " timed out after ", req.timeout_seconds, " s"));
    return absl::InvalidArgumentError(absl::StrCat(
        "compile failed (", r.Describe(), "): ", Tail(r.stderr_data + r.stdout_data, 2000)));
  }
  fs::rename(tmp, result.path, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot rename ", tmp, ": ", ec.message()));
  result.seconds = elapsed();
  return result;
}

std::string Tail(const std::string& text, size_t max_chars) {
  if (text.size() <= max_chars) return text;
  return "..." + text.substr(text.size() - max_chars);
}

std::string HexHash(const std::string& text) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : text) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace kiln::hardware
