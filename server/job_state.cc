#include "server/job_state.h"

namespace kiln::server {

v1::Trial& JobEntry::AddTrial(v1::Trial t) {
  const std::string id = t.id();
  auto [it, fresh] = trials.insert_or_assign(id, std::move(t));
  v1::Trial& trial = it->second;
  pending.erase(trial.seq());
  leased.erase(trial.seq());
  if (trial.state() == v1::PENDING) pending[trial.seq()] = &trial;
  if (trial.state() == v1::LEASED) leased[trial.seq()] = &trial;
  return trial;
}

void JobEntry::SetState(v1::Trial& t, v1::TrialState state) {
  if (t.state() == v1::PENDING) pending.erase(t.seq());
  if (t.state() == v1::LEASED) leased.erase(t.seq());
  t.set_state(state);
  if (state == v1::PENDING) pending[t.seq()] = &t;
  if (state == v1::LEASED) leased[t.seq()] = &t;
}

void JobEntry::Requeue(v1::Trial& t) {
  SetState(t, v1::PENDING);
  t.set_attempt(t.attempt() + 1);
  t.clear_worker_id();
}

std::vector<std::string> JobEntry::DropPending() {
  std::vector<std::string> ids;
  for (const auto& [seq, t] : pending) ids.push_back(t->id());
  pending.clear();
  for (const std::string& id : ids) trials.erase(id);
  return ids;
}

}  // namespace kiln::server
