#include "cli/flags.h"

#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <string_view>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "codegen/workload.h"
#include "common/daemon.h"
#include "common/status.h"
#include "common/text.h"

namespace kiln::cli {
namespace {

enum Cmd : unsigned {
  kSubmit = 1,
  kTune = 2,
  kWatch = 4,
  kJobs = 8,
  kResults = 16,
  kCancel = 32,
  kWorkers = 64,
  kHelpCmd = 128,
  kNone = 256,
  kExport = 512,
  kToken = 1024,
};
constexpr unsigned kAll = 2047;
constexpr unsigned kJob = kSubmit | kTune;
constexpr unsigned kRemote = kSubmit | kWatch | kJobs | kResults | kCancel | kWorkers | kExport;

struct FlagDef {
  const char* name;
  bool takes_value;
  bool repeatable;
  unsigned commands;
};

constexpr FlagDef kFlags[] = {
    {"help", false, true, kAll},
    {"version", false, true, kAll},
    {"coordinator", true, false, kRemote | kNone},
    {"tls-ca", true, false, kRemote | kNone},
    {"token-file", true, false, kRemote | kNone},
    {"role", true, false, kToken},
    {"name", true, false, kToken},
    {"tokens-file", true, false, kToken},
    {"json", false, true, kSubmit | kTune | kJobs | kResults | kWorkers | kExport},
    {"out", true, false, kExport},
    {"wait", false, true, kSubmit},
    {"local", false, true, kTune},
    {"data-dir", true, false, kTune},
    {"op", true, false, kJob},
    {"shape", true, false, kJob},
    {"model", true, false, kJob},
    {"hf-config", true, false, kJob},
    {"dtype", true, false, kJob},
    {"epilogue", true, false, kJob},
    {"phase", true, false, kJob},
    {"batch", true, false, kJob},
    {"context", true, false, kJob},
    {"chip", true, false, kJob},
    {"budget", true, false, kJob},
    {"max-seconds", true, false, kJob},
    {"strategy", true, false, kJob},
    {"seed", true, false, kJob},
    {"priority", true, false, kJob},
    {"pin", true, true, kJob},
};

const std::map<std::string, unsigned>& Commands() {
  static const auto* commands = new std::map<std::string, unsigned>{
      {"submit", kSubmit},   {"tune", kTune},     {"watch", kWatch},     {"jobs", kJobs},
      {"results", kResults}, {"cancel", kCancel}, {"workers", kWorkers}, {"export", kExport},
      {"help", kHelpCmd},    {"token", kToken}};
  return *commands;
}

const FlagDef* FindFlag(std::string_view name) {
  for (const FlagDef& f : kFlags)
    if (name == f.name) return &f;
  return nullptr;
}

template <typename... Parts>
absl::Status Bad(const Parts&... parts) {
  return absl::InvalidArgumentError(absl::StrCat(parts...));
}

template <typename T>
absl::Status ParseInt(const std::string& flag, const std::string& text, T min, T max, T* out) {
  T value;
  if (!absl::SimpleAtoi(text, &value) || value < min || value > max)
    return Bad("--", flag, ": expected an integer in ", min, "..", max, ", got '", text, "'");
  *out = value;
  return absl::OkStatus();
}

using Values = std::map<std::string, std::vector<std::string>>;

std::string Get(const Values& v, const std::string& name) {
  auto it = v.find(name);
  return it == v.end() ? "" : it->second.back();
}

absl::Status ParsePins(const std::vector<std::string>& pins, v1::JobSpec* spec) {
  for (const std::string& pin : pins) {
    size_t eq = pin.find('=');
    std::string knob = pin.substr(0, eq);
    int64_t value;
    bool name_ok = !knob.empty() && !absl::ascii_isdigit(knob[0]);
    for (char c : knob) name_ok = name_ok && (absl::ascii_isalnum(c) || c == '_');
    if (eq == std::string::npos || !name_ok || !absl::SimpleAtoi(pin.substr(eq + 1), &value))
      return Bad("--pin: expected KNOB=INTEGER (e.g. --pin MR=8), got '", pin, "'");
    if (spec->pin().count(knob)) return Bad("--pin: knob ", knob, " pinned twice");
    (*spec->mutable_pin())[knob] = value;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> ReadHfConfigFile(const std::string& path) {
  const std::string shown = ShortQuote(path, 200);
  if (path.empty()) return Bad("--hf-config: expected a file (a HuggingFace config.json)");
  // Only a regular file, and only up to the cap: /dev/zero, a FIFO or a directory would read
  // forever, block or fail obscurely.
  struct stat st;
  if (stat(path.c_str(), &st) != 0)
    return Bad("--hf-config: cannot read '", shown, "': ", std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    return Bad("--hf-config: '", shown, "' is not a regular file (expected a config.json)");
  if (static_cast<uint64_t>(st.st_size) > kMaxHfConfigFileBytes)
    return Bad("--hf-config: '", shown, "' is ", st.st_size, " bytes; a config.json is at most ",
               kMaxHfConfigFileBytes, " (1 MiB)");
  std::ifstream file(path, std::ios::binary);
  if (!file.good()) return Bad("--hf-config: cannot read '", shown, "'");
  std::string text(kMaxHfConfigFileBytes + 1, '\0');
  file.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(file.gcount()));
  if (text.size() > kMaxHfConfigFileBytes)  // it grew since stat
    return Bad("--hf-config: '", shown, "' is larger than ", kMaxHfConfigFileBytes, " bytes");
  return text;
}

namespace {

absl::Status ParseModelFlags(const Values& v, Invocation* inv) {
  bool model = v.count("model"), hf = v.count("hf-config");
  if (model && hf) return Bad("--model and --hf-config are exclusive; give one");
  if (model) {
    inv->spec.set_model(Get(v, "model"));
    if (inv->spec.model().empty()) return Bad("--model: expected a preset name");
  } else {
    // The coordinator cannot read the client's files: the config's text travels in the spec.
    auto text = ReadHfConfigFile(Get(v, "hf-config"));
    if (!text.ok()) return text.status();
    inv->spec.set_hf_config_json(*std::move(text));
  }
  if (v.count("dtype")) {
    auto dtype = codegen::ParseDType(Get(v, "dtype"));
    if (!dtype.ok()) return Bad("--", dtype.status().message());
    inv->spec.set_dtype(*dtype);
  }
  if (v.count("phase")) {
    inv->phase = absl::AsciiStrToLower(Get(v, "phase"));
    if (inv->phase != "decode" && inv->phase != "prefill")
      return Bad("--phase: expected decode or prefill, got '", Get(v, "phase"), "'");
  }
  if (v.count("batch"))
    RETURN_IF_ERROR(ParseInt("batch", Get(v, "batch"), 1, 1 << 20, &inv->batch));
  if (v.count("context"))
    RETURN_IF_ERROR(ParseInt("context", Get(v, "context"), 1, 1 << 24, &inv->context));
  inv->spec.set_phase(inv->phase);
  inv->spec.set_batch(inv->batch);
  if (inv->phase == "prefill")  // --context is the prompt length of a prefill job
    inv->spec.set_prefill_tokens(inv->context);
  else
    inv->spec.set_context(inv->context);
  return absl::OkStatus();
}

absl::Status ParseJobFlags(const Values& v, Invocation* inv) {
  v1::JobSpec& spec = inv->spec;
  bool op = v.count("op"), shape = v.count("shape");
  bool model = v.count("model") || v.count("hf-config");
  if ((op || shape) && model) return Bad("--op/--shape and --model/--hf-config are exclusive");
  if (model) {
    if (v.count("epilogue"))
      return Bad("--epilogue applies to --op jobs; a model's epilogues come from its graph");
    RETURN_IF_ERROR(ParseModelFlags(v, inv));
  } else {
    if (!op && !shape)
      return Bad(
          "missing --op and --shape (e.g. --op gemm --shape M=8,N=4096,K=4096), "
          "or --model / --hf-config");
    if (!op) return Bad("missing --op (the operator of --shape, e.g. --op gemm)");
    if (!shape) return Bad("missing --shape (e.g. --shape M=8,N=4096,K=4096)");
    for (const char* flag : {"phase", "batch", "context"})
      if (v.count(flag)) return Bad("--", flag, " applies to model jobs (--model or --hf-config)");
    auto workload = codegen::ParseWorkload(Get(v, "op"), Get(v, "shape"), Get(v, "dtype"));
    if (!workload.ok()) return Bad("INVALID_ARGUMENT: ", workload.status().message());
    workload->set_epilogue(Get(v, "epilogue"));
    absl::Status valid = codegen::ValidateWorkload(*workload);
    if (!valid.ok()) return Bad("INVALID_ARGUMENT: ", valid.message());
    *spec.mutable_workload() = *workload;
  }
  if (!v.count("chip") || Get(v, "chip").empty())
    return Bad("missing --chip (a chip-type label prefix, e.g. --chip cpu)");
  spec.set_chip(Get(v, "chip"));
  int budget = 64;
  if (v.count("budget")) RETURN_IF_ERROR(ParseInt("budget", Get(v, "budget"), 1, 1000000, &budget));
  spec.set_budget_trials(budget);
  if (v.count("max-seconds")) {
    double s;
    if (!absl::SimpleAtod(Get(v, "max-seconds"), &s) || !std::isfinite(s) || s < 0)
      return Bad("--max-seconds: expected a number of seconds >= 0, got '", Get(v, "max-seconds"),
                 "'");
    spec.set_max_seconds(s);
  }
  spec.set_strategy(Get(v, "strategy"));
  if (v.count("seed")) {
    uint64_t seed = 0;
    RETURN_IF_ERROR(ParseInt<uint64_t>("seed", Get(v, "seed"), 0, UINT64_MAX, &seed));
    spec.set_seed(seed);
  }
  if (v.count("priority")) {
    int priority = 0;
    RETURN_IF_ERROR(ParseInt("priority", Get(v, "priority"), -1000000, 1000000, &priority));
    spec.set_priority(priority);
  }
  if (v.count("pin")) RETURN_IF_ERROR(ParsePins(v.at("pin"), &spec));
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseCommandLine(const std::vector<std::string>& args, const char* env_coordinator,
                              Invocation* inv) {
  Values values;
  std::vector<std::string> positional;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "-h") {
      inv->help = true;
      continue;
    }
    if (arg.size() < 2 || arg.compare(0, 2, "--") != 0 || arg == "--") {
      if (arg.size() > 1 && arg[0] == '-') return Bad("unknown flag ", arg);
      positional.push_back(arg);
      if (inv->command.empty() && Commands().count(arg)) inv->command = arg;
      continue;
    }
    size_t eq = arg.find('=');
    std::string name = arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    const FlagDef* def = FindFlag(name);
    if (!def) return Bad("unknown flag --", name);
    std::string value;
    if (!def->takes_value) {
      if (eq != std::string::npos) return Bad("--", name, " takes no value");
    } else if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
    } else {
      if (i + 1 >= args.size() ||
          (args[i + 1].compare(0, 2, "--") == 0 && FindFlag(args[i + 1].substr(2))))
        return Bad("--", name, " needs a value");
      value = args[++i];
    }
    if (values.count(name) && def->takes_value && !def->repeatable)
      return Bad("--", name, " given more than once");
    values[name].push_back(value);
  }
  inv->help = inv->help || values.count("help");
  inv->version = values.count("version") > 0;
  if (positional.empty()) {
    if (inv->help || inv->version) return absl::OkStatus();
    return Bad("missing command; commands: ",
               "submit, watch, jobs, results, export, cancel, workers, tune, token");
  }
  auto command = Commands().find(positional[0]);
  if (command == Commands().end())
    return Bad("unknown command '", positional[0],
               "'; commands: submit, watch, jobs, results, export, cancel, workers, tune, token");
  inv->command = command->first;
  unsigned bit = command->second;
  for (const auto& [name, unused] : values)
    if (!(FindFlag(name)->commands & bit))
      return Bad("--", name, " does not apply to 'kiln ", inv->command, "'");
  if (inv->help || inv->version) return absl::OkStatus();
  bool takes_job = bit & (kWatch | kResults | kCancel | kExport);
  size_t operands = positional.size() - 1;
  if (bit == kHelpCmd && operands <= 1) {
    inv->help = true;
    inv->help_topic = operands ? positional[1] : "";
    return absl::OkStatus();
  }
  if (bit == kToken) {  // kiln token create --role ROLE --name NAME --tokens-file FILE
    if (operands == 0 || positional[1] != "create")
      return Bad("expected 'kiln token create --role ROLE --name NAME --tokens-file FILE'");
    if (operands > 1) return Bad("unexpected argument '", positional[2], "'");
    for (const char* flag : {"role", "name", "tokens-file"})
      if (Get(values, flag).empty()) return Bad("token create: missing --", flag);
    inv->token_role = Get(values, "role");
    inv->token_name = Get(values, "name");
    inv->tokens_file = Get(values, "tokens-file");
    return absl::OkStatus();
  }
  if (takes_job && operands == 0) return Bad("missing JOB (the job id, see 'kiln jobs')");
  if (operands > (takes_job ? 1u : 0u))
    return Bad("unexpected argument '", positional[takes_job ? 2 : 1], "'");
  if (takes_job) inv->job_id = positional[1];
  inv->json = values.count("json") > 0;
  inv->wait = values.count("wait") > 0;
  inv->local = values.count("local") > 0;
  if (bit == kExport) {
    inv->out = values.count("out") ? Get(values, "out") : "";
    if (values.count("out") && inv->out.empty()) return Bad("--out: expected a directory");
  }
  if (bit & kRemote) {
    std::string flag = "--coordinator";
    inv->coordinator = Get(values, "coordinator");
    if (!values.count("coordinator")) {
      bool from_env = env_coordinator && *env_coordinator;
      inv->coordinator = from_env ? env_coordinator : kDefaultCoordinator;
      flag = from_env ? "KILN_COORDINATOR" : flag;
    }
    auto hp = ParseHostPort(inv->coordinator, flag);
    if (!hp.ok()) return Bad(hp.status().message());
    inv->tls_ca = Get(values, "tls-ca");
    inv->token_file = Get(values, "token-file");
    if (values.count("tls-ca") && inv->tls_ca.empty()) return Bad("--tls-ca: expected a file");
    if (values.count("token-file") && inv->token_file.empty())
      return Bad("--token-file: expected a file");
  }
  if (bit == kTune) {
    if (!inv->local)
      return Bad("'kiln tune' needs --local (to use a running coordinator: kiln submit --wait)");
    if (values.count("data-dir")) inv->data_dir = Get(values, "data-dir");
    if (inv->data_dir.empty()) return Bad("--data-dir: expected a folder");
  }
  if (bit & kJob) return ParseJobFlags(values, inv);
  return absl::OkStatus();
}

}  // namespace kiln::cli
