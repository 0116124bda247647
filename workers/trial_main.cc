// kiln-trial: the lean host of the sandboxed trial child (workers/trial_child.h). The worker
// starts one per tuning trial; it has no LibTorch, so it cannot run baselines or steps.
#include <cstdio>
#include <cstring>

#include "workers/trial_child.h"

int main(int argc, char** argv) {
  if (int code = kiln::workers::MaybeTrialChild(argc, argv); code >= 0) return code;
  std::fprintf(stderr,
               "kiln-trial: runs sandboxed trials for a Kiln worker; not for direct use\n"
               "usage: kiln-trial %s < SANDBOX_REQUEST\n"
               "       kiln-trial %s   (framed requests on stdin, results on stdout)\n",
               kiln::workers::kTrialChildFlag, kiln::workers::kTrialServerFlag);
  return 2;
}
