#include "cli/flags.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <string_view>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "codegen/knob_constraints.h"
#include "codegen/workload.h"
#include "common/daemon.h"
#include "common/flags.h"
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
  kKnobs = 2048,
  kBest = 4096,
  kReport = 1u << 20,  // a high bit: other new commands take the next low ones
};
constexpr unsigned kAll = ~0u;  // every command, present and future
constexpr unsigned kJob = kSubmit | kTune;
// Commands that name a workload and a chip without tuning it (export --best JOB-less).
constexpr unsigned kLookup = kKnobs | kBest | kExport;
constexpr unsigned kRemote =
    kSubmit | kWatch | kJobs | kResults | kCancel | kWorkers | kExport | kReport | kBest;

struct FlagDef {
  const char* name;
  bool takes_value;
  bool repeatable;
  unsigned commands;
};

// The connection flags are accepted (and unused) by the offline `kiln knobs` too, so that a
// wrapper that always passes --coordinator works with every command.
constexpr FlagDef kFlags[] = {
    {"help", false, true, kAll},
    {"version", false, true, kAll},
    {"coordinator", true, false, kRemote | kNone | kKnobs},
    {"tls-ca", true, false, kRemote | kNone | kKnobs},
    {"token-file", true, false, kRemote | kNone | kKnobs},
    {"role", true, false, kToken},
    {"name", true, false, kToken},
    {"tokens-file", true, false, kToken},
    {"json", false, true, kSubmit | kTune | kJobs | kResults | kWorkers | kExport | kKnobs | kBest},
    {"out", true, false, kExport | kReport},
    {"wait", false, true, kSubmit},
    {"local", false, true, kTune},
    {"data-dir", true, false, kTune},
    {"jobs", false, true, kTune},
    {"cancel", true, false, kTune},
    {"op", true, false, kJob | kLookup},
    {"shape", true, false, kJob | kLookup},
    {"model", true, false, kJob},
    {"hf-config", true, false, kJob},
    {"dtype", true, false, kJob | kLookup},
    {"epilogue", true, false, kJob | kLookup},
    {"phase", true, false, kJob},
    {"batch", true, false, kJob},
    {"context", true, false, kJob},
    {"chip", true, false, kJob | kLookup},
    {"budget", true, false, kJob},
    {"max-seconds", true, false, kJob},
    {"strategy", true, false, kJob},
    {"seed", true, false, kJob},
    {"priority", true, false, kJob},
    {"pin", true, true, kJob | kKnobs},
    {"exclude", true, true, kJob | kKnobs},
    {"range", true, true, kJob | kKnobs},
    {"best", false, true, kExport},
    {"extend", true, false, kSubmit},
    {"no-step-probe", false, true, kJob},
};

const std::map<std::string, unsigned>& Commands() {
  static const auto* commands = new std::map<std::string, unsigned>{
      {"submit", kSubmit},   {"tune", kTune},     {"watch", kWatch},     {"jobs", kJobs},
      {"results", kResults}, {"cancel", kCancel}, {"workers", kWorkers}, {"export", kExport},
      {"report", kReport},   {"help", kHelpCmd},  {"token", kToken},     {"knobs", kKnobs},
      {"best", kBest}};
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

// KNOB=REST with a knob name: splits, or says what `flag` expects (`form`, e.g. KNOB=V1,V2).
absl::Status SplitKnob(const std::string& flag, const std::string& form, const std::string& arg,
                       std::string* knob, std::string* rest) {
  size_t eq = arg.find('=');
  *knob = arg.substr(0, eq);
  bool name_ok = !knob->empty() && !absl::ascii_isdigit((*knob)[0]);
  for (char c : *knob) name_ok = name_ok && (absl::ascii_isalnum(c) || c == '_');
  if (eq == std::string::npos || !name_ok)
    return Bad("--", flag, ": expected ", form, ", got '", ShortQuote(arg), "'");
  *rest = arg.substr(eq + 1);
  return absl::OkStatus();
}

// --exclude KNOB=V1,V2 (repeatable; values of one knob add up).
absl::Status ParseExcludes(const std::vector<std::string>& args, v1::JobSpec* spec) {
  const char* form = "KNOB=V1,V2,... (e.g. --exclude PACK=0)";
  for (const std::string& arg : args) {
    std::string knob, rest;
    RETURN_IF_ERROR(SplitKnob("exclude", form, arg, &knob, &rest));
    std::vector<int64_t> values;
    for (absl::string_view part : absl::StrSplit(rest, ',')) {
      int64_t v;
      if (!absl::SimpleAtoi(part, &v))
        return Bad("--exclude: expected ", form, ", got '", ShortQuote(arg), "'");
      values.push_back(v);
    }
    auto* kept = (*spec->mutable_exclude())[knob].mutable_values();
    for (int64_t v : values)
      if (std::find(kept->begin(), kept->end(), v) == kept->end()) kept->Add(v);
  }
  return absl::OkStatus();
}

// --range KNOB=LO..HI (inclusive; LO or HI may be left out: KNOB=..HI, KNOB=LO..).
absl::Status ParseRanges(const std::vector<std::string>& args, v1::JobSpec* spec) {
  const char* form = "KNOB=LO..HI (e.g. --range KC=128..512)";
  for (const std::string& arg : args) {
    std::string knob, rest;
    RETURN_IF_ERROR(SplitKnob("range", form, arg, &knob, &rest));
    size_t dots = rest.find("..");
    int64_t lo = INT64_MIN, hi = INT64_MAX;
    std::string lo_text = rest.substr(0, dots);
    std::string hi_text = dots == std::string::npos ? "" : rest.substr(dots + 2);
    if (dots == std::string::npos || (lo_text.empty() && hi_text.empty()) ||
        (!lo_text.empty() && !absl::SimpleAtoi(lo_text, &lo)) ||
        (!hi_text.empty() && !absl::SimpleAtoi(hi_text, &hi)))
      return Bad("--range: expected ", form, ", got '", ShortQuote(arg), "'");
    if (lo > hi) return Bad("--range ", ShortQuote(arg), ": LO must not exceed HI");
    if (spec->range().count(knob)) return Bad("--range: knob ", knob, " given twice");
    v1::KnobRange& r = (*spec->mutable_range())[knob];
    r.set_lo(lo);
    r.set_hi(hi);
  }
  return absl::OkStatus();
}

// The workload of --op/--shape (with --dtype, --epilogue), validated as submit validates it.
absl::Status ParseOpWorkload(const Values& v, v1::Workload* out) {
  bool op = v.count("op"), shape = v.count("shape");
  if (!op && !shape)
    return Bad("missing --op and --shape (e.g. --op gemm --shape M=8,N=4096,K=4096)");
  if (!op) return Bad("missing --op (the operator of --shape, e.g. --op gemm)");
  if (!shape) return Bad("missing --shape (e.g. --shape M=8,N=4096,K=4096)");
  auto workload = codegen::ParseWorkload(Get(v, "op"), Get(v, "shape"), Get(v, "dtype"));
  if (!workload.ok()) return Bad("INVALID_ARGUMENT: ", workload.status().message());
  workload->set_epilogue(Get(v, "epilogue"));
  absl::Status valid = codegen::ValidateWorkload(*workload);
  if (!valid.ok()) return Bad("INVALID_ARGUMENT: ", valid.message());
  *out = *std::move(workload);
  return absl::OkStatus();
}

// kiln knobs / best / export --best: a workload and a chip, nothing to tune (knobs: with the
// constraints to try, checked as submit checks them).
absl::Status ParseLookupFlags(const Values& v, Invocation* inv) {
  v1::JobSpec& spec = inv->spec;
  RETURN_IF_ERROR(ParseOpWorkload(v, spec.mutable_workload()));
  if (!v.count("chip") || Get(v, "chip").empty())
    return Bad("missing --chip (a chip-type label prefix, e.g. --chip cpu)");
  spec.set_chip(Get(v, "chip"));
  if (v.count("pin")) RETURN_IF_ERROR(ParsePins(v.at("pin"), &spec));
  if (v.count("exclude")) RETURN_IF_ERROR(ParseExcludes(v.at("exclude"), &spec));
  if (v.count("range")) RETURN_IF_ERROR(ParseRanges(v.at("range"), &spec));
  if (spec.pin_size() || spec.exclude_size() || spec.range_size()) {
    auto tmpl =
        codegen::FindTemplate(spec.workload(), spec.chip().substr(0, spec.chip().find('-')));
    if (tmpl.ok())
      RETURN_IF_ERROR(codegen::CheckKnobConstraints(spec, spec.workload(), **tmpl,
                                                    codegen::ConstraintNaming::kFlags));
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
  const bool extend = v.count("extend") > 0;
  if (extend) {  // JOB's own workload, chip and constraints: the coordinator copies them
    for (const char* flag :
         {"op", "shape", "model", "hf-config", "dtype", "epilogue", "phase", "batch", "context",
          "chip", "pin", "exclude", "range", "no-step-probe"})
      if (v.count(flag))
        return Bad("--extend JOB continues JOB's own workload, chip and constraints; leave out --",
                   flag);
    spec.set_extend_job_id(Get(v, "extend"));
    if (spec.extend_job_id().empty()) return Bad("--extend: expected a job id (see 'kiln jobs')");
  } else if (model) {
    if (v.count("epilogue"))
      return Bad("--epilogue applies to --op jobs; a model's epilogues come from its graph");
    RETURN_IF_ERROR(ParseModelFlags(v, inv));
    spec.set_no_step_probe(v.count("no-step-probe") > 0);
  } else {
    if (!op && !shape)
      return Bad(
          "missing --op and --shape (e.g. --op gemm --shape M=8,N=4096,K=4096), "
          "or --model / --hf-config");
    if (!op) return Bad("missing --op (the operator of --shape, e.g. --op gemm)");
    if (!shape) return Bad("missing --shape (e.g. --shape M=8,N=4096,K=4096)");
    for (const char* flag : {"phase", "batch", "context", "no-step-probe"})
      if (v.count(flag)) return Bad("--", flag, " applies to model jobs (--model or --hf-config)");
    auto workload = codegen::ParseWorkload(Get(v, "op"), Get(v, "shape"), Get(v, "dtype"));
    if (!workload.ok()) return Bad("INVALID_ARGUMENT: ", workload.status().message());
    workload->set_epilogue(Get(v, "epilogue"));
    absl::Status valid = codegen::ValidateWorkload(*workload);
    if (!valid.ok()) return Bad("INVALID_ARGUMENT: ", valid.message());
    *spec.mutable_workload() = *workload;
  }
  if (!extend && (!v.count("chip") || Get(v, "chip").empty()))
    return Bad("missing --chip (a chip-type label prefix, e.g. --chip cpu)");
  spec.set_chip(Get(v, "chip"));
  int budget = 64;
  // The coordinator's cap (kMaxBudgetTrials, server/validate.h), refused here as a usage error.
  if (v.count("budget")) RETURN_IF_ERROR(ParseInt("budget", Get(v, "budget"), 1, 100000, &budget));
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
  if (v.count("exclude")) RETURN_IF_ERROR(ParseExcludes(v.at("exclude"), &spec));
  if (v.count("range")) RETURN_IF_ERROR(ParseRanges(v.at("range"), &spec));
  // Checked against the operator's knob space now, as the coordinator checks them, so that a
  // value no chip has is refused at once naming the rule (a model's operators: the coordinator).
  if (spec.has_workload() && (spec.pin_size() || spec.exclude_size() || spec.range_size())) {
    auto tmpl =
        codegen::FindTemplate(spec.workload(), spec.chip().substr(0, spec.chip().find('-')));
    if (tmpl.ok())
      RETURN_IF_ERROR(codegen::CheckKnobConstraints(spec, spec.workload(), **tmpl,
                                                    codegen::ConstraintNaming::kFlags));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseCommandLine(const std::vector<std::string>& args, const char* env_coordinator,
                              Invocation* inv) {
  Values values;
  std::vector<kiln::Flag> flags;
  for (const FlagDef& def : kFlags) {
    const std::string name = def.name;
    flags.push_back({"--" + name, def.takes_value ? kiln::Flag::kValue : kiln::Flag::kSwitch,
                     [&values, name](const std::string& value) {
                       values[name].push_back(value);
                       return std::string();
                     },
                     /*stop=*/false, def.repeatable});
  }
  flags.push_back({"-h", kiln::Flag::kSwitch, [&values](const std::string&) {
                     values["help"].push_back("");
                     return std::string();
                   }});
  std::vector<std::string> positional;
  std::optional<kiln::FlagError> error = kiln::ParseFlags(args, flags, &positional);
  // The first command named, even after an error or before an unknown one: main()'s error
  // message points at its help.
  for (const std::string& arg : positional)
    if (inv->command.empty() && Commands().count(arg)) inv->command = arg;
  if (error) return Bad(error->message);
  inv->help = inv->help || values.count("help");
  inv->version = values.count("version") > 0;
  if (positional.empty()) {
    if (inv->help || inv->version) return absl::OkStatus();
    return Bad("missing command; commands: ",
               "submit, watch, jobs, results, best, export, "
               "report, cancel, workers, knobs, tune, token, agent");
  }
  auto command = Commands().find(positional[0]);
  if (command == Commands().end())
    return Bad("unknown command '", positional[0],
               "'; commands: submit, watch, jobs, results, best, export, report, cancel, workers, "
               "knobs, tune, token, agent");
  inv->command = command->first;
  unsigned bit = command->second;
  for (const auto& [name, unused] : values)
    if (!(FindFlag(name)->commands & bit))
      return Bad("--", name, " does not apply to 'kiln ", inv->command, "'");
  if (inv->help || inv->version) return absl::OkStatus();
  // export --best names a workload and a chip instead of a job (the best known kernel's job).
  const bool export_best = bit == kExport && values.count("best");
  bool takes_job = (bit & (kWatch | kResults | kCancel | kExport | kReport)) && !export_best;
  if (bit == kExport && !export_best)  // the workload flags are export --best's alone
    for (const char* flag : {"op", "shape", "dtype", "epilogue", "chip"})
      if (values.count(flag)) return Bad("--", flag, " applies to 'kiln export --best' (no JOB)");
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
  if (bit & (kExport | kReport)) {
    inv->out = values.count("out") ? Get(values, "out") : "";
    if (values.count("out") && inv->out.empty())
      return Bad("--out: expected a ", bit == kReport ? "file" : "directory");
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
    if (values.count("jobs") || values.count("cancel")) {  // the local store, no new job
      if (values.count("jobs") && values.count("cancel"))
        return Bad("--jobs and --cancel are exclusive");
      for (const char* flag : {"op", "shape", "model", "hf-config", "chip"})
        if (values.count(flag))
          return Bad("--", flag, " does not apply to 'kiln tune --local --jobs/--cancel'");
      inv->local_jobs = values.count("jobs") > 0;
      inv->local_cancel = Get(values, "cancel");
      if (values.count("cancel") && inv->local_cancel.empty())
        return Bad("--cancel: expected a job id (see 'kiln tune --local --jobs')");
      return absl::OkStatus();
    }
  }
  if (bit & kJob) return ParseJobFlags(values, inv);
  inv->best = export_best;
  if (bit & (kKnobs | kBest) || export_best) return ParseLookupFlags(values, inv);
  return absl::OkStatus();
}

}  // namespace kiln::cli
