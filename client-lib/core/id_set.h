// A set of handle ids of one kind the client keeps for itself (the IPC events it made, the
// executable graphs of captured graphs the app has not destroyed, with the flags they were
// instantiated with), each with a value of its own, which any thread may use.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>

namespace cuwire::client {

class IdSet {
 public:
  void insert(uint64_t id, uint64_t value = 0) {
    std::lock_guard lock(mu_);
    ids_[id] = value;
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
  // False when the id is not there; else its value goes to *value.
  bool find(uint64_t id, uint64_t* value) const {
    std::lock_guard lock(mu_);
    auto it = ids_.find(id);
    if (it == ids_.end()) return false;
    *value = it->second;
    return true;
  }
  void clear() {
    std::lock_guard lock(mu_);
    ids_.clear();
  }

 private:
  mutable std::mutex mu_;
  std::map<uint64_t, uint64_t> ids_;  // guarded by mu_: id -> value
};

}  // namespace cuwire::client
