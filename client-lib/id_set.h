// A set of handle ids of one kind the client keeps for itself (the IPC events it made, the
// executable graphs of captured graphs the app has not destroyed), which any thread may use.
#pragma once

#include <cstdint>
#include <mutex>
#include <set>

namespace cuwire::client {

class IdSet {
 public:
  void insert(uint64_t id) {
    std::lock_guard lock(mu_);
    ids_.insert(id);
  }
  // False when the id was not there.
  bool erase(uint64_t id) {
    std::lock_guard lock(mu_);
    return ids_.erase(id) != 0;
  }
  bool contains(uint64_t id) const {
    std::lock_guard lock(mu_);
    return ids_.count(id) != 0;
  }
  void clear() {
    std::lock_guard lock(mu_);
    ids_.clear();
  }

 private:
  mutable std::mutex mu_;
  std::set<uint64_t> ids_;  // guarded by mu_
};

}  // namespace cuwire::client
