// Help texts of the kiln command and its subcommands.
#pragma once

#include <string>

namespace kiln::cli {

// Help for `command` ("" or unknown: the overview).
std::string UsageText(const std::string& command);
// "kiln 0.1.0".
std::string VersionText();

}  // namespace kiln::cli
