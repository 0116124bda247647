// The compile path every backend shares: compiler discovery, the kernel cache, cached compiles.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace kiln::hardware {

struct Toolchain {
  std::string compiler;  // absolute path of the C++ compiler
  std::string version;   // first line of `compiler --version`
  std::vector<std::string> flags = {"-O3", "-march=native", "-fopenmp", "-std=c++17"};
  // "<version> <flags...>": what a tuning record stores as its toolchain.
  std::string Describe() const;
};

// The compiler named by $KILN_CXX, else `c++` on $PATH, with its version.
// FAILED_PRECONDITION when there is none.
absl::StatusOr<Toolchain> FindToolchain();

// $KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else ~/.cache/kiln (created on demand).
std::string CacheDir();

struct CompileRequest {
  std::string source;
  std::vector<std::pair<std::string, int64_t>> defines;  // passed as -DNAME=value
  std::string name;    // file stem in CacheDir()/kernels: <name>.cc, <name>.so / <name>
  bool shared = true;  // shared object (kernels) or executable (probes)
  // When set, the system headers of the CPU templates (PreludeSource()) are precompiled once
  // into CacheDir()/kernels/<prelude>.h.gch and force-included: parsing them, <immintrin.h>
  // above all, is most of a kernel's compile. The name must change with anything the header's
  // compile depends on (compiler, flags, chip). Compilers other than GCC, or a prelude that
  // fails to build, compile without it: the same object, only slower.
  std::string prelude;
  double timeout_seconds = 60;
};

struct CompileResult {
  std::string path;     // the shared object or executable
  bool reused = false;  // it already existed: nothing was compiled
  double seconds = 0;
};

// Compiles into CacheDir()/kernels, reusing an existing artifact of the same name. Writes
// atomically (temporary file, then rename), so concurrent compiles of one kernel are safe.
// Errors: INVALID_ARGUMENT with the tail of the compiler's diagnostics when it rejects the
// source, DEADLINE_EXCEEDED when it runs past the timeout, INTERNAL/UNAVAILABLE otherwise.
absl::StatusOr<CompileResult> CompileCached(const Toolchain& tc, const CompileRequest& req);

// The header CompileRequest::prelude precompiles: the system headers CPU kernels include.
const char* PreludeSource();

// Last `max_chars` characters of `text`, prefixed with "..." when cut.
std::string Tail(const std::string& text, size_t max_chars);

// FNV-1a 64 of `text` as 16 hex digits.
std::string HexHash(const std::string& text);

}  // namespace kiln::hardware
