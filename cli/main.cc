// Entry point of the `kiln` command-line client.
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/knobs.h"
#include "cli/local.h"
#include "cli/token.h"
#include "cli/usage.h"
#include "common/daemon.h"

namespace kiln::cli {

// `kiln agent ...` is `kiln-agent ...` (the agent's offline tools, e.g. pretrain): found next to
// this binary, in the build tree's agent/ folder, or on PATH.
int RunAgentTool(char** argv) {
  char self[4096] = {0};
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  std::string dir = n > 0 ? std::string(self, n) : "";
  dir = dir.substr(0, dir.find_last_of('/') + 1);
  argv[1] = const_cast<char*>("kiln-agent");
  for (const std::string& path : {dir + "kiln-agent", dir + "../agent/kiln-agent"})
    if (access(path.c_str(), X_OK) == 0) execv(path.c_str(), argv + 1);
  execvp("kiln-agent", argv + 1);
  std::cerr << "kiln: agent: cannot run kiln-agent (not next to kiln nor on PATH)\n";
  return 1;  // an installation problem, not a usage error
}

}  // namespace kiln::cli

int main(int argc, char** argv) {
  kiln::DisableMutexDeadlockDetection();  // `tune --local` runs a coordinator in this process
  if (int rc = kiln::cli::MaybeRunTrialChild(argc, argv); rc >= 0) return rc;
  std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && args[0] == "agent") return kiln::cli::RunAgentTool(argv);
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
  for (auto [field, env] :
       {std::pair{&inv.tls_ca, "KILN_TLS_CA"}, std::pair{&inv.token_file, "KILN_TOKEN_FILE"}})
    if (field->empty() && std::getenv(env)) *field = std::getenv(env);
  kiln::cli::Io io{std::cout, std::cerr, isatty(STDERR_FILENO) == 1, kiln::cli::WallClockMs};
  if (inv.command == "token") return kiln::cli::RunTokenCreate(inv, io);
  if (inv.command == "tune") return kiln::cli::RunLocal(inv, io);
  if (inv.command == "knobs") return kiln::cli::RunKnobs(inv, io);  // offline: the templates
  return kiln::cli::RunRemoteCommand(inv, io);
}
