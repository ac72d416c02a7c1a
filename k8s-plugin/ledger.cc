#include "k8s-plugin/ledger.h"

#include <spdlog/fmt/fmt.h>

#include <algorithm>

namespace cuwire::k8s {

const char* resource_name(Resource r) {
  switch (r) {
    case Resource::kMemory:
      return "cuwire.io/gpu-memory";
    case Resource::kCompute:
      return "cuwire.io/gpu-compute";
    case Resource::kCard:
      return "cuwire.io/gpu";
  }
  return "";
}

const char* socket_name(Resource r) {
  switch (r) {
    case Resource::kMemory:
      return "cuwire-gpu-memory.sock";
    case Resource::kCompute:
      return "cuwire-gpu-compute.sock";
    case Resource::kCard:
      return "cuwire-gpu.sock";
  }
  return "";
}

const char* short_name(Resource r) {
  switch (r) {
    case Resource::kMemory:
      return "memory";
    case Resource::kCompute:
      return "compute";
    case Resource::kCard:
      return "gpu";
  }
  return "";
}

namespace {

char prefix(Resource r) {
  return r == Resource::kMemory ? 'm' : r == Resource::kCompute ? 'c' : 'g';
}

// "m17" -> 17 for memory; false for anything else (the kubelet's IDs are not trusted either).
bool parse_id(Resource r, const std::string& id, uint64_t* n) {
  if (id.size() < 2 || id.size() > 12 || id[0] != prefix(r)) return false;
  uint64_t v = 0;
  for (size_t i = 1; i < id.size(); ++i) {
    if (id[i] < '0' || id[i] > '9') return false;
    v = v * 10 + static_cast<uint64_t>(id[i] - '0');
  }
  if (id.size() > 2 && id[1] == '0') return false;  // one spelling per number
  *n = v;
  return true;
}

}  // namespace

void Ledger::set_server(int server, std::vector<GpuRoom> gpus) {
  std::erase_if(gpus_, [&](const GpuRoom& g) { return g.server == server; });
  for (auto& g : gpus) {
    g.server = server;
    gpus_.push_back(std::move(g));
  }
  std::sort(gpus_.begin(), gpus_.end(), [](const GpuRoom& a, const GpuRoom& b) {
    return a.server != b.server ? a.server < b.server : a.index < b.index;
  });
}

void Ledger::set_health(int server, bool healthy) {
  for (auto& g : gpus_) {
    if (g.server == server) g.healthy = healthy;
  }
}

bool Ledger::on(const Grant& g, const GpuRoom& gpu) const {
  return g.server == gpu.server &&
         std::find(g.gpus.begin(), g.gpus.end(), gpu.index) != g.gpus.end();
}

uint64_t Ledger::free_memory(const GpuRoom& gpu, const std::set<std::string>& ignore) const {
  uint64_t used = 0;
  for (const auto& [id, g] : grants_) {
    if (ignore.count(id) || !on(g, gpu)) continue;
    if (g.resource == Resource::kCard) return 0;
    if (g.resource == Resource::kMemory) used += g.amount;
  }
  return gpu.memory_mib > used ? gpu.memory_mib - used : 0;
}

int Ledger::free_compute(const GpuRoom& gpu, const std::set<std::string>& ignore) const {
  int used = 0;
  for (const auto& [id, g] : grants_) {
    if (ignore.count(id) || !on(g, gpu)) continue;
    if (g.resource == Resource::kCard) return 0;
    if (g.resource == Resource::kCompute) used += static_cast<int>(g.amount);
  }
  return std::max(0, gpu.compute - used);
}

bool Ledger::free_card(const GpuRoom& gpu, const std::set<std::string>& ignore) const {
  if (gpu.shared || gpu.compute < 100) return false;
  for (const auto& [id, g] : grants_) {
    if (!ignore.count(id) && on(g, gpu)) return false;
  }
  return true;
}

bool Ledger::amount_of(Resource r, const std::vector<std::string>& devices, uint64_t* amount,
                       std::string* error) const {
  if (devices.empty()) {
    *error = std::string("no ") + resource_name(r) + " devices in the request";
    return false;
  }
  std::map<std::string, std::string> held;  // device -> grant, once, not per device
  for (const auto& [id, g] : grants_) {
    if (g.resource != r) continue;
    for (const auto& d : g.devices) held.emplace(d, id);
  }
  std::set<std::string> seen;
  for (const auto& d : devices) {
    uint64_t n = 0;
    if (!parse_id(r, d, &n)) {
      *error =
          fmt::format("'{}' is not a {} device of this plugin", d.substr(0, 32), resource_name(r));
      return false;
    }
    if (!seen.insert(d).second) {
      *error = "device " + d + " is asked for twice";
      return false;
    }
    if (auto h = held.find(d); h != held.end()) {
      *error = "device " + d + " is already held by grant " + h->second;
      return false;
    }
  }
  const uint64_t count = devices.size();
  switch (r) {
    case Resource::kMemory: {
      *amount = count * options_.memory_unit_mib;
      if (*amount % options_.memory_granularity_mib != 0) {
        *error = std::string(resource_name(r)) + " is granted in multiples of " +
                 std::to_string(options_.memory_granularity_mib) + " MiB; " +
                 std::to_string(*amount) + " MiB asked";
        return false;
      }
      return true;
    }
    case Resource::kCompute:
      *amount = count;
      if (count > 100 || count % static_cast<uint64_t>(options_.compute_granularity) != 0) {
        *error = std::string(resource_name(r)) + " is granted in multiples of " +
                 std::to_string(options_.compute_granularity) + " % up to 100; " +
                 std::to_string(count) + " asked";
        return false;
      }
      return true;
    case Resource::kCard:
      *amount = count;
      return true;
  }
  return false;
}

bool Ledger::place(Resource r, uint64_t amount, int* server, std::vector<int>* gpus,
                   std::string* error, uint64_t extra_memory_mib, int extra_compute,
                   const std::set<std::string>& ignore, int only_server) const {
  gpus->clear();
  if (r == Resource::kCard) {
    std::map<int, std::vector<int>> free;
    for (const auto& g : gpus_) {
      if (g.healthy && (only_server < 0 || g.server == only_server) && free_card(g, ignore))
        free[g.server].push_back(g.index);
    }
    for (auto& [s, list] : free) {
      if (list.size() >= amount) {
        *server = s;
        gpus->assign(list.begin(), list.begin() + static_cast<long>(amount));
        return true;
      }
    }
    *error = "no gpu-server has " + std::to_string(amount) + " whole GPU(s) free";
    return false;
  }
  const uint64_t memory = (r == Resource::kMemory ? amount : 0) + extra_memory_mib;
  const int compute = (r == Resource::kCompute ? static_cast<int>(amount) : 0) + extra_compute;
  const GpuRoom* best = nullptr;
  uint64_t best_room = 0;
  for (const auto& g : gpus_) {
    if (!g.healthy || (only_server >= 0 && g.server != only_server)) continue;
    const uint64_t m = free_memory(g, ignore);
    const int c = free_compute(g, ignore);
    if (m < memory || c < compute) continue;
    // Spread: the most room of the kind asked for; memory breaks ties for compute.
    const uint64_t room = r == Resource::kCompute ? static_cast<uint64_t>(c) << 40 | m : m;
    if (!best || room > best_room) {
      best = &g;
      best_room = room;
    }
  }
  if (!best) {
    uint64_t most_memory = 0;
    int most_compute = 0;
    for (const auto& g : gpus_) {
      if (!g.healthy || (only_server >= 0 && g.server != only_server)) continue;
      most_memory = std::max(most_memory, free_memory(g, ignore));
      most_compute = std::max(most_compute, free_compute(g, ignore));
    }
    *error = "no GPU has room for";
    if (memory) error->append(" ").append(std::to_string(memory)).append(" MiB");
    if (memory && compute) error->append(" and");
    if (compute) error->append(" ").append(std::to_string(compute)).append(" % of compute");
    *error += " (the most free on one GPU: " + std::to_string(most_memory) + " MiB, " +
              std::to_string(most_compute) + " %)";
    return false;
  }
  *server = best->server;
  gpus->push_back(best->index);
  return true;
}

void Ledger::add(const Grant& g) { grants_[g.id] = g; }

std::optional<Grant> Ledger::remove(const std::string& id) {
  auto it = grants_.find(id);
  if (it == grants_.end()) return std::nullopt;
  Grant g = std::move(it->second);
  grants_.erase(it);
  return g;
}

Grant* Ledger::find(const std::string& id) {
  auto it = grants_.find(id);
  return it == grants_.end() ? nullptr : &it->second;
}

const Grant* Ledger::holder(Resource r, const std::string& device) const {
  for (const auto& [id, g] : grants_) {
    if (g.resource == r && std::find(g.devices.begin(), g.devices.end(), device) != g.devices.end())
      return &g;
  }
  return nullptr;
}

std::vector<std::pair<std::string, bool>> Ledger::devices(Resource r) const {
  std::vector<std::pair<std::string, bool>> out;
  std::set<uint64_t> held;
  for (const auto& [id, g] : grants_) {
    if (g.resource != r) continue;
    bool healthy = false;
    for (const auto& gpu : gpus_) healthy |= gpu.server == g.server && gpu.healthy;
    for (const auto& d : g.devices) {
      uint64_t n = 0;
      if (parse_id(r, d, &n)) held.insert(n);
      out.emplace_back(d, healthy);
    }
  }
  uint64_t free_units = 0;
  for (const auto& g : gpus_) {
    if (!g.healthy) continue;
    switch (r) {
      case Resource::kMemory: {
        const uint64_t gran = options_.memory_granularity_mib;
        free_units += free_memory(g) / gran * gran / options_.memory_unit_mib;
        break;
      }
      case Resource::kCompute: {
        const int gran = options_.compute_granularity;
        free_units += static_cast<uint64_t>(free_compute(g) / gran * gran);
        break;
      }
      case Resource::kCard:
        free_units += free_card(g) ? 1 : 0;
        break;
    }
  }
  for (uint64_t n = 0; free_units > 0; ++n) {
    if (held.count(n)) continue;
    std::string id(1, prefix(r));
    out.emplace_back(id.append(std::to_string(n)), true);
    --free_units;
  }
  return out;
}

}  // namespace cuwire::k8s
