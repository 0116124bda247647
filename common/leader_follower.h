// --coordinator as one address or a comma-separated list: a coordinator leading a PostgreSQL
// database and its standbys (server/coordinator_server.h). Calls go to the current address; one
// answered UNAVAILABLE (that coordinator is down, or stands by) moves the caller on to the next
// (Failover), so workers and clients follow the leader through a failover.
#pragma once

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace kiln {

template <typename Service>
class LeaderFollower {
 public:
  using Stub = typename Service::Stub;
  using MakeChannel = std::function<std::shared_ptr<grpc::Channel>(const std::string& address)>;

  LeaderFollower(const std::string& list, MakeChannel make) : make_(std::move(make)) {
    for (absl::string_view a : absl::StrSplit(list, ',', absl::SkipWhitespace()))
      addresses_.emplace_back(absl::StripAsciiWhitespace(a));
    if (addresses_.empty()) addresses_.push_back(list);
    stubs_.resize(addresses_.size());
  }

  size_t size() const { return addresses_.size(); }

  // The stub of the address in use now (made on first use).
  std::shared_ptr<Stub> stub() {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stubs_[at_]) stubs_[at_] = Service::NewStub(make_(addresses_[at_]));
    return stubs_[at_];
  }

  std::string address() {
    std::lock_guard<std::mutex> lock(mu_);
    return addresses_[at_];
  }

  // `used` was answered UNAVAILABLE: the next address is used from now on, unless another caller
  // has moved on already. With one address, nothing changes.
  void Failover(const std::shared_ptr<Stub>& used) {
    std::lock_guard<std::mutex> lock(mu_);
    if (stubs_[at_] == used) at_ = (at_ + 1) % addresses_.size();
  }

 private:
  MakeChannel make_;
  std::mutex mu_;
  std::vector<std::string> addresses_;
  std::vector<std::shared_ptr<Stub>> stubs_;
  size_t at_ = 0;
};

}  // namespace kiln
