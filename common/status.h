// absl::Status helpers: RETURN_IF_ERROR / ASSIGN_OR_RETURN and exception capture.
#pragma once

#include <exception>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kiln {

// INTERNAL status naming the throw site, for exceptions caught at a component boundary.
absl::Status StatusFromException(const std::exception& e, const char* file, int line);

}  // namespace kiln

#define KILN_CONCAT_INNER(a, b) a##b
#define KILN_CONCAT(a, b) KILN_CONCAT_INNER(a, b)

#define RETURN_IF_ERROR(expr)                    \
  do {                                           \
    ::absl::Status _kiln_status = (expr);        \
    if (!_kiln_status.ok()) return _kiln_status; \
  } while (0)

#define KILN_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()

#define ASSIGN_OR_RETURN(lhs, expr) \
  KILN_ASSIGN_OR_RETURN_IMPL(KILN_CONCAT(_kiln_statusor_, __LINE__), lhs, expr)

// Runs `body`; a std::exception escaping it becomes INTERNAL with file:line.
#define KILN_CATCH_AS_STATUS(body)                               \
  [&]() -> ::absl::Status {                                      \
    try {                                                        \
      body;                                                      \
    } catch (const std::exception& e) {                          \
      return ::kiln::StatusFromException(e, __FILE__, __LINE__); \
    }                                                            \
    return ::absl::OkStatus();                                   \
  }()
