// `kiln token create`: a new role token for the coordinator's --tokens file (docs/security.md).
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cli/commands.h"
#include "cli/flags.h"

namespace kiln::cli {

// ROLE is submit, worker or admin; NAME 1..64 printable ASCII characters without whitespace.
absl::Status ValidateTokenRoleAndName(const std::string& role, const std::string& name);

// Draws 32 random bytes (OpenSSL), appends `ROLE NAME SHA256-HEX` to `tokens_file` (created
// with mode 0600) and returns the token (64 hex digits). Only its digest is stored.
absl::StatusOr<std::string> CreateToken(const std::string& role, const std::string& name,
                                        const std::string& tokens_file);

// Prints the token as the last line of stdout (notes on stderr). Exit 0, 1 or 2 (usage).
int RunTokenCreate(const Invocation& inv, Io& io);

}  // namespace kiln::cli
