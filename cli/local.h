// `kiln tune --local`: a coordinator and a CPU worker in this process, for a first run.
#pragma once

#include "cli/commands.h"
#include "cli/flags.h"

namespace kiln::cli {

// Starts an embedded coordinator (store in inv.data_dir) and a cpu worker, runs inv.spec with
// live progress, prints the results (table, or JSON with inv.json) and shuts both down.
int RunLocal(const Invocation& inv, Io& io);

// The worker re-executes this binary as its sandboxed trial child: when argv[1] asks for that,
// runs the child and returns its exit status; otherwise returns -1.
int MaybeRunTrialChild(int argc, char** argv);

}  // namespace kiln::cli
