#include "cli/usage.h"

#ifndef KILN_VERSION
#define KILN_VERSION "0.0.0-dev"
#endif

namespace kiln::cli {
namespace {

constexpr char kJobFlags[] = R"(What to tune (one of):
  --op OP --shape DIMS     one operator at one shape, e.g. --op gemm --shape M=8,N=4096,K=4096
  --epilogue E             fused epilogue of --op: gemm bias|silu|gelu|residual, rmsnorm residual
  --model PRESET           a model preset: tinyllama-1.1b, llama-3.2-1b, llama-3-8b, mistral-7b,
                           mixtral-8x7b, mamba-130m, mamba-1.4b (tunes every operator of a step)
  --hf-config FILE         a HuggingFace config.json (llama, mistral, qwen2, mixtral, mamba)
  --dtype fp32|bf16        element type (default fp32; bf16: gemm and moe_gemm weights)
  --phase decode|prefill, --batch B, --context L   model jobs: the inference step to tune
Where and how:
  --chip PREFIX            chip-type label prefix the job runs on, e.g. cpu (required)
  --budget TRIALS          total trials (default 64)
  --max-seconds S          wall-clock limit (default: none)
  --strategy NAME          search strategy (default: the coordinator's choice)
  --seed S                 random seed (default: the coordinator picks one)
  --pin KNOB=V             fix a knob to a value (repeatable)
  --priority N             scheduling priority (higher first)
)";

constexpr char kOverview[] = R"(kiln: submit and watch kernel-tuning jobs on a Kiln coordinator.

Usage:
  kiln [--coordinator HOST:PORT] submit JOB-FLAGS [--wait] [--json]
  kiln [--coordinator HOST:PORT] watch JOB
  kiln [--coordinator HOST:PORT] jobs [--json]
  kiln [--coordinator HOST:PORT] results JOB [--json]
  kiln [--coordinator HOST:PORT] export JOB [--out DIR] [--json]
  kiln [--coordinator HOST:PORT] cancel JOB
  kiln [--coordinator HOST:PORT] workers [--json]
  kiln tune --local JOB-FLAGS [--data-dir DIR] [--json]
  kiln token create --role submit|worker|admin --name NAME --tokens-file FILE
  kiln help [COMMAND] | kiln COMMAND --help | kiln --version

The coordinator address defaults to $KILN_COORDINATOR, else 127.0.0.1:50051.
A coordinator with TLS and tokens (docs/security.md) needs, before or after COMMAND:
  --tls-ca FILE            the CA that signed its certificate (default $KILN_TLS_CA)
  --token-file FILE        a file whose first line is your token (default $KILN_TOKEN_FILE)
Exit status: 0 success, 1 server error or job failed/cancelled, 2 usage error.
)";

}  // namespace

std::string UsageText(const std::string& command) {
  if (command == "submit")
    return std::string(
               "Usage: kiln [--coordinator HOST:PORT] submit JOB-FLAGS [--wait] [--json]\n\n"
               "Submits a tuning job and prints its id. --wait shows live progress on\n"
               "stderr and prints the results table when the job ends (with --json,\n"
               "only {\"job_id\": ...}). Exit 1 if the job failed or was cancelled.\n\n") +
           kJobFlags;
  if (command == "tune")
    return std::string(
               "Usage: kiln tune --local JOB-FLAGS [--data-dir DIR] [--json]\n\n"
               "Runs a coordinator and a CPU worker inside this process, tunes the job\n"
               "with live progress and prints the results (--json: the results object).\n"
               "Records are kept in DIR (default ./kiln-data).\n\n") +
           kJobFlags;
  if (command == "watch")
    return "Usage: kiln [--coordinator HOST:PORT] watch JOB\n\n"
           "Shows the live progress of a job until it ends, then its final state.\n"
           "Reconnects if the coordinator restarts.\n";
  if (command == "jobs")
    return "Usage: kiln [--coordinator HOST:PORT] jobs [--json]\n\n"
           "Lists jobs: ID, STATE, CHIP, WORKLOAD/MODEL, TRIALS, BEST (µs), CREATED.\n";
  if (command == "results")
    return "Usage: kiln [--coordinator HOST:PORT] results JOB [--json]\n\n"
           "Prints the best configuration per task with its timing, the baseline measured\n"
           "beside it and the speedup. --json prints one JSON object (see docs).\n";
  if (command == "export")
    return "Usage: kiln [--coordinator HOST:PORT] export JOB [--out DIR] [--json]\n\n"
           "Writes the job's best kernels as self-contained sources, one file per task (the\n"
           "knobs as #defines, how to build it in its header), and manifest.json (workload,\n"
           "configuration, timing, the chip they were tuned on) into DIR (default\n"
           "kiln-export-JOB), all or nothing; DIR must not exist or be empty.\n";
  if (command == "cancel")
    return "Usage: kiln [--coordinator HOST:PORT] cancel JOB\n\nCancels a job and prints its "
           "new state.\n";
  if (command == "workers")
    return "Usage: kiln [--coordinator HOST:PORT] workers [--json]\n\n"
           "Lists the workers: NAME, ID, CHIP TYPE, MODEL, CORES, STATE, LAST HEARTBEAT, "
           "TRIALS.\n";
  if (command == "token")
    return "Usage: kiln token create --role submit|worker|admin --name NAME --tokens-file FILE\n\n"
           "Makes a random token, appends 'ROLE NAME SHA256-HEX' to FILE (the coordinator's\n"
           "--tokens file, created with mode 0600) and prints the token once, as the last line\n"
           "of stdout. Only its digest is kept: store the token in a file for --token-file.\n"
           "NAME (1..64 characters, no spaces) is who the coordinator sees: submit tokens own\n"
           "the jobs they submit; restart the coordinator to load new tokens.\n";
  return kOverview;
}

std::string VersionText() { return std::string("kiln ") + KILN_VERSION; }

}  // namespace kiln::cli
