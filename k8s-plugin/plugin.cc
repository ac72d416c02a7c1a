#include "k8s-plugin/plugin.h"

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "client-lib/core/control_client.h"
#include "k8s-plugin/api/deviceplugin.grpc.pb.h"
#include "k8s-plugin/api/podresources.grpc.pb.h"

namespace cuwire::k8s {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string node_label(const std::string& host) {
  std::string out;
  for (char c : host) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '-';
    out += ok ? c : '-';
  }
  if (out.empty()) return "node";
  if (out.size() <= 40 && out == host) return out;
  // Longer, or changed: two hosts must not come out alike (each plugin would take the other's
  // tenants for its own), so 31 characters of it and 8 hex digits of the whole name.
  uint64_t h = 0xcbf2'9ce4'8422'2325ull;
  for (unsigned char c : host) h = (h ^ c) * 0x100'0000'01b3ull;
  return fmt::format("{}-{:08x}", out.substr(0, 31), static_cast<uint32_t>(h ^ (h >> 32)));
}

namespace {

std::string random_hex(size_t bytes) {
  std::string raw(bytes, '\0');
  size_t got = 0;
  while (got < bytes) {
    const ssize_t n = getrandom(raw.data() + got, bytes - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
  }
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : raw) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

// Writes `text` to `path` through a file beside it and a rename, so a reader (the container's
// client library, through its mount of the directory) sees the old file or the new, whole.
bool write_file(const fs::path& path, const std::string& text, mode_t mode) {
  const fs::path tmp = path.string() + ".new";
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!(out << text)) return false;
  }
  ::chmod(tmp.c_str(), mode);
  std::error_code ec;
  fs::rename(tmp, path, ec);
  return !ec;
}

Resource resource_of(const std::string& s) {
  for (Resource r : kResources) {
    if (s == short_name(r)) return r;
  }
  return Resource::kMemory;
}

}  // namespace

class DeviceService;

struct Plugin::Impl {
  explicit Impl(PluginOptions options) : o(std::move(options)), ledger(o.ledger) {}

  PluginOptions o;
  // Serialises what changes the servers' tenants: allocations, joins, reconciling, reaping.
  std::mutex admin_mu;
  // Guards the ledger and `version`; ListAndWatch streams wait on `changed`.
  mutable std::mutex mu;
  std::condition_variable changed;
  uint64_t version = 0;
  Ledger ledger;
  // grant -> when it was last known held: made, loaded, seen in a container (pod-resources),
  // or the plugin registered anew (a restarted kubelet lists its pods only after a while).
  std::map<std::string, Clock::time_point> seen_at;
  mutable std::map<std::string, Clock::time_point> made_at;  // tenant -> when added (admin_mu)
  std::vector<bool> reachable;                               // per server, at the last refresh

  std::atomic<int> registrations{0};
  std::atomic<bool> stopping{false};
  std::mutex stop_mu;
  std::condition_variable stop_cv;
  std::thread watcher;

  struct Served {
    Resource resource;
    std::unique_ptr<DeviceService> service;
    std::unique_ptr<grpc::Server> server;
    bool registered = false;  // the kubelet took its Register
  };
  std::vector<Served> served;
  ino_t kubelet_inode = 0;
  bool waiting_said = false;  // "waiting for the kubelet" logged for this wait
  bool pod_resources_said = false;

  fs::path grants_dir() const { return fs::path(o.state_dir) / "grants"; }
  std::string prefix() const { return "k8s-" + o.node + "-"; }
  // A tenant this plugin names: the prefix, then a grant id (16 hex digits) or "j" and one
  // (joined). Not merely the prefix: node "a" must not take node "a-2"'s tenants for its own.
  bool ours(const std::string& name) const {
    const std::string p = prefix();
    if (name.rfind(p, 0) != 0) return false;
    std::string rest = name.substr(p.size());
    if (!rest.empty() && rest[0] == 'j') rest.erase(0, 1);
    return rest.size() == 16 && std::all_of(rest.begin(), rest.end(), [](char c) {
             return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
           });
  }
  const std::string& client_address(int server) const {
    const auto& s = o.servers[static_cast<size_t>(server)];
    return s.client.empty() ? s.admin : s.client;
  }

  void bump() {
    {
      std::lock_guard lock(mu);
      ++version;
    }
    changed.notify_all();
  }

  // One admin request to `server`; false with *error on any failure.
  bool admin(int server, const std::string& command, const json& args, json* answer,
             std::string* error) const {
    client::ControlOptions c;
    c.server = o.servers[static_cast<size_t>(server)].admin;
    c.token = o.admin_token;
    c.ca_file = o.ca_file;
    c.client_name = "cuwire-k8s-plugin";
    std::unique_ptr<client::ControlClient> cc;
    if (Status s = client::ControlClient::connect(c, &cc); !s) {
      *error = c.server + ": " + s.message();
      return false;
    }
    std::string body;
    if (Status s = cc->request(command, args.empty() ? "" : args.dump(), &body); !s) {
      *error = c.server + ": " + command + ": " + s.message();
      return false;
    }
    *answer = json::parse(body, nullptr, false);
    if (!answer->is_object()) {
      *error = c.server + ": " + command + " answered with something that is not JSON";
      return false;
    }
    return true;
  }

  bool add_tenant(const Grant& g, const std::string& token, uint64_t memory_mib, int compute,
                  std::string* error) const {
    json args = {{"name", g.tenant}, {"token", token}};
    if (memory_mib) args["memory"] = std::to_string(memory_mib) + "MiB";
    if (compute) args["compute"] = compute;
    std::string gpus;
    for (int i : g.gpus) gpus.append(gpus.empty() ? "" : ",").append(std::to_string(i));
    args["gpus"] = gpus;
    json answer;
    if (!admin(g.server, "tenant-add", args, &answer, error)) return false;
    made_at[g.tenant] = Clock::now();
    return true;
  }

  void remove_tenant(int server, const std::string& name) const {
    made_at.erase(name);
    json answer;
    std::string error;
    if (!admin(server, "tenant-remove", {{"name", name}}, &answer, &error)) {
      // Already gone (a restarted server) is what removing wanted.
      if (error.find("no tenant") == std::string::npos)
        spdlog::warn("removing tenant {}: {}", name, error);
    }
  }

  // The caps of the tenant serving `g` (joined grants: the sum of the grants sharing it).
  void caps_of(const Grant& g, uint64_t* memory_mib, int* compute) const {
    *memory_mib = 0;
    *compute = 0;
    for (const auto& [id, other] : ledger.grants()) {
      if (other.tenant != g.tenant || other.server != g.server) continue;
      if (other.resource == Resource::kMemory) *memory_mib += other.amount;
      if (other.resource == Resource::kCompute) *compute += static_cast<int>(other.amount);
    }
  }

  std::string token_of(const Grant& g) const {
    std::ifstream in(grants_dir() / g.id / "token");
    std::string t;
    std::getline(in, t);
    return t;
  }

  bool save(const Grant& g) const {
    json j = {{"id", g.id},
              {"resource", short_name(g.resource)},
              {"devices", g.devices},
              {"amount", g.amount},
              {"server", o.servers[static_cast<size_t>(g.server)].admin},
              {"gpus", g.gpus},
              {"tenant", g.tenant},
              {"joined", g.joined}};
    return write_file(grants_dir() / g.id / "grant.json", j.dump(), 0600);
  }

  // Ends `gone` (taken out of the ledger already): its tenants, unless a grant still in the
  // ledger shares one, and its directories. Needs admin_mu.
  void release(const std::vector<Grant>& gone, const char* why) {
    for (const auto& g : gone) {
      bool shared = false;
      {
        std::lock_guard lock(mu);
        for (const auto& [id, other] : ledger.grants()) shared |= other.tenant == g.tenant;
      }
      if (!shared) remove_tenant(g.server, g.tenant);
      std::error_code ec;
      fs::remove_all(grants_dir() / g.id, ec);
      spdlog::info("grant {} ({} {}) released: {}", g.id, g.amount, short_name(g.resource), why);
    }
    if (!gone.empty()) bump();
  }

  // --- the kubelet's calls ----------------------------------------------------------------

  grpc::Status allocate(Resource r, const std::vector<std::string>& ids,
                        v1beta1::ContainerAllocateResponse* out) {
    std::lock_guard admin_lock(admin_mu);
    Grant g;
    g.resource = r;
    g.devices = ids;
    std::string error;
    // The kubelet gives out only devices it holds free: grants still holding some of these
    // belong to containers that are over (a finished pod, an init container whose devices go
    // to the next container), whatever pod-resources said at the last look. They end now,
    // with the grants that share their tenant (the same container's).
    {
      std::vector<Grant> over;
      {
        std::lock_guard lock(mu);
        const std::set<std::string> asked(ids.begin(), ids.end());
        std::set<std::string> tenants;
        for (const auto& [id, held] : ledger.grants()) {
          if (held.resource != r) continue;
          for (const auto& d : held.devices) {
            if (asked.count(d)) {
              tenants.insert(held.tenant);
              break;
            }
          }
        }
        for (const auto& [id, held] : ledger.grants()) {
          if (tenants.count(held.tenant)) over.push_back(held);
        }
        for (const auto& o : over) {
          ledger.remove(o.id);
          seen_at.erase(o.id);
        }
      }
      release(over, "the kubelet gave its devices out again");
    }
    {
      std::lock_guard lock(mu);
      if (!ledger.amount_of(r, ids, &g.amount, &error) ||
          !ledger.place(r, g.amount, &g.server, &g.gpus, &error)) {
        spdlog::warn("Allocate {} x{}: {}", resource_name(r), ids.size(), error);
        return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, error);
      }
      do {
        g.id = random_hex(8);
      } while (ledger.find(g.id));
      g.tenant = prefix() + g.id;
      ledger.add(g);
      seen_at[g.id] = Clock::now();
    }
    const std::string token = random_hex(32);
    const fs::path dir = grants_dir() / g.id;
    std::error_code ec;
    fs::create_directories(dir, ec);
    ::chmod(dir.c_str(), 0755);
    // The token and the server it is good for, side by side (client-lib/core/token.h).
    bool ok = !ec && write_file(dir / "token", token + "\n", 0644) &&
              write_file(dir / "server", client_address(g.server) + "\n", 0644) && save(g);
    if (!ok) error = "cannot write the grant's files under " + dir.string();
    if (ok) {
      ok = add_tenant(g, token, r == Resource::kMemory ? g.amount : 0,
                      r == Resource::kCompute ? static_cast<int>(g.amount) : 0, &error);
    }
    if (!ok) {
      fs::remove_all(dir, ec);
      {
        std::lock_guard lock(mu);
        ledger.remove(g.id);
        seen_at.erase(g.id);
      }
      bump();
      spdlog::warn("Allocate {} {}: {}", resource_name(r), g.amount, error);
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, error);
    }
    bump();
    spdlog::info("granted {} {} to tenant {} on {} GPU {}", g.amount, short_name(r), g.tenant,
                 o.servers[static_cast<size_t>(g.server)].admin, g.gpus.front());
    auto& envs = *out->mutable_envs();
    envs["CUWIRE_SERVER"] = client_address(g.server);
    envs["CUWIRE_TOKEN_DIR"] = o.container_token_dir;
    auto* m = out->add_mounts();
    m->set_container_path(o.container_token_dir + "/" + short_name(r));
    m->set_host_path(dir.string());
    m->set_read_only(true);
    if (!o.client_lib_dir.empty()) {
      auto* lib = out->add_mounts();
      lib->set_container_path(o.container_lib_dir);
      lib->set_host_path(o.client_lib_dir);
      lib->set_read_only(true);
      envs["LD_LIBRARY_PATH"] =
          o.container_lib_dir + ":/usr/local/nvidia/lib:/usr/local/nvidia/lib64";
    }
    (*out->mutable_annotations())[std::string("cuwire.io/") + short_name(r) + "-grant"] = g.id;
    return grpc::Status::OK;
  }

  // Which devices each running container holds, from the kubelet's pod-resources API;
  // false when it does not answer.
  bool pod_resources(std::vector<std::map<std::string, std::set<std::string>>>* containers) {
    auto channel =
        grpc::CreateChannel("unix:" + o.pod_resources_socket, grpc::InsecureChannelCredentials());
    auto stub = v1::PodResourcesLister::NewStub(channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::ListPodResourcesRequest req;
    v1::ListPodResourcesResponse resp;
    if (grpc::Status s = stub->List(&ctx, req, &resp); !s.ok()) {
      if (!pod_resources_said) {
        spdlog::warn(
            "the kubelet's pod-resources API ({}) does not answer ({}): a container's "
            "grants are not joined, and the grants of containers gone are not reaped",
            o.pod_resources_socket, s.error_message());
        pod_resources_said = true;
      }
      return false;
    }
    pod_resources_said = false;
    for (const auto& pod : resp.pod_resources()) {
      for (const auto& c : pod.containers()) {
        std::map<std::string, std::set<std::string>> held;
        for (const auto& d : c.devices()) {
          for (const auto& id : d.device_ids()) held[d.resource_name()].insert(id);
        }
        containers->push_back(std::move(held));
      }
    }
    return true;
  }

  grpc::Status pre_start(Resource r, const std::vector<std::string>& ids) {
    std::lock_guard admin_lock(admin_mu);
    std::vector<std::map<std::string, std::set<std::string>>> containers;
    if (ids.empty() || !pod_resources(&containers)) return grpc::Status::OK;
    // The container holding these devices, and every grant of ours it holds.
    std::set<std::string> join;
    {
      std::lock_guard lock(mu);
      for (const auto& held : containers) {
        auto it = held.find(resource_name(r));
        if (it == held.end() || !it->second.count(ids.front())) continue;
        for (Resource each : kResources) {
          auto devs = held.find(resource_name(each));
          if (devs == held.end()) continue;
          for (const auto& d : devs->second) {
            if (const Grant* g = ledger.holder(each, d)) join.insert(g->id);
          }
        }
      }
    }
    if (join.size() < 2) return grpc::Status::OK;
    return join_grants(join);
  }

  // One tenant for a container's grants: memory and compute caps together on one GPU.
  grpc::Status join_grants(const std::set<std::string>& ids) {
    std::vector<Grant> grants;
    uint64_t memory = 0;
    int compute = 0;
    Grant joined;
    std::string error;
    {
      std::lock_guard lock(mu);
      for (const auto& id : ids) {
        const Grant* g = ledger.find(id);
        if (!g) return grpc::Status(grpc::StatusCode::INTERNAL, "grant " + id + " is gone");
        grants.push_back(*g);
      }
      bool done = true;
      for (const auto& g : grants) {
        done &= g.joined && g.tenant == grants.front().tenant;
        if (g.resource == Resource::kCard) {
          spdlog::warn(
              "a container holds whole GPUs and other cuwire resources: each keeps "
              "its own tenant");
          return grpc::Status::OK;
        }
        if (g.resource == Resource::kMemory) memory += g.amount;
        if (g.resource == Resource::kCompute) compute += static_cast<int>(g.amount);
      }
      if (done) return grpc::Status::OK;
      joined = grants.front();
      // On any server: grants placed apart (on two servers, say) come together on one GPU,
      // and the grant directories name its server beside the token.
      if (!ledger.place(Resource::kMemory, memory, &joined.server, &joined.gpus, &error, 0, compute,
                        ids)) {
        error = "the container's " + std::to_string(memory) + " MiB and " +
                std::to_string(compute) + " % cannot share one GPU: " + error;
        spdlog::warn("PreStartContainer: {}", error);
        return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, error);
      }
    }
    joined.tenant = prefix() + "j" + grants.front().id;
    const std::string token = random_hex(32);
    // Compute shares are checked against 100 % per GPU: the grants' own tenants go first.
    for (const auto& g : grants) remove_tenant(g.server, g.tenant);
    if (!add_tenant(joined, token, memory, compute, &error)) {
      for (const auto& g : grants) {
        std::string again;
        const auto [m, c] = g.resource == Resource::kMemory
                                ? std::pair<uint64_t, int>(g.amount, 0)
                                : std::pair<uint64_t, int>(0, static_cast<int>(g.amount));
        if (!add_tenant(g, token_of(g), m, c, &again))
          spdlog::error("tenant {} could not be added again: {}", g.tenant, again);
      }
      spdlog::warn("PreStartContainer: joining {} grants: {}", grants.size(), error);
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, error);
    }
    {
      std::lock_guard lock(mu);
      for (const auto& id : ids) {
        Grant* g = ledger.find(id);
        if (!g) continue;  // released meanwhile (cannot happen under admin_mu; kept safe)
        g->gpus = joined.gpus;
        g->tenant = joined.tenant;
        g->joined = true;
        g->server = joined.server;
        save(*g);
        // Before the container starts (PreStartContainer): its programs read both.
        write_file(grants_dir() / id / "server", client_address(joined.server) + "\n", 0644);
        write_file(grants_dir() / id / "token", token + "\n", 0644);
      }
    }
    bump();
    spdlog::info("joined {} grants into tenant {} ({} MiB, {} %) on GPU {}", grants.size(),
                 joined.tenant, memory, compute, joined.gpus.front());
    return grpc::Status::OK;
  }

  // --- keeping up with the servers and the kubelet ----------------------------------------

  // Reads every server's GPUs and the tenants on them. Re-adds the tenants of grants a server
  // lost (it restarted) and removes this node's tenants that no grant names.
  // The GPUs of one server's answers and the tenants of this plugin on them; false (with why)
  // for answers not shaped as admin.h says (a server of another version, a damaged one).
  bool parse_room(const json& usage, const json& gpus, std::vector<GpuRoom>* rooms,
                  std::set<std::string>* mine, std::string* error) const {
    try {
      std::map<int, std::string> uuids;
      for (const auto& g : gpus.at("gpus")) {
        uuids[g.at("index").get<int>()] = g.value("uuid", std::string());
      }
      for (const auto& g : usage.at("gpus")) {
        GpuRoom room;
        room.index = g.at("index").get<int>();
        room.name = g.value("name", std::string());
        if (auto u = uuids.find(room.index); u != uuids.end()) room.uuid = u->second;
        const uint64_t total = g.at("memory_total").get<uint64_t>();
        uint64_t others = 0;
        int compute = 0;
        for (const auto& t : g.at("tenants")) {
          const std::string name = t.at("tenant").get<std::string>();
          if (ours(name)) {
            mine->insert(name);
            continue;
          }
          room.shared = true;
          others += t.at("memory_cap").get<uint64_t>();
          compute += t.at("compute_cap").get<int>();
        }
        room.memory_mib = (total > others ? total - others : 0) >> 20;
        room.compute = std::max(0, 100 - compute);
        rooms->push_back(std::move(room));
      }
    } catch (const json::exception& e) {
      *error = std::string("an answer not as expected: ") + e.what();
      return false;
    }
    return true;
  }

  // Reads every server's GPUs and the tenants on them. Re-adds the tenants of grants a server
  // lost (it restarted) and removes this node's tenants that no grant names. The servers are
  // asked without admin_mu (a server that does not answer takes up to its timeout), and what
  // changed meanwhile is left to the next round.
  void refresh() {
    {
      std::lock_guard admin_lock(admin_mu);
      reachable.resize(o.servers.size(), true);
    }
    for (size_t i = 0; i < o.servers.size(); ++i) {
      const int server = static_cast<int>(i);
      const auto asked = Clock::now();
      json usage, gpus;
      std::string error;
      std::vector<GpuRoom> rooms;
      std::set<std::string> mine;
      const bool ok = admin(server, "usage", {}, &usage, &error) &&
                      admin(server, "gpus", {}, &gpus, &error) &&
                      parse_room(usage, gpus, &rooms, &mine, &error);
      std::lock_guard admin_lock(admin_mu);
      if (!ok) {
        if (reachable[i]) spdlog::warn("gpu-server unreachable, its devices Unhealthy: {}", error);
        reachable[i] = false;
        {
          std::lock_guard lock(mu);
          ledger.set_health(server, false);
        }
        bump();
        continue;
      }
      if (!reachable[i]) spdlog::info("{} answers again", o.servers[i].admin);
      reachable[i] = true;
      const std::set<std::string>& ours_now = mine;
      std::vector<Grant> lost;
      std::set<std::string> named;
      {
        std::lock_guard lock(mu);
        ledger.set_server(server, std::move(rooms));
        for (const auto& [id, g] : ledger.grants()) {
          if (g.server != server) continue;
          named.insert(g.tenant);
          // A tenant made after the server was asked is not lost, only newer than the answer.
          if (auto m = made_at.find(g.tenant); m != made_at.end() && m->second >= asked) continue;
          if (!ours_now.count(g.tenant) &&
              std::none_of(lost.begin(), lost.end(),
                           [&](const Grant& l) { return l.tenant == g.tenant; }))
            lost.push_back(g);
        }
      }
      for (const auto& g : lost) {
        uint64_t memory = 0;
        int compute = 0;
        {
          std::lock_guard lock(mu);
          caps_of(g, &memory, &compute);
        }
        if (g.resource == Resource::kCard) memory = 0, compute = 0;
        if (add_tenant(g, token_of(g), memory, compute, &error)) {
          spdlog::info("tenant {} added again (its gpu-server had lost it)", g.tenant);
        } else {
          spdlog::warn("tenant {} could not be added again: {}", g.tenant, error);
        }
      }
      for (const auto& name : ours_now) {
        if (named.count(name)) continue;
        spdlog::info("removing tenant {}: no grant of this plugin names it", name);
        remove_tenant(server, name);
      }
      bump();
    }
  }

  // Grants whose devices no container has held for the release grace: their tenants go.
  void reap() {
    std::lock_guard admin_lock(admin_mu);
    {
      std::lock_guard lock(mu);
      if (ledger.grants().empty()) return;
    }
    std::vector<std::map<std::string, std::set<std::string>>> containers;
    if (!pod_resources(&containers)) return;
    std::vector<Grant> gone;
    {
      std::lock_guard lock(mu);
      const auto now = Clock::now();
      for (const auto& [id, g] : ledger.grants()) {
        bool held = false;
        for (const auto& c : containers) {
          auto it = c.find(resource_name(g.resource));
          if (it == c.end()) continue;
          for (const auto& d : g.devices) held |= it->second.count(d) > 0;
        }
        if (held) {
          seen_at[id] = now;
        } else if (now - seen_at[id] >= o.reap_grace) {
          gone.push_back(g);
        }
      }
      for (const auto& g : gone) {
        ledger.remove(g.id);
        seen_at.erase(g.id);
      }
    }
    release(gone, "no container holds it");
  }

  void load() {
    std::error_code ec;
    fs::create_directories(grants_dir(), ec);
    ::chmod(o.state_dir.c_str(), 0700);
    for (const auto& entry : fs::directory_iterator(grants_dir(), ec)) {
      std::ifstream in(entry.path() / "grant.json");
      const json j = json::parse(in, nullptr, false);
      if (!j.is_object()) {
        spdlog::warn("{}: not a grant; removed", entry.path().string());
        fs::remove_all(entry.path(), ec);
        continue;
      }
      Grant g;
      std::string server_address;
      try {
        g.id = j.at("id").get<std::string>();
        g.resource = resource_of(j.at("resource").get<std::string>());
        g.devices = j.at("devices").get<std::vector<std::string>>();
        g.amount = j.at("amount").get<uint64_t>();
        g.gpus = j.at("gpus").get<std::vector<int>>();
        g.tenant = j.at("tenant").get<std::string>();
        g.joined = j.value("joined", false);
        server_address = j.at("server").get<std::string>();
      } catch (const json::exception& e) {
        spdlog::warn("{}: not a grant ({}); removed", entry.path().string(), e.what());
        fs::remove_all(entry.path(), ec);
        continue;
      }
      g.server = -1;
      for (size_t i = 0; i < o.servers.size(); ++i) {
        if (o.servers[i].admin == server_address) g.server = static_cast<int>(i);
      }
      if (g.server < 0 || g.id != entry.path().filename().string() || g.gpus.empty()) {
        spdlog::warn("grant {}: its gpu-server {} is no longer served; dropped", g.id,
                     server_address);
        fs::remove_all(entry.path(), ec);
        continue;
      }
      std::lock_guard lock(mu);
      ledger.add(g);
      seen_at[g.id] = Clock::now();
    }
  }

  // Serves the three sockets and registers them, again when the kubelet restarted (it deletes
  // the plugins' sockets and makes kubelet.sock anew).
  void ensure_served();

  void watch() {
    while (!stopping) {
      ensure_served();
      refresh();
      reap();
      std::unique_lock lock(stop_mu);
      stop_cv.wait_for(lock, o.interval, [&] { return stopping.load(); });
    }
  }
};

class DeviceService final : public v1beta1::DevicePlugin::Service {
 public:
  DeviceService(Plugin::Impl* p, Resource r) : p_(p), r_(r) {}

  grpc::Status GetDevicePluginOptions(grpc::ServerContext*, const v1beta1::Empty*,
                                      v1beta1::DevicePluginOptions* out) override {
    out->set_pre_start_required(true);
    out->set_get_preferred_allocation_available(false);
    return grpc::Status::OK;
  }

  grpc::Status ListAndWatch(grpc::ServerContext* ctx, const v1beta1::Empty*,
                            grpc::ServerWriter<v1beta1::ListAndWatchResponse>* writer) override {
    std::vector<std::pair<std::string, bool>> last;
    bool sent = false;
    uint64_t seen = 0;
    while (!ctx->IsCancelled() && !p_->stopping) {
      std::vector<std::pair<std::string, bool>> now;
      {
        std::unique_lock lock(p_->mu);
        if (sent && seen == p_->version) {
          p_->changed.wait_for(lock, std::chrono::milliseconds(500));
          if (seen == p_->version) continue;
        }
        seen = p_->version;
        now = p_->ledger.devices(r_);
      }
      if (sent && now == last) continue;
      v1beta1::ListAndWatchResponse resp;
      for (const auto& [id, healthy] : now) {
        auto* d = resp.add_devices();
        d->set_id(id);
        d->set_health(healthy ? "Healthy" : "Unhealthy");
      }
      if (!writer->Write(resp)) break;
      last = std::move(now);
      sent = true;
    }
    return grpc::Status::OK;
  }

  grpc::Status GetPreferredAllocation(grpc::ServerContext*,
                                      const v1beta1::PreferredAllocationRequest* req,
                                      v1beta1::PreferredAllocationResponse* out) override {
    // Any IDs do: the plugin places grants itself. Offered for a kubelet that asks anyway.
    for (const auto& c : req->container_requests()) {
      auto* r = out->add_container_responses();
      for (const auto& id : c.must_include_device_ids()) r->add_device_ids(id);
      for (const auto& id : c.available_device_ids()) {
        if (r->device_ids_size() >= c.allocation_size()) break;
        bool have = false;
        for (const auto& m : c.must_include_device_ids()) have |= m == id;
        if (!have) r->add_device_ids(id);
      }
    }
    return grpc::Status::OK;
  }

  grpc::Status Allocate(grpc::ServerContext*, const v1beta1::AllocateRequest* req,
                        v1beta1::AllocateResponse* out) override {
    for (const auto& c : req->container_requests()) {
      std::vector<std::string> ids(c.devices_ids().begin(), c.devices_ids().end());
      grpc::Status s = p_->allocate(r_, ids, out->add_container_responses());
      if (!s.ok()) return s;
    }
    return grpc::Status::OK;
  }

  grpc::Status PreStartContainer(grpc::ServerContext*, const v1beta1::PreStartContainerRequest* req,
                                 v1beta1::PreStartContainerResponse*) override {
    std::vector<std::string> ids(req->devices_ids().begin(), req->devices_ids().end());
    return p_->pre_start(r_, ids);
  }

 private:
  Plugin::Impl* p_;
  Resource r_;
};

void Plugin::Impl::ensure_served() {
  const fs::path dir(o.device_plugin_dir);
  struct stat st {};
  const ino_t kubelet = ::stat((dir / "kubelet.sock").c_str(), &st) == 0 ? st.st_ino : 0;
  auto shut = [](Served& s) {
    s.server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  };
  if (kubelet != kubelet_inode) {
    // No kubelet, or a new one (it restarted, deleting the plugins' sockets): all anew.
    for (auto& s : served) shut(s);
    served.clear();
    kubelet_inode = kubelet;
  }
  if (kubelet == 0) {
    // Said once per wait (at start, or each time the kubelet goes away).
    if (!waiting_said) {
      spdlog::info("waiting for the kubelet's {}", (dir / "kubelet.sock").string());
    }
    waiting_said = true;
    return;
  }
  waiting_said = false;
  // Each resource's socket: served again where it is gone (someone deleted it) or could not be
  // served; registered again where the kubelet has not taken it. The others are left alone.
  bool changed = false;
  for (Resource r : kResources) {
    const fs::path socket = dir / socket_name(r);
    auto it = std::find_if(served.begin(), served.end(),
                           [&](const Served& s) { return s.resource == r; });
    if (it != served.end() && ::stat(socket.c_str(), &st) == 0) continue;
    if (it != served.end()) {
      shut(*it);
      served.erase(it);
    }
    std::error_code ec;
    fs::remove(socket, ec);
    Served s{r, std::make_unique<DeviceService>(this, r), nullptr};
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix:" + socket.string(), grpc::InsecureServerCredentials());
    builder.RegisterService(s.service.get());
    s.server = builder.BuildAndStart();
    if (!s.server) {
      spdlog::error("cannot serve {}", socket.string());
      continue;
    }
    served.push_back(std::move(s));
  }
  auto channel = grpc::CreateChannel("unix:" + (dir / "kubelet.sock").string(),
                                     grpc::InsecureChannelCredentials());
  auto stub = v1beta1::Registration::NewStub(channel);
  for (auto& s : served) {
    if (s.registered) continue;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1beta1::RegisterRequest req;
    req.set_version("v1beta1");
    req.set_endpoint(socket_name(s.resource));
    req.set_resource_name(resource_name(s.resource));
    req.mutable_options()->set_pre_start_required(true);
    v1beta1::Empty resp;
    if (grpc::Status st2 = stub->Register(&ctx, req, &resp); !st2.ok()) {
      spdlog::warn("registering {} with the kubelet: {}; trying again in {} ms",
                   resource_name(s.resource), st2.error_message(), o.interval.count());
      continue;
    }
    s.registered = changed = true;
    spdlog::info("registered {} with the kubelet at {}", resource_name(s.resource),
                 (dir / "kubelet.sock").string());
  }
  if (changed) {
    ++registrations;
    // A kubelet that restarted lists its pods in pod-resources only once it has them again:
    // no grant is released for want of a container before the grace has passed anew.
    std::lock_guard lock(mu);
    for (auto& [id, when] : seen_at) when = Clock::now();
  }
}

Plugin::Plugin(PluginOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}

Plugin::~Plugin() { stop(); }

Status Plugin::start() {
  Impl& p = *impl_;
  if (p.o.servers.empty()) return Status::invalid_argument("no gpu-server to serve (--server)");
  if (p.o.node.empty()) return Status::invalid_argument("no node name");
  if (p.o.ledger.memory_unit_mib == 0 || p.o.ledger.memory_granularity_mib == 0 ||
      p.o.ledger.memory_granularity_mib % p.o.ledger.memory_unit_mib != 0) {
    return Status::invalid_argument(
        "the memory granularity must be a whole number of memory units");
  }
  if (p.o.ledger.compute_granularity < 1 || p.o.ledger.compute_granularity > 100 ||
      100 % p.o.ledger.compute_granularity != 0) {
    return Status::invalid_argument("the compute granularity must divide 100");
  }
  std::error_code ec;
  fs::create_directories(p.o.state_dir, ec);
  if (ec) return Status::invalid_argument("cannot make the state directory " + p.o.state_dir);
  p.load();
  p.refresh();
  p.ensure_served();
  p.watcher = std::thread([&p] { p.watch(); });
  return Status::ok();
}

void Plugin::stop() {
  Impl& p = *impl_;
  if (p.stopping.exchange(true)) return;
  { std::lock_guard lock(p.stop_mu); }
  p.stop_cv.notify_all();
  p.changed.notify_all();
  if (p.watcher.joinable()) p.watcher.join();
  for (auto& s : p.served) {
    s.server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    std::error_code ec;
    fs::remove(fs::path(p.o.device_plugin_dir) / socket_name(s.resource), ec);
  }
  p.served.clear();
}

int Plugin::registrations() const { return impl_->registrations.load(); }

}  // namespace cuwire::k8s
