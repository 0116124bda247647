#include "common/status.h"

#include "absl/strings/str_cat.h"

namespace kiln {

absl::Status StatusFromException(const std::exception& e, const char* file, int line) {
  return absl::InternalError(absl::StrCat(file, ":", line, ": ", e.what()));
}

}  // namespace kiln
