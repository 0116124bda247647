// kiln-agent: the agent's offline tools. `kiln-agent pretrain` (also `kiln agent pretrain`)
// trains a checkpoint from replay sets or tuning records for jobs to start from.
#include <sqlite3.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "agent/pretrain/pretrain.h"
#include "agent/pretrain/replay_training.h"
#include "agent/strategy.h"
#include "common/flags.h"
#include "hardware/replay/replay_set.h"

namespace {

constexpr char kUsage[] =
    "usage: kiln-agent pretrain --data FILE... [--out PATH] [--cost-steps N] [--policy-steps N]\n"
    "                           [--seed S] [--eval FILE...]\n"
    "  Pre-trains the policy network and cost model for transfer; a job starts from the result\n"
    "  with --strategy policy:NAME, NAME.pt being the file in the coordinator's checkpoint\n"
    "  directory (DATA_DIR/checkpoints, or its --checkpoint-dir); jobs name checkpoints, never\n"
    "  paths.\n"
    "  FILE: a Kernel Tuner cache file (JSON), Kiln tuning records (JSON Lines of\n"
    "  kiln.v1.TuningRecord, or {\"records\": [...]}), or a coordinator's SQLite store (*.db),\n"
    "  whose records train one set per workload and chip type.\n"
    "  --out defaults to $KILN_CHECKPOINT_DIR/pretrained.pt.\n"
    "  --eval: sets not trained on; for each, how well the trained cost model ranks it (rank\n"
    "  accuracy, and where its favourite configurations fall in the set's true order).\n";

using kiln::hardware::ReplaySet;

absl::StatusOr<std::vector<std::shared_ptr<const ReplaySet>>> FromStore(const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    std::string err = db ? sqlite3_errmsg(db) : "cannot open";
    sqlite3_close(db);
    return absl::NotFoundError(absl::StrCat(path, ": ", err));
  }
  sqlite3_stmt* st = nullptr;
  std::vector<kiln::v1::TuningRecord> records;
  absl::Status status;
  if (sqlite3_prepare_v2(db, "SELECT body FROM records", -1, &st, nullptr) != SQLITE_OK) {
    status = absl::InvalidArgumentError(
        absl::StrCat(path, ": not a Kiln store (", sqlite3_errmsg(db), ")"));
  } else {
    while (sqlite3_step(st) == SQLITE_ROW) {
      kiln::v1::TuningRecord r;
      if (r.ParseFromArray(sqlite3_column_blob(st, 0), sqlite3_column_bytes(st, 0)))
        records.push_back(std::move(r));
    }
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
  if (!status.ok()) return status;
  return kiln::hardware::SetsFromRecords(records, 16);
}

int Pretrain(const std::vector<std::string>& args) {
  std::vector<std::string> data, eval;
  std::string out;
  kiln::agent::PretrainOptions o;
  bool help = false;
  // A non-negative number into `dst`.
  auto number = [](const char* flag, auto* dst) {
    return [flag, dst](const std::string& v) -> std::string {
      if (absl::SimpleAtoi(v, dst) && *dst >= 0) return "";
      return absl::StrCat(flag, " needs a non-negative number, got '", v, "'");
    };
  };
  const std::vector<kiln::Flag> flags = {
      {"--data", kiln::Flag::kList, [&](const std::string& v) { return data.push_back(v), ""; }},
      {"--eval", kiln::Flag::kList, [&](const std::string& v) { return eval.push_back(v), ""; }},
      {"--out", kiln::Flag::kValue, kiln::StoreText(&out)},
      {"--cost-steps", kiln::Flag::kValue, number("--cost-steps", &o.cost_steps)},
      {"--policy-steps", kiln::Flag::kValue, number("--policy-steps", &o.policy_steps)},
      {"--seed", kiln::Flag::kValue, number("--seed", &o.seed)},
      {"--help", kiln::Flag::kSwitch, kiln::StoreBool(&help, true), true},
      {"-h", kiln::Flag::kSwitch, kiln::StoreBool(&help, true), true}};
  if (auto error = kiln::ParseFlags(args, flags)) {
    std::fprintf(stderr, "kiln-agent pretrain: %s\n%s", error->message.c_str(), kUsage);
    return 2;
  }
  if (help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (data.empty()) {
    std::fprintf(stderr, "kiln-agent pretrain: --data needs at least one file\n%s", kUsage);
    return 2;
  }
  if (out.empty()) {
    if (kiln::agent::CheckpointDirectory().empty()) {
      std::fprintf(stderr, "kiln-agent pretrain: give --out PATH (or set $KILN_CHECKPOINT_DIR)\n");
      return 2;
    }
    out = kiln::agent::CheckpointDirectory() + "/pretrained.pt";
  }
  // Every file of `paths` as training sets (a store gives one per workload and chip type).
  auto load = [](const std::vector<std::string>& paths,
                 std::vector<kiln::agent::TrainingSet>* sets) {
    for (const auto& path : paths) {
      auto loaded = absl::EndsWith(path, ".db")
                        ? FromStore(path)
                        : [&]() -> absl::StatusOr<std::vector<std::shared_ptr<const ReplaySet>>> {
        auto s = kiln::hardware::LoadReplaySet(path);
        if (!s.ok()) return s.status();
        return std::vector<std::shared_ptr<const ReplaySet>>{*s};
      }();
      if (!loaded.ok()) {
        std::fprintf(stderr, "kiln-agent pretrain: %s\n",
                     std::string(loaded.status().message()).c_str());
        return false;
      }
      for (const auto& s : *loaded) sets->push_back(kiln::agent::TrainingSetOf(*s));
    }
    return true;
  };
  std::vector<kiln::agent::TrainingSet> sets, held_out;
  if (!load(data, &sets) || !load(eval, &held_out)) return 1;
  auto status = kiln::agent::Pretrain(sets, o, out, &std::cerr, held_out);
  if (!status.ok()) {
    std::fprintf(stderr, "kiln-agent pretrain: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
    std::fputs(kUsage, args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "pretrain") return Pretrain({args.begin() + 1, args.end()});
  std::fprintf(stderr, "kiln-agent: unknown command %s\n%s", args[0].c_str(), kUsage);
  return 2;
}
