// Checks shared by the fuzz targets: a finding is reported by aborting, so libFuzzer saves the
// input that led to it.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/status/status.h"

namespace kiln::fuzz {

// Errors quote at most a short prefix of bad input (docs/security.md): an error longer than this
// repeats what the caller sent.
inline constexpr size_t kMaxErrorChars = 1024;

[[noreturn]] inline void Finding(const char* what, const std::string& detail) {
  std::fprintf(stderr, "FUZZ FINDING: %s: %.2000s\n", what, detail.c_str());
  std::abort();
}

inline void CheckErrorSize(const absl::Status& s, const char* where) {
  if (!s.ok() && s.message().size() > kMaxErrorChars)
    Finding(where,
            "error message of " + std::to_string(s.message().size()) +
                " characters (echoes its input): " + std::string(s.message().substr(0, 300)));
}

}  // namespace kiln::fuzz
