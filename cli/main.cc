// Entry point of the `kiln` command-line client.
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/local.h"
#include "cli/usage.h"

int main(int argc, char** argv) {
  if (int rc = kiln::cli::MaybeRunTrialChild(argc, argv); rc >= 0) return rc;
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    std::cerr << kiln::cli::UsageText("");
    return 2;
  }
  kiln::cli::Invocation inv;
  absl::Status parsed = kiln::cli::ParseCommandLine(args, std::getenv("KILN_COORDINATOR"), &inv);
  if (!parsed.ok()) {
    std::cerr << "kiln: " << parsed.message() << "\n"
              << "Run 'kiln " << (inv.command.empty() ? "" : inv.command + " ")
              << "--help' for usage.\n";
    return 2;
  }
  if (inv.version) {
    std::cout << kiln::cli::VersionText() << "\n";
    return 0;
  }
  if (inv.help) {
    std::cout << kiln::cli::UsageText(inv.command == "help" ? inv.help_topic : inv.command);
    return 0;
  }
  kiln::cli::Io io{std::cout, std::cerr, isatty(STDERR_FILENO) == 1, kiln::cli::WallClockMs};
  if (inv.command == "tune") return kiln::cli::RunLocal(inv, io);
  return kiln::cli::RunRemoteCommand(inv, io);
}
