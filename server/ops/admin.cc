// Server::control and the commands of the admin API (admin.h).
#include "server/ops/admin.h"

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "server/backend/backend.h"
#include "server/ops/config_file.h"
#include "server/ops/stats.h"
#include "server/session/server.h"
#include "server/session/session.h"

namespace cuwire::server {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// Capped compute on one GPU stays within 100 percent, as the config file must: why `compute`
// for a tenant of `spec`, beside every other tenant's cap (not `self`'s), would pass it on the
// first GPU where it would; empty when it would nowhere.
std::string compute_over_100(const std::vector<GpuPool::GpuState>& gpus,
                             const std::vector<TenantRef>& tenants, const TenantSpec& spec,
                             int compute, const Tenant* self) {
  for (const auto& g : gpus) {
    if (!spec.may_use(g.info.device)) continue;
    int sum = compute;
    for (const TenantRef& other : tenants) {
      if (other.get() != self && other->spec().may_use(g.info.device)) sum += other->compute();
    }
    if (sum > 100) {
      return "compute caps on GPU " + std::to_string(g.info.device) + " would sum to " +
             std::to_string(sum) + " percent, over 100";
    }
  }
  return "";
}

double seconds(uint64_t ns) { return static_cast<double>(ns) / 1e9; }

json caps_json(const Tenant::Caps& c) {
  json j;
  j["memory_bytes"] = c.memory_bytes;
  j["memory_fraction"] = c.memory_fraction;
  j["compute"] = c.compute;
  return j;
}

// A histogram's percentiles in seconds.
json summary(const LatencyHistogram& h, bool full) {
  json j;
  j["p50"] = seconds(h.quantile(0.5));
  j["p99"] = seconds(h.quantile(0.99));
  if (full) {
    j["mean"] = h.mean() / 1e9;
    j["max"] = seconds(h.max());
  }
  return j;
}

ControlReplyMsg refused(std::string why) { return {false, std::move(why), ""}; }

std::string read_driver_version() {
  std::ifstream in("/proc/driver/nvidia/version");
  std::string line;
  if (!in || !std::getline(in, line)) return "";
  // "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06  Sun Jul 27 ..."
  const auto at = line.find("Kernel Module");
  if (at == std::string::npos) return "";
  std::istringstream rest(line.substr(at + 13));
  std::string v;
  rest >> v;
  return v;
}

}  // namespace

std::string reported_driver_version(const std::string& backend) {
  // The host's driver serves the cuda backend; the sim implements the driver API of CUDA 13.0,
  // whose Linux driver (its minimum) was 580.65.06.
  static const std::string host = read_driver_version();
  if (backend == "cuda" && !host.empty()) return host;
  return "580.65.06";
}

ControlReplyMsg Server::control(const ControlCaller& caller, const ControlMsg& request) {
  const std::string& cmd = request.command;
  static const char* const kReading[] = {"gpus", "sessions", "stats", "usage"};
  static const char* const kChanging[] = {"tenant-set", "tenant-add", "tenant-remove", "evict"};
  const bool reading =
      std::find(std::begin(kReading), std::end(kReading), cmd) != std::end(kReading);
  const bool changing =
      std::find(std::begin(kChanging), std::end(kChanging), cmd) != std::end(kChanging);
  if (cmd == "view") {
    // A caller that is neither the admin nor a tenant (an embedder without tenants) sees
    // nothing rather than everything.
    if (!caller.admin && !caller.tenant) return refused("no tenant to show");
    return {true, "", tenant_view(caller)};
  }
  if (!reading && !changing) {
    return refused("unknown command '" + printable_client_name(cmd) +
                   "' (gpus, sessions, stats, usage, tenant-set, tenant-add, tenant-remove, "
                   "evict, view)");
  }
  // A tenant's own token reads gpus and stats within its scope: its GPUs, its figures.
  const Tenant* scope = nullptr;
  if (!caller.admin && caller.tenant && !tenants_->open() && (cmd == "gpus" || cmd == "stats")) {
    if (caller.tenant->removed())
      return refused("tenant " + caller.tenant->name() + " was removed");
    scope = caller.tenant;
  }
  if (!caller.admin && !scope) {
    const bool open_reader = reading && tenants_->open() && !config_.session.admin_token_sha256;
    if (!open_reader) {
      if (caller.warn) {
        caller.warn(fmt::format("control {}: '{}' refused: not the admin token", caller.who, cmd));
      }
      return refused(config_.session.admin_token_sha256
                         ? "'" + cmd +
                               "' needs the admin token; a tenant's token may ask gpus, "
                               "stats and view, within its own scope"
                         : "'" + cmd +
                               "' needs the admin token, and this server has none "
                               "([server] admin_token_file in its config)");
    }
  }
  // Arguments are scalars in one object: parsed once the caller may ask, and no deeper.
  json args = json::object();
  if (!request.args.empty()) {
    args = json::parse(
        request.args, [](int depth, json::parse_event_t, json&) { return depth <= 1; }, false);
    if (!args.is_object()) return refused("the request's arguments are not a JSON object");
  }
  std::string error;
  std::string body;
  if (cmd == "gpus") {
    body = admin_gpus(scope);
  } else if (cmd == "sessions") {
    body = admin_sessions();
  } else if (cmd == "stats") {
    std::string tenant;
    if (args.contains("tenant")) {
      if (!args["tenant"].is_string()) return refused("tenant must be a string");
      tenant = args["tenant"].get<std::string>();
    }
    if (scope) {
      if (!tenant.empty() && tenant != scope->name()) {
        return refused("a tenant's token reads its own figures only (tenant " + scope->name() +
                       ")");
      }
      tenant = scope->name();
    }
    body = admin_stats(tenant, &error);
  } else if (cmd == "usage") {
    body = admin_usage();
  } else if (cmd == "tenant-set") {
    body = admin_tenant_set(args.dump(), &error);
  } else if (cmd == "tenant-add") {
    body = admin_tenant_add(args.dump(), &error);
  } else if (cmd == "tenant-remove") {
    body = admin_tenant_remove(args.dump(), &error);
  } else {
    body = admin_evict(args.dump(), &error);
  }
  if (!error.empty()) return refused(error);
  return {true, "", body};
}

std::vector<Session::Info> Server::session_infos() const {
  std::vector<Session::Info> out;
  std::lock_guard lock(mu_);
  for (const auto& [id, live] : sessions_) {
    if (!live.admitted) continue;
    if (auto info = live.session->info()) out.push_back(std::move(*info));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  return out;
}

uint64_t Server::busy_ns(const Tenant* t, CUdevice device) const {
  auto it = compute_.find(device);
  return it == compute_.end() ? 0 : it->second->busy_ns(t);
}

uint64_t Server::busy_total_ns(CUdevice device) const {
  auto it = compute_.find(device);
  return it == compute_.end() ? 0 : it->second->busy_total_ns();
}

unsigned Server::utilization(const Tenant* t, CUdevice device) {
  // A removed tenant (a control connection it still has) is not cached: its key may be
  // another tenant's once it is freed.
  if (t && t->removed()) return 0;
  const auto now = Clock::now();
  {
    // NVML's figure is over its last sample period; asked more often than once a second, the
    // previous figure stands (and the schedulers are not asked).
    std::lock_guard lock(util_mu_);
    auto it = util_.find({t, device});
    if (it != util_.end() && now - it->second.at < std::chrono::seconds(1)) {
      return it->second.percent;
    }
  }
  uint64_t busy = 0;
  if (t) {
    busy = busy_ns(t, device);
  } else {
    busy = busy_total_ns(device);
  }
  std::lock_guard lock(util_mu_);
  // The first ask's window is the server's life so far.
  auto [it, fresh] = util_.try_emplace({t, device}, UtilSample{started_, 0, 0});
  UtilSample& s = it->second;
  const double ns =
      static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(now - s.at).count());
  const double share = ns > 0 ? static_cast<double>(busy - std::min(busy, s.busy_ns)) / ns : 0;
  s = {now, busy, static_cast<unsigned>(std::lround(std::clamp(share, 0.0, 1.0) * 100))};
  return s.percent;
}

std::string Server::admin_gpus(const Tenant* scope) const {
  json gpus = json::array();
  if (gpus_) {
    for (const auto& g : gpus_->state()) {
      const int dev = g.info.device;
      if (scope && !scope->spec().may_use(dev)) continue;
      uint64_t used = 0;
      for (const TenantRef& t : tenants_->all()) {
        if (!scope || t.get() == scope) used += t->memory_used(dev);
      }
      const uint64_t busy = scope ? busy_ns(scope, dev) : busy_total_ns(dev);
      json tenants = json::object();
      int sessions = g.sessions;
      if (scope) {
        // Its own: its cap as the memory there is, its sessions, nobody else's.
        auto own = g.tenants.find(scope->name());
        sessions = own == g.tenants.end() ? 0 : own->second;
        tenants[scope->name()] = sessions;
      } else {
        for (const auto& [name, n] : g.tenants) tenants[name] = n;
      }
      gpus.push_back(
          {{"index", dev},
           {"name", g.info.name},
           {"uuid", g.info.uuid},
           {"pci_bus_id", g.info.pci_bus_id},
           {"memory_total", scope ? scope->memory_cap(g.info.memory_total) : g.info.memory_total},
           {"memory_used", used},
           {"sessions", sessions},
           {"busy_seconds", seconds(busy)},
           {"tenants", tenants}});
    }
  }
  json answer{{"backend", backend_.name}, {"gpus", gpus}};
  if (!backend_.fallback.empty()) answer["backend_fallback"] = backend_.fallback;
  return answer.dump();
}

std::string Server::admin_sessions() const {
  json list = json::array();
  const auto now = std::chrono::system_clock::now();
  for (const auto& s : session_infos()) {
    list.push_back({{"id", s.id},
                    {"tenant", s.tenant},
                    {"client", s.client},
                    {"pid", s.pid},
                    {"peer", s.peer},
                    {"gpu", s.gpu},
                    {"connected_seconds", std::chrono::duration<double>(now - s.since).count()},
                    {"calls", s.stats ? s.stats->calls() : 0},
                    {"memory_used", s.stats ? s.stats->memory() : 0}});
    // The worker process serving it (isolation by process); absent: the server's own.
    if (s.worker) list.back()["worker_pid"] = s.worker;
  }
  return json{{"sessions", list}}.dump();
}

std::string Server::admin_stats(const std::string& tenant, std::string* error) const {
  json out = json::array();
  bool found = tenant.empty();
  for (const auto& t : tenants_->tenants()) {
    if (!tenant.empty() && t->name() != tenant) continue;
    found = true;
    const StatsSnapshot snap = t->stats().snapshot();
    json calls = json::array();
    for (const auto& [id, c] : snap.calls) {
      uint64_t errors = 0;
      json codes = json::object();
      for (const auto& [code, n] : c.errors) {
        errors += n;
        codes[error_name(code)] = n;
      }
      calls.push_back({{"call", call_label(id)},
                       {"count", c.service.count()},
                       {"errors", errors},
                       {"service", summary(c.service, true)},
                       {"queue", summary(c.queue, false)},
                       {"error_codes", codes}});
    }
    std::sort(calls.begin(), calls.end(), [](const json& a, const json& b) {
      return a["count"].get<uint64_t>() > b["count"].get<uint64_t>();
    });
    out.push_back({{"tenant", t->name()},
                   {"runtime", t->spec().runtime},
                   {"sessions", t->sessions()},
                   {"calls", snap.total_calls()},
                   {"bytes_host_to_device", snap.bytes_in},
                   {"bytes_device_to_host", snap.bytes_out},
                   {"calls_by_name", calls}});
  }
  if (!found) {
    *error = "no tenant named '" + tenant.substr(0, 64) + "'";
    return "";
  }
  return json{{"tenants", out}}.dump();
}

std::string Server::admin_usage() const {
  json gpus = json::array();
  if (gpus_) {
    for (const auto& g : gpus_->state()) {
      json tenants = json::array();
      uint64_t used = 0;
      for (const TenantRef& t : tenants_->all()) used += t->memory_used(g.info.device);
      for (const auto& t : tenants_->tenants()) {
        const int dev = g.info.device;
        if (!t->spec().may_use(dev)) continue;
        const StatsSnapshot snap = t->stats().snapshot(dev);
        LatencyHistogram service;
        for (const auto& [id, c] : snap.calls) service.merge(c.service);
        json buckets = json::array();
        for (size_t i = 0; i < LatencyHistogram::kBuckets; ++i) {
          if (uint64_t n = service.bucket(i)) buckets.push_back({i, n});
        }
        auto sessions = g.tenants.find(t->name());
        tenants.push_back({{"tenant", t->name()},
                           {"runtime", t->spec().runtime},
                           {"sessions", sessions == g.tenants.end() ? 0 : sessions->second},
                           {"memory_used", t->memory_used(dev)},
                           {"memory_cap", t->memory_cap(g.info.memory_total)},
                           {"compute_cap", t->compute()},
                           {"busy_seconds", seconds(busy_ns(t.get(), dev))},
                           {"calls", snap.total_calls()},
                           {"service_buckets", buckets}});
      }
      gpus.push_back({{"index", g.info.device},
                      {"name", g.info.name},
                      {"memory_total", g.info.memory_total},
                      {"memory_used", used},
                      {"sessions", g.sessions},
                      {"tenants", tenants}});
    }
  }
  const double now = std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
  return json{{"time", now}, {"gpus", gpus}}.dump();
}

std::string Server::admin_tenant_set(const std::string& args_text, std::string* error) {
  const json args = json::parse(args_text.empty() ? "{}" : args_text, nullptr, false);
  if (!args.is_object() || !args.contains("name") || !args["name"].is_string()) {
    *error = "tenant-set needs the tenant's name";
    return "";
  }
  const std::string name = args["name"].get<std::string>();
  const TenantRef held = tenants_->named(name);
  Tenant* t = held.get();
  if (!t || tenants_->open()) {
    *error = tenants_->open() ? "this server has no tenants (it is open): nothing to cap"
                              : "no tenant named '" + name.substr(0, 64) + "'";
    return "";
  }
  // One change of caps at a time, from the check to the change (a reload, another admin).
  std::lock_guard caps_lock(caps_mu_);
  Tenant::Caps caps = t->caps();
  const Tenant::Caps was = caps;
  auto text_of = [&](const char* key, std::string* out) -> bool {
    if (!args.contains(key)) return false;
    const json& v = args[key];
    *out = v.is_string() ? v.get<std::string>() : v.is_number() ? v.dump() : "";
    return true;
  };
  std::string memory, compute;
  if (text_of("memory", &memory)) {
    caps.memory_bytes = 0;
    caps.memory_fraction = 0;
    if (memory != "none" && memory != "0") {
      char* end = nullptr;
      const double f = std::strtod(memory.c_str(), &end);
      const bool percent = end && *end == '%' && end[1] == 0;
      if (percent || (end && *end == 0 && memory.find('.') != std::string::npos)) {
        const double fraction = percent ? f / 100 : f;
        if (!(fraction > 0 && fraction <= 1)) {
          *error = "memory as a share of each GPU must be in (0, 1] or (0%, 100%]";
          return "";
        }
        caps.memory_fraction = fraction;
      } else if (Status s = parse_size(memory, &caps.memory_bytes);
                 !s || caps.memory_bytes < (1u << 20)) {
        *error =
            "memory must be a size of at least 1MiB such as 8GiB, a share such as 0.25 or "
            "25%, or none" +
            (s ? std::string() : ": " + s.message());
        return "";
      }
    }
  }
  if (text_of("compute", &compute)) {
    caps.compute = 0;
    if (compute != "none") {
      std::string digits = compute;
      if (!digits.empty() && digits.back() == '%') digits.pop_back();
      char* end = nullptr;
      const long v = std::strtol(digits.c_str(), &end, 10);
      // 0 is not "uncapped" (that is `none`): a cap of nothing is refused, as in the config.
      if (digits.empty() || *end || v < 1 || v > 100) {
        *error = "compute must be a percent from 1 to 100, or none";
        return "";
      }
      caps.compute = static_cast<int>(v);
    }
  }
  if (caps.compute && gpus_) {
    *error = compute_over_100(gpus_->state(), tenants_->tenants(), t->spec(), caps.compute, t);
    if (!error->empty()) return "";
  }
  std::vector<std::string> notes;
  if (!(caps == was)) apply_caps_locked(t, caps, "cuwire tenant set", &notes);
  notes.push_back("in force until the next reload or restart, which read the config file");
  return json{
      {"tenant", name}, {"caps", caps_json(caps)}, {"was", caps_json(was)}, {"notes", notes}}
      .dump();
}

std::string Server::admin_evict(const std::string& args_text, std::string* error) {
  const json args = json::parse(args_text.empty() ? "{}" : args_text, nullptr, false);
  if (!args.is_object() || !args.contains("session") || !args["session"].is_number_unsigned()) {
    *error = "evict needs the session's id (cuwire sessions lists them)";
    return "";
  }
  const uint64_t id = args["session"].get<uint64_t>();
  std::optional<Session::Info> info;
  {
    std::lock_guard lock(mu_);
    auto it = sessions_.find(id);
    if (it != sessions_.end() && it->second.admitted) info = it->second.session->info();
    if (!info) {
      *error = "no session " + std::to_string(id);
      return "";
    }
    it->second.session->evict();
  }
  spdlog::info("session {} ({} {}[{}]): evicted by the admin", id, info->peer, info->client,
               info->pid);
  // Its thread reclaims what it held and ends; a call it is executing finishes first.
  bool ended = false;
  {
    std::unique_lock lock(mu_);
    ended = ended_.wait_for(lock, std::chrono::seconds(10), [&] {
      return stopping_ || draining_ || sessions_.find(id) == sessions_.end() ||
             std::find(finished_.begin(), finished_.end(), id) != finished_.end();
    });
    if (!ended && info->worker) {
      // Its worker did not end it: the front cuts the client's connection itself (which the
      // worker's session reads as the end), and lets the session go.
      spdlog::warn("session {}: worker {} did not end it within 10 s; closing its connection", id,
                   info->worker);
      if (auto it = sessions_.find(id); it != sessions_.end()) it->second.session->stop();
      ended = ended_.wait_for(lock, std::chrono::seconds(2), [&] {
        return stopping_ || sessions_.find(id) == sessions_.end() ||
               std::find(finished_.begin(), finished_.end(), id) != finished_.end();
      });
    }
  }
  return json{{"session", id}, {"tenant", info->tenant}, {"client", info->client}, {"ended", ended}}
      .dump();
}

std::string Server::admin_tenant_add(const std::string& args_text, std::string* error) {
  const json args = json::parse(args_text.empty() ? "{}" : args_text, nullptr, false);
  auto fail = [&](const std::string& why) {
    *error = why;
    return std::string();
  };
  if (!args.is_object() || !args.contains("name") || !args["name"].is_string()) {
    return fail("tenant-add needs the tenant's name");
  }
  TenantFields f;
  f.name = args["name"].get<std::string>();
  // A name goes into logs, metric labels and JSON: letters, digits, '.', '_' and '-'.
  const bool plain = !f.name.empty() && f.name.size() <= 64 &&
                     std::all_of(f.name.begin(), f.name.end(), [](unsigned char c) {
                       return std::isalnum(c) || c == '.' || c == '_' || c == '-';
                     });
  if (!plain) return fail("a tenant's name is 1 to 64 letters, digits, '.', '_' or '-'");
  if (!args.contains("token") || !args["token"].is_string()) {
    return fail("tenant-add needs the tenant's token (cuwire tenant add --token-file)");
  }
  f.token = args["token"].get<std::string>();
  auto text = [&](const char* key, std::optional<std::string>* out) {
    if (!args.contains(key)) return true;
    if (!args[key].is_string()) return false;
    *out = args[key].get<std::string>();
    return true;
  };
  auto number = [&](const char* key, std::optional<int64_t>* out) {
    if (!args.contains(key)) return true;
    if (!args[key].is_number_integer()) return false;
    *out = args[key].get<int64_t>();
    return true;
  };
  if (!text("memory", &f.memory) || !text("placement", &f.placement)) {
    return fail("memory and placement are strings");
  }
  if (!number("compute", &f.compute) || !number("sms", &f.sms) ||
      !number("max_sessions", &f.max_sessions)) {
    return fail("compute, sms and max_sessions are whole numbers");
  }
  if (args.contains("gpus")) {
    // One level of arguments only (control()): a list of GPUs travels as "0,1".
    if (!args["gpus"].is_string()) return fail("gpus is a list such as \"0,1\"");
    std::vector<int64_t> gpus;
    std::stringstream list(args["gpus"].get<std::string>());
    for (std::string item; std::getline(list, item, ',');) {
      char* end = nullptr;
      const long v = std::strtol(item.c_str(), &end, 10);
      if (item.empty() || *end) return fail("gpus is a list such as \"0,1\"");
      gpus.push_back(v);
    }
    f.gpus = std::move(gpus);
  }
  TenantSpec spec;
  if (Status s = tenant_from_fields(f, &spec); !s) return fail(s.message());
  spec.runtime = true;
  std::lock_guard caps_lock(caps_mu_);
  // As the config file's tenants are checked against each other.
  if (tenants_->open()) {
    return fail(
        "this server is open (no tenants configured): tenants are added at run time to a server "
        "started with at least one");
  }
  for (const TenantRef& other : tenants_->tenants()) {
    if (other->name() == spec.name) return fail("tenant '" + spec.name + "' exists already");
    if (other->spec().has_token && other->spec().token_sha256 == spec.token_sha256) {
      return fail("tenant '" + spec.name + "' would have the same token as tenant '" +
                  other->name() + "'");
    }
  }
  if (config_.session.admin_token_sha256 &&
      *config_.session.admin_token_sha256 == spec.token_sha256) {
    return fail("tenant '" + spec.name + "' would have the admin token");
  }
  if (gpus_) {
    for (int d : spec.gpus) {
      if (d >= static_cast<int>(gpus_->size())) {
        return fail("gpus names GPU " + std::to_string(d) + ", the server has " +
                    std::to_string(gpus_->size()));
      }
    }
    if (spec.compute) {
      for (const auto& g : gpus_->state()) {
        if (!spec.may_use(g.info.device)) continue;
        if (!compute_.count(g.info.device)) {
          return fail("GPU " + std::to_string(g.info.device) +
                      " has no compute scheduler (busy_time = \"off\", or a relay's GPU): a "
                      "compute cap there takes a restart with busy time measured");
        }
      }
      const std::string over =
          compute_over_100(gpus_->state(), tenants_->tenants(), spec, spec.compute, nullptr);
      if (!over.empty()) return fail(over);
    }
  }
  retire_removed_locked();
  // Partitions go by name: a removed tenant's, held while its sessions last, is not another's.
  if (!partitions_.of(spec.name).empty()) {
    return fail("tenant '" + spec.name +
                "' was removed while sessions of it held its SM partition; a tenant of that "
                "name is added once they have ended");
  }
  if (spec.sms) {
    // SMs of its own on each GPU it may use, in groups nobody else holds.
    if (!gpus_) return fail("sms: the server has no GPUs to partition");
    std::vector<CUdevice> devices;
    for (const auto& g : gpus_->state()) devices.push_back(g.info.device);
    if (Status s = partitions_.add(*api_, devices, spec); !s) return fail(s.message());
  }
  const Tenant::Caps caps{spec.memory_bytes, spec.memory_fraction, spec.compute};
  auto made = std::make_shared<Tenant>(std::move(spec));
  if (workers_) {
    // Its sessions run in worker processes: its memory is counted in a ledger of its own.
    if (Status s = workers_->add_tenant(made.get()); !s) {
      partitions_.remove(*api_, made->name());
      return fail("tenant '" + made->name() + "': " + s.message());
    }
  }
  Tenant* t = tenants_->add(std::move(made));
  std::vector<std::string> notes;
  apply_caps_locked(t, caps, "cuwire tenant add", &notes);
  notes.push_back("served until `cuwire tenant remove` or a restart; a reload keeps it");
  return json{{"tenant", t->name()}, {"caps", caps_json(caps)}, {"notes", notes}}.dump();
}

std::string Server::admin_tenant_remove(const std::string& args_text, std::string* error) {
  const json args = json::parse(args_text.empty() ? "{}" : args_text, nullptr, false);
  if (!args.is_object() || !args.contains("name") || !args["name"].is_string()) {
    *error = "tenant-remove needs the tenant's name";
    return "";
  }
  const std::string name = args["name"].get<std::string>();
  TenantRef held;  // kept while it is taken apart here
  Tenant* t = nullptr;
  {
    std::lock_guard caps_lock(caps_mu_);
    held = tenants_->named(name);
    t = held.get();
    if (!t) {
      *error = "no tenant named '" + name.substr(0, 64) + "'";
      return "";
    }
    if (!t->spec().runtime) {
      *error = "tenant '" + name +
               "' is the config file's: remove it there (it goes at the next restart)";
      return "";
    }
    // No new session finds it from now on (one that found it before sees it removed), and
    // none is handed to a worker.
    tenants_->remove(t);
    if (workers_) workers_->remove_tenant(t);
  }
  // Its sessions are evicted as `cuwire evict` does, and waited for (10 s at most).
  std::vector<uint64_t> ids;
  {
    std::lock_guard lock(mu_);
    for (auto& [id, live] : sessions_) {
      if (!live.admitted) continue;
      auto info = live.session->info();
      if (info && info->tenant == name) {
        live.session->evict();
        ids.push_back(id);
      }
    }
  }
  bool ended = true;
  {
    std::unique_lock lock(mu_);
    ended = ended_.wait_for(lock, std::chrono::seconds(10), [&] {
      return stopping_ || draining_ || std::all_of(ids.begin(), ids.end(), [&](uint64_t id) {
               return sessions_.find(id) == sessions_.end() ||
                      std::find(finished_.begin(), finished_.end(), id) != finished_.end();
             });
    });
  }
  // A session leaves the server's list a little before it lets go of the tenant, its workers
  // (let go as they fall idle, the ledger with the last of them) quit a little after they are
  // told: a short wait for the last of them, so that the tenant is usually retired here.
  for (int i = 0; ended && i < 200 && (t->sessions() > 0 || (workers_ && workers_->holds(t)));
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  bool retired = false;
  {
    std::lock_guard caps_lock(caps_mu_);
    // Its compute cap held its sessions until they ended; its share goes back to the others
    // (unless a tenant of its name, whose share it is now, was added meanwhile).
    if (ended && !tenants_->named(name)) {
      for (const auto& [device, scheduler] : compute_) scheduler->set_cap(t, 0);
    }
    retire_removed_locked();
    const auto left = tenants_->all();
    retired = std::none_of(left.begin(), left.end(), [&](const TenantRef& r) { return r == held; });
  }
  spdlog::info("cuwire tenant remove: tenant {} removed; {} session(s) evicted{}", name, ids.size(),
               retired ? "" : "; what is left of it goes once its sessions have ended");
  return json{
      {"tenant", name}, {"sessions_evicted", ids.size()}, {"ended", ended}, {"retired", retired}}
      .dump();
}

std::vector<TenantRef> Server::retire_removed_locked() {
  if (tenants_->removed_count() == 0) return {};
  // A tenant of the same name added since holds the name's places (schedules, partitions).
  std::set<std::string> served;
  for (const TenantRef& t : tenants_->tenants()) served.insert(t->name());
  std::vector<TenantRef> gone = tenants_->retire([&](const Tenant& t) {
    if (t.sessions() > 0) return false;
    if (workers_ && workers_->holds(&t)) return false;
    if (gpus_) {
      for (const auto& g : gpus_->state()) {
        if (t.memory_used(g.info.device) > 0) return false;
      }
    }
    if (served.count(t.name())) return true;
    for (const auto& [device, scheduler] : compute_) {
      if (!scheduler->forget_tenant(&t)) return false;
    }
    return true;
  });
  for (const TenantRef& t : gone) {
    if (!served.count(t->name())) partitions_.remove(*api_, t->name());
    {
      std::lock_guard lock(util_mu_);
      std::erase_if(util_, [&](const auto& entry) { return entry.first.first == t.get(); });
    }
    spdlog::debug("tenant {}: removed, nothing of it left; forgotten", t->name());
  }
  return gone;
}

std::string Server::tenant_view(const ControlCaller& caller) {
  json gpus = json::array();
  const Tenant* t = caller.admin ? nullptr : caller.tenant;
  const auto infos = session_infos();
  if (gpus_) {
    int index = 0;
    for (const auto& g : gpus_->state()) {
      const int dev = g.info.device;
      if (t && !t->spec().may_use(dev)) continue;
      uint64_t total = g.info.memory_total, used = 0;
      if (t) {
        total = t->memory_cap(g.info.memory_total);
        used = t->memory_used(dev);
      } else {
        for (const TenantRef& each : tenants_->all()) used += each->memory_used(dev);
      }
      json processes = json::array();
      for (const auto& s : infos) {
        if (s.gpu != dev) continue;
        if (t && s.tenant != t->name() && !tenants_->open()) continue;
        processes.push_back(
            {{"pid", s.pid}, {"name", s.client}, {"memory_used", s.stats ? s.stats->memory() : 0}});
      }
      gpus.push_back({{"index", index++},
                      {"name", g.info.name},
                      {"uuid", g.info.uuid},
                      {"pci_bus_id", g.info.pci_bus_id},
                      {"memory_total", total},
                      {"memory_used", std::min(used, total)},
                      {"compute_capability", {g.info.cc_major, g.info.cc_minor}},
                      {"utilization", utilization(t, dev)},
                      {"processes", processes}});
    }
  }
  // The CUDA version of the driver API the server serves (what clients' cuDriverGetVersion
  // answers), whatever the host's driver supports beyond it.
  const int cuda = CUDA_VERSION;
  const bool relay = backend_.upstream != nullptr;
  return json{{"driver_version", reported_driver_version(relay ? "relay" : backend_.name)},
              {"cuda_version", cuda},
              {"gpus", gpus}}
      .dump();
}

}  // namespace cuwire::server
