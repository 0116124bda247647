// Parsing the kiln command line: subcommand, global flags, and JOB-FLAGS into a JobSpec.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kiln/v1/types.pb.h"

namespace kiln::cli {

inline constexpr char kDefaultCoordinator[] = "127.0.0.1:50051";

// What the user asked for. Filled as far as parsing got, so that errors can point at the
// command's help.
struct Invocation {
  std::string command;      // submit, watch, jobs, results, cancel, workers, tune, token, help
  std::string job_id;       // watch, results, export, cancel
  std::string help_topic;   // `kiln help CMD`
  std::string coordinator;  // HOST:PORT: --coordinator, else KILN_COORDINATOR, else the default
  // --tls-ca and --token-file (main() falls back to KILN_TLS_CA and KILN_TOKEN_FILE).
  std::string tls_ca, token_file;
  // token create --role ROLE --name NAME --tokens-file FILE
  std::string token_role, token_name, tokens_file;
  bool help = false;
  bool version = false;
  bool json = false;
  bool wait = false;
  bool local = false;
  std::string data_dir = "./kiln-data";  // tune --local
  bool local_jobs = false;               // tune --local --jobs: list the local store's jobs
  std::string local_cancel;              // tune --local --cancel JOB
  std::string out;                       // --out: export DIR, report FILE ("": the default)
  bool best = false;                     // export --best: spec's workload and chip name the kernel
  v1::JobSpec spec;                      // submit, tune; knobs, best: workload and chip
  // Model jobs: also sent in spec (phase, batch, context or prefill_tokens).
  std::string phase;
  int batch = 0;
  int context = 0;
};

// --hf-config FILE: regular files only, at most this many bytes (the coordinator's cap on
// JobSpec.hf_config_json, server/validate.h); a config.json is a few KB.
inline constexpr size_t kMaxHfConfigFileBytes = 1 << 20;
absl::StatusOr<std::string> ReadHfConfigFile(const std::string& path);

// Parses the arguments after the program name; flags may come before or after the command.
// `env_coordinator` is KILN_COORDINATOR (null when unset). Errors are InvalidArgument with a
// message meant for the user that names the flag, e.g. "missing --chip (...)"; errors found by
// the workload validator read "INVALID_ARGUMENT: shape: M=0 is out of range; ...".
absl::Status ParseCommandLine(const std::vector<std::string>& args, const char* env_coordinator,
                              Invocation* out);

}  // namespace kiln::cli
