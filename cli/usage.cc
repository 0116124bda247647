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
  --dtype fp32|bf16|int8|int4  element type (default fp32; bf16: gemm and moe_gemm weights;
                           int8/int4: gemm weights, one fp16 scale per 32 along K)
  --phase decode|prefill, --batch B, --context L   model jobs: the inference step to tune
  --no-step-probe          model jobs: no probe step midway (tasks weighed by their times
                           measured alone, not inside the step; for comparisons)
Where and how:
  --chip PREFIX            chip-type label prefix the job runs on, e.g. cpu (required)
  --budget TRIALS          total trials (default 64, at most 100000)
  --max-seconds S          wall-clock limit (default: none)
  --strategy NAME          search strategy (default: the coordinator's choice)
  --seed S                 random seed (default: the coordinator picks one)
  --pin KNOB=V             fix a knob to a value (repeatable)
  --exclude KNOB=V1,V2     values a knob must not take (repeatable)
  --range KNOB=LO..HI      an inclusive interval a knob's values must lie in (repeatable)
                           (see 'kiln knobs'; all three are checked against the knob space at
                           submit: a value no chip of --chip has is refused at once)
  --priority N             scheduling priority (higher first)
)";

constexpr char kOverview[] = R"(kiln: submit and watch kernel-tuning jobs on a Kiln coordinator.

Usage:
  kiln [--coordinator HOST:PORT] submit JOB-FLAGS [--wait] [--json]
  kiln [--coordinator HOST:PORT] watch JOB
  kiln [--coordinator HOST:PORT] jobs [--json]
  kiln [--coordinator HOST:PORT] results JOB [--json]
  kiln [--coordinator HOST:PORT] export JOB [--out DIR] [--json]
  kiln [--coordinator HOST:PORT] export --best --op OP --shape DIMS --chip PREFIX [--out DIR]
  kiln [--coordinator HOST:PORT] best --op OP --shape DIMS --chip PREFIX [--json]
  kiln [--coordinator HOST:PORT] report JOB [--out FILE]
  kiln [--coordinator HOST:PORT] cancel JOB
  kiln [--coordinator HOST:PORT] workers [--json]
  kiln tune --local JOB-FLAGS [--data-dir DIR] [--json]
  kiln tune --local --jobs [--json] | --cancel JOB [--data-dir DIR]
  kiln knobs --op OP --shape DIMS --chip PREFIX [--json]
  kiln token create --role submit|worker|admin --name NAME --tokens-file FILE
  kiln agent pretrain|... ARGS   the agent's offline tools (runs kiln-agent)
  kiln help [COMMAND] | kiln COMMAND --help | kiln --version

The coordinator address defaults to $KILN_COORDINATOR, else 127.0.0.1:50051. A leader and
its standbys on one PostgreSQL: --coordinator HOST:PORT,HOST:PORT (calls follow the leader).
A coordinator with TLS and tokens (docs/security.md) needs, before or after COMMAND:
  --tls-ca FILE            the CA that signed its certificate (default $KILN_TLS_CA)
  --token-file FILE        a file whose first line is your token (default $KILN_TOKEN_FILE)
Exit status: 0 success; 1 runtime failure (coordinator unreachable or failing, job
FAILED/CANCELLED, nothing found, files not written); 2 usage error (a flag, value or job
spec refused, by kiln or by the coordinator as INVALID_ARGUMENT).
)";

}  // namespace

std::string UsageText(const std::string& command) {
  if (command == "submit")
    return std::string(
               "Usage: kiln [--coordinator HOST:PORT] submit JOB-FLAGS [--wait] [--json]\n"
               "       kiln [--coordinator HOST:PORT] submit --extend JOB [--budget N] [--wait]\n\n"
               "Submits a tuning job and prints its id. --wait shows live progress on\n"
               "stderr and prints the results table when the job ends (with --json, the\n"
               "results object, as 'kiln results --json'). Exit 1 if the job failed or was\n"
               "cancelled, 2 if the spec is refused.\n"
               "Every task first times the best known configurations of its workload on its\n"
               "chip type again, then spends the budget on new ones; --extend JOB continues\n"
               "a finished job (its workload, chip and pins; its best configurations first).\n"
               "The results say how much came from earlier jobs.\n\n") +
           kJobFlags;
  if (command == "tune")
    return std::string(
               "Usage: kiln tune --local JOB-FLAGS [--data-dir DIR] [--json]\n"
               "       kiln tune --local --jobs [--json] | --cancel JOB [--data-dir DIR]\n\n"
               "Runs a coordinator and a CPU worker inside this process, tunes the job\n"
               "with live progress and prints the results (--json: the results object).\n"
               "Ctrl-C cancels the job (its results so far are printed); a second Ctrl-C\n"
               "quits at once. Records are kept in DIR (default ./kiln-data): --jobs lists\n"
               "its jobs, --cancel JOB cancels one left unfinished there.\n\n") +
           kJobFlags;
  if (command == "watch")
    return "Usage: kiln [--coordinator HOST:PORT] watch JOB\n\n"
           "Shows the live progress of a job until it ends, then its final state.\n"
           "Reconnects if the coordinator restarts.\n";
  if (command == "jobs")
    return "Usage: kiln [--coordinator HOST:PORT] jobs [--json]\n\n"
           "Lists jobs: ID, STATE, CHIP, WORKLOAD/MODEL, TRIALS, BEST (µs), CREATED.\n"
           "A model job's BEST is its tokens/s. A job no live worker can run is listed\n"
           "under the table with why (\"job ID waiting: no live worker matches ...\").\n";
  if (command == "results")
    return "Usage: kiln [--coordinator HOST:PORT] results JOB [--json]\n\n"
           "Prints the best configuration per task with its timing, the baseline measured\n"
           "beside it and the speedup. --json prints one JSON object (see docs).\n";
  if (command == "export")
    return "Usage: kiln [--coordinator HOST:PORT] export JOB [--out DIR] [--json]\n\n"
           "Writes the job's best kernels as self-contained sources, one file per task (the\n"
           "knobs as #defines, how to build it in its header), and manifest.json (workload,\n"
           "configuration, timing, the chip they were tuned on) into DIR (default\n"
           "kiln-export-JOB), all or nothing; DIR must not exist or be empty. CPU kernels\n"
           "also come as a library: kiln_kernels.h (one documented C function per kernel,\n"
           "its prepack step where it takes packed weights), a CMakeLists.txt building them\n"
           "with one shared thread pool and kiln_kernels_selftest, and a README.\n"
           "export --best --op OP --shape DIMS --chip PREFIX (no JOB) exports the best known\n"
           "kernel of that workload (see 'kiln best') from the job that measured it.\n";
  if (command == "agent")
    return "Usage: kiln agent COMMAND [ARGS]\n\n"
           "Runs kiln-agent (found next to kiln or on PATH) with COMMAND and ARGS: the\n"
           "agent's offline tools, e.g. pretrain; 'kiln agent --help' lists them.\n";
  if (command == "best")
    return "Usage: kiln [--coordinator HOST:PORT] best --op OP --shape DIMS --chip PREFIX\n"
           "                                             [--dtype D] [--epilogue E] [--json]\n\n"
           "Prints the best known kernel of the workload on the chip types starting with\n"
           "PREFIX, from the tuning database (every job's measurements): its configuration,\n"
           "median (µs), GFLOP/s, the job it came from and the chip type, then the best of\n"
           "each other matching chip type. Exit 1 when none is known.\n"
           "'kiln export --best' with the same flags exports it.\n";
  if (command == "knobs")
    return "Usage: kiln knobs --op OP --shape DIMS --chip PREFIX [--dtype D] [--epilogue E] "
           "[--json]\n\n"
           "Lists the operator's knobs on the chip kind, their values and meaning, and the\n"
           "rules every configuration obeys, from the kernel templates (no coordinator).\n"
           "For --chip cpu the space is this machine's (vector width, cores, caches); a\n"
           "label such as cpu-x86_64-avx2 fixes the vector width. Use it to write --pin,\n"
           "--exclude and --range.\n";
  if (command == "report")
    return "Usage: kiln [--coordinator HOST:PORT] report JOB [--out FILE]\n\n"
           "Writes the job's report as one self-contained HTML file (default\n"
           "kiln-report-JOB.html; it fetches nothing when viewed): the convergence of each\n"
           "task against its baseline, a roofline of every measured configuration under the\n"
           "chip's measured peak and bandwidth, for model jobs each operator's share of the\n"
           "step and tokens/s against the memory bound, the refused trials by status, and the\n"
           "provenance (chip, toolchains, source hashes of the best kernels, job spec).\n";
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
