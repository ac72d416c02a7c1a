#include "server/ops/config_file.h"

#include <sys/stat.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "protocol/address.h"
#include "protocol/secret_file.h"
#include "server/backend/backend.h"
#include "server/session/server.h"

namespace cuwire::server {
namespace {

// A refusal: "FILE:LINE: reason".
class Refusal {
 public:
  explicit Refusal(const std::string& name) : name_(name) {}
  Status at(const toml::source_region& where, const std::string& why) const {
    // A table made in memory (a tenant added at run time) has no lines to name.
    if (where.begin.line == 0) return Status::invalid_argument(name_ + ": " + why);
    return Status::invalid_argument(name_ + ":" + std::to_string(where.begin.line) + ": " + why);
  }

 private:
  const std::string& name_;
};

}  // namespace

Status read_token_file(const std::string& path, std::string* token, const std::string& what) {
  std::string line, error;
  if (!read_first_line(path, &line, &error)) {
    return Status::invalid_argument("cannot read " + what + " '" + path + "': " + error);
  }
  if (line.empty()) {
    return Status::invalid_argument(what + " '" + path + "' holds no token on its first line");
  }
  *token = line;
  return Status::ok();
}

namespace {

bool parse_hex_digest(const std::string& hex, std::array<uint8_t, 32>* out) {
  if (hex.size() != 64) return false;
  for (size_t i = 0; i < 32; ++i) {
    unsigned v = 0;
    for (int k = 0; k < 2; ++k) {
      char c = static_cast<char>(std::tolower(static_cast<unsigned char>(hex[2 * i + k])));
      int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (d < 0) return false;
      v = v * 16 + static_cast<unsigned>(d);
    }
    (*out)[i] = static_cast<uint8_t>(v);
  }
  return true;
}

// One table's keys, each read once; whatever is left over is an unknown key.
class Keys {
 public:
  Keys(const toml::table& t, const Refusal& refuse, std::string where)
      : t_(t), refuse_(refuse), where_(std::move(where)) {}

  Status string(const char* key, std::optional<std::string>* out) {
    const toml::node* n = take(key);
    if (!n) return Status::ok();
    if (!n->is_string()) return refuse_.at(n->source(), std::string(key) + " must be a string");
    *out = n->as_string()->get();
    return Status::ok();
  }
  Status integer(const char* key, int64_t min, int64_t max, std::optional<int64_t>* out) {
    const toml::node* n = take(key);
    if (!n) return Status::ok();
    if (!n->is_integer()) return refuse_.at(n->source(), std::string(key) + " must be an integer");
    int64_t v = n->as_integer()->get();
    if (v < min || v > max) {
      return refuse_.at(n->source(), std::string(key) + " must be between " + std::to_string(min) +
                                         " and " + std::to_string(max));
    }
    *out = v;
    return Status::ok();
  }
  Status boolean(const char* key, std::optional<bool>* out) {
    const toml::node* n = take(key);
    if (!n) return Status::ok();
    if (!n->is_boolean())
      return refuse_.at(n->source(), std::string(key) + " must be true or false");
    *out = n->as_boolean()->get();
    return Status::ok();
  }
  Status strings(const char* key, std::optional<std::vector<std::string>>* out) {
    const toml::node* n = take(key);
    if (!n) return Status::ok();
    const toml::array* a = n->as_array();
    std::vector<std::string> v;
    if (a) {
      for (const auto& e : *a) {
        if (!e.is_string()) {
          a = nullptr;
          break;
        }
        v.push_back(e.as_string()->get());
      }
    }
    if (!a) return refuse_.at(n->source(), std::string(key) + " must be an array of strings");
    *out = std::move(v);
    return Status::ok();
  }
  // The node itself, for values of more than one type.
  const toml::node* raw(const char* key) { return take(key); }

  // Every key not read is refused, by name and line.
  Status done() const {
    for (auto&& [k, v] : t_) {
      if (!read_.count(std::string(k.str()))) {
        return refuse_.at(k.source(), "unknown key '" + std::string(k.str()) + "' in " + where_);
      }
    }
    return Status::ok();
  }

 private:
  const toml::node* take(const char* key) {
    read_.insert(key);
    return t_.get(key);
  }
  const toml::table& t_;
  const Refusal& refuse_;
  std::string where_;
  std::set<std::string> read_;
};

// A token given as `<prefix>token`, `<prefix>token_file` or `<prefix>token_sha256` (at most
// one; `required`: exactly one), as its SHA-256 in *out; nothing given leaves *out empty.
Status read_token_keys(const toml::table& t, Keys& keys, const Refusal& refuse,
                       const std::string& prefix, const std::string& who, bool required,
                       std::optional<std::array<uint8_t, 32>>* out) {
  std::optional<std::string> token, token_file, token_sha256;
  const std::string k_token = prefix + "token", k_file = prefix + "token_file",
                    k_sha = prefix + "token_sha256";
  if (Status s = keys.string(k_token.c_str(), &token); !s) return s;
  if (Status s = keys.string(k_file.c_str(), &token_file); !s) return s;
  if (Status s = keys.string(k_sha.c_str(), &token_sha256); !s) return s;
  const int given = !!token + !!token_file + !!token_sha256;
  if (given > 1 || (required && given != 1)) {
    return refuse.at(t.source(), who + (required ? "give exactly one of " : "give one of ") +
                                     k_token + ", " + k_file + " and " + k_sha);
  }
  std::array<uint8_t, 32> digest{};
  if (token) {
    if (token->empty()) return refuse.at(t.get(k_token)->source(), who + "empty " + k_token);
    digest = token_digest(*token);
  } else if (token_file) {
    std::string text;
    if (Status s = read_token_file(*token_file, &text); !s) {
      return refuse.at(t.get(k_file)->source(), who + s.message());
    }
    digest = token_digest(text);
  } else if (token_sha256) {
    if (!parse_hex_digest(*token_sha256, &digest)) {
      return refuse.at(t.get(k_sha)->source(), who + k_sha + " must be 64 hexadecimal digits");
    }
  } else {
    return Status::ok();
  }
  *out = digest;
  return Status::ok();
}

Status parse_tenant(const toml::table& t, const Refusal& refuse, TenantSpec* out) {
  Keys keys(t, refuse, "[[tenant]]");
  std::optional<std::string> name;
  if (Status s = keys.string("name", &name); !s) return s;
  if (!name || name->empty()) return refuse.at(t.source(), "a tenant needs a name");
  out->name = *name;
  const std::string who = "tenant '" + *name + "': ";
  // uids: local users by their uid, with or without a token besides.
  if (const toml::node* u = keys.raw("uids")) {
    const toml::array* a = u->as_array();
    if (!a || a->empty()) return refuse.at(u->source(), who + "uids must be a list such as [1000]");
    for (const auto& e : *a) {
      if (!e.is_integer() || e.as_integer()->get() < 0 ||
          e.as_integer()->get() >= int64_t{0xffffffff}) {
        return refuse.at(e.source(), who + "uids holds user ids, 0 to 4294967294");
      }
      const auto uid = static_cast<uint32_t>(e.as_integer()->get());
      if (std::find(out->uids.begin(), out->uids.end(), uid) != out->uids.end()) {
        return refuse.at(e.source(), who + "uid " + std::to_string(uid) + " is listed twice");
      }
      out->uids.push_back(uid);
    }
  }
  std::optional<std::array<uint8_t, 32>> digest;
  if (Status s = read_token_keys(t, keys, refuse, "", who, out->uids.empty(), &digest); !s) {
    return s;
  }
  out->has_token = digest.has_value();
  if (digest) out->token_sha256 = *digest;
  if (const toml::node* m = keys.raw("memory")) {
    if (m->is_string()) {
      uint64_t bytes = 0;
      if (Status s = parse_size(m->as_string()->get(), &bytes); !s) {
        return refuse.at(m->source(), who + "memory: " + s.message());
      }
      if (bytes == 0) return refuse.at(m->source(), who + "memory must be more than 0");
      out->memory_bytes = bytes;
    } else if (m->is_floating_point()) {
      double f = m->as_floating_point()->get();
      if (!(f > 0 && f <= 1)) {
        return refuse.at(m->source(), who + "memory as a fraction of the card must be in (0, 1]");
      }
      out->memory_fraction = f;
    } else if (m->is_integer() && m->as_integer()->get() > 0) {
      out->memory_bytes = static_cast<uint64_t>(m->as_integer()->get());
    } else {
      return refuse.at(m->source(), who +
                                        "memory must be a size such as \"8GiB\", a byte count "
                                        "or a fraction of the card such as 0.25");
    }
  }
  if (const toml::node* c = keys.raw("compute")) {
    if (!c->is_integer() || c->as_integer()->get() < 1 || c->as_integer()->get() > 100) {
      return refuse.at(c->source(), who + "compute must be a whole percent, 1 to 100");
    }
    out->compute = static_cast<int>(c->as_integer()->get());
  }
  std::optional<int64_t> sms;
  if (Status s = keys.integer("sms", 1, 65536, &sms); !s) return s;
  if (sms) out->sms = static_cast<int>(*sms);
  std::optional<int64_t> max_sessions;
  std::optional<bool> borrow;
  if (Status s = keys.integer("max_sessions", 1, 65536, &max_sessions); !s) return s;
  if (max_sessions) out->max_sessions = static_cast<int>(*max_sessions);
  if (Status s = keys.boolean("borrow", &borrow); !s) return s;
  out->borrow = borrow.value_or(false);
  std::optional<std::string> placement;
  if (Status s = keys.string("placement", &placement); !s) return s;
  if (placement) {
    if (*placement != "spread" && *placement != "binpack") {
      return refuse.at(t.get("placement")->source(),
                       who + "placement must be spread or binpack, not '" + *placement + "'");
    }
    out->placement = *placement;
  }
  if (const toml::node* g = keys.raw("gpus")) {
    const toml::array* a = g->as_array();
    if (!a || a->empty()) return refuse.at(g->source(), who + "gpus must be a list such as [0, 1]");
    for (const auto& e : *a) {
      if (!e.is_integer() || e.as_integer()->get() < 0 || e.as_integer()->get() > 63) {
        return refuse.at(e.source(), who + "gpus holds device ordinals, 0 to 63");
      }
      int d = static_cast<int>(e.as_integer()->get());
      if (std::find(out->gpus.begin(), out->gpus.end(), d) != out->gpus.end()) {
        return refuse.at(e.source(), who + "GPU " + std::to_string(d) + " is listed twice");
      }
      out->gpus.push_back(d);
    }
  }
  return keys.done();
}

// Capped compute on one GPU may not sum over 100: a tenant without `gpus` counts on every GPU.
Status check_compute(const std::vector<TenantSpec>& tenants,
                     const std::vector<toml::source_region>& where, const Refusal& refuse) {
  int everywhere = 0;
  std::map<int, int> on;
  for (size_t i = 0; i < tenants.size(); ++i) {
    const TenantSpec& t = tenants[i];
    if (!t.compute) continue;
    if (t.gpus.empty()) {
      everywhere += t.compute;
    } else {
      for (int g : t.gpus) on[g] += t.compute;
    }
    bool over = everywhere > 100;
    for (auto& [g, sum] : on) over = over || sum + everywhere > 100;
    if (over) {
      return refuse.at(where[i], "tenant '" + t.name +
                                     "': capped compute on one GPU sums to more than 100 percent");
    }
  }
  return Status::ok();
}

}  // namespace

Status parse_config(std::string_view text, const std::string& name, FileConfig* out) {
  Refusal refuse(name);
  toml::table root;
  try {
    root = toml::parse(text, name);
  } catch (const toml::parse_error& e) {
    return refuse.at(e.source(), std::string(e.description()));
  }
  for (auto&& [k, v] : root) {
    const std::string key(k.str());
    if (key == "server" || key == "sim") {
      if (!v.is_table()) return refuse.at(k.source(), "[" + key + "] must be a table");
    } else if (key == "tenant") {
      if (!v.is_array_of_tables()) {
        return refuse.at(k.source(), "tenants are [[tenant]] tables");
      }
    } else {
      return refuse.at(k.source(), "unknown section '" + key +
                                       "' (expected [server], [sim], "
                                       "[[tenant]])");
    }
  }
  if (const toml::table* server = root["server"].as_table()) {
    Keys keys(*server, refuse, "[server]");
    Status s = keys.strings("listen", &out->listen);
    // Each address as the server will parse it, so --check-config refuses what start would.
    for (const std::string& text : out->listen.value_or(std::vector<std::string>{})) {
      Address a;
      if (!s) break;
      if (Status bad = parse_address(text, &a); !bad) {
        s = refuse.at((*server)["listen"].node()->source(), "listen: " + bad.message());
      }
    }
    if (s) s = keys.string("backend", &out->backend);
    if (s) s = keys.string("driver", &out->driver);
    if (s) s = keys.string("placement", &out->placement);
    if (s) s = keys.string("device_printf", &out->device_printf);
    if (s) s = keys.string("busy_time", &out->busy_time);
    if (s) s = keys.string("shm_lane", &out->shm_lane);
    if (s) s = keys.string("tls_cert", &out->tls_cert);
    if (s) s = keys.string("tls_key", &out->tls_key);
    if (s) s = keys.string("token_file", &out->token_file);
    if (s) s = keys.string("log_level", &out->log_level);
    if (s) s = keys.string("handshake_timeout", &out->handshake_timeout);
    if (s) s = keys.string("idle_timeout", &out->idle_timeout);
    if (s) s = keys.string("drain_timeout", &out->drain_timeout);
    if (s) s = keys.string("metrics", &out->metrics);
    if (s) s = keys.string("socket_mode", &out->socket_mode);
    if (s) s = keys.string("socket_group", &out->socket_group);
    if (s) s = keys.string("context_memory", &out->context_memory);
    if (s) s = keys.string("isolation", &out->isolation);
    if (s) s = keys.string("worker_idle", &out->worker_idle);
    if (s) s = keys.string("worker_timeout", &out->worker_timeout);
    if (s) s = keys.boolean("allow_insecure", &out->allow_insecure);
    if (s) s = keys.boolean("open", &out->open);
    if (s) s = keys.integer("max_connections", 1, 65536, &out->max_connections);
    if (s) s = keys.integer("max_sessions", 1, 65536, &out->max_sessions);
    if (s) s = keys.integer("max_handshakes_per_peer", 1, 65536, &out->max_handshakes_per_peer);
    if (s) s = keys.integer("max_sessions_per_gpu", 1, 65536, &out->max_sessions_per_gpu);
    if (s) {
      s = read_token_keys(*server, keys, refuse, "admin_", "[server]: ", false,
                          &out->admin_token_sha256);
    }
    if (s) s = keys.done();
    if (!s) return s;
    auto one_of = [&](const char* key, const std::optional<std::string>& v,
                      std::initializer_list<const char*> allowed) -> Status {
      if (!v) return Status::ok();
      for (const char* a : allowed) {
        if (*v == a) return Status::ok();
      }
      std::string list;
      for (const char* a : allowed) list += std::string(list.empty() ? "" : ", ") + a;
      return refuse.at(server->get(key)->source(),
                       std::string(key) + " must be one of " + list + ", not '" + *v + "'");
    };
    if (Status e = one_of("backend", out->backend, {"auto", "sim", "cuda"}); !e) return e;
    if (Status e = one_of("placement", out->placement, {"spread", "binpack"}); !e) return e;
    if (Status e = one_of("device_printf", out->device_printf, {"client", "server"}); !e) return e;
    if (Status e = one_of("busy_time", out->busy_time, {"measured", "off"}); !e) return e;
    if (Status e = one_of("shm_lane", out->shm_lane, {"on", "off"}); !e) return e;
    if (Status e = one_of("isolation", out->isolation, {"auto", "tenant", "session", "none"}); !e)
      return e;
    for (auto [key, value] : {std::pair{"worker_idle", &out->worker_idle},
                              std::pair{"worker_timeout", &out->worker_timeout}}) {
      std::chrono::milliseconds d{};
      if (!*value) continue;
      if (Status e = parse_duration(**value, &d); !e || d.count() <= 0) {
        return refuse.at(server->get(key)->source(),
                         std::string(key) + ": " + (e ? "must be more than 0" : e.message()));
      }
    }
    if (out->context_memory && *out->context_memory != "auto") {
      uint64_t bytes = 0;
      if (Status e = parse_size(*out->context_memory, &bytes); !e) {
        return refuse.at(server->get("context_memory")->source(), "context_memory: " + e.message());
      }
    }
    if (out->socket_mode) {
      int mode = 0;
      if (Status e = parse_socket_mode(*out->socket_mode, &mode); !e) {
        return refuse.at(server->get("socket_mode")->source(), "socket_mode: " + e.message());
      }
    }
    if (out->socket_group) {
      int64_t gid = 0;
      if (Status e = resolve_group(*out->socket_group, &gid); !e) {
        return refuse.at(server->get("socket_group")->source(), "socket_group: " + e.message());
      }
    }
  }
  if (const toml::table* sim = root["sim"].as_table()) {
    Keys keys(*sim, refuse, "[sim]");
    std::optional<int64_t> budget;
    Status s = keys.integer("gpus", 1, 64, &out->sim_gpus);
    if (s) s = keys.string("memory", &out->sim_memory);
    if (s) s = keys.integer("instruction_budget", 0, INT64_MAX, &budget);
    if (s) s = keys.integer("max_streams", 1, 1 << 20, &out->sim_max_streams);
    if (s) s = keys.integer("threads", 1, 1024, &out->sim_threads);
    if (s) s = keys.string("profile", &out->sim_profile);
    if (s) s = keys.done();
    if (!s) return s;
    if (budget) out->sim_instruction_budget = static_cast<uint64_t>(*budget);
    if (out->sim_memory) {
      uint64_t bytes = 0;
      if (Status e = parse_size(*out->sim_memory, &bytes); !e) {
        return refuse.at(sim->get("memory")->source(), "memory: " + e.message());
      }
    }
  }
  if (const toml::array* tenants = root["tenant"].as_array()) {
    std::vector<toml::source_region> where;
    std::map<std::string, size_t> names;
    std::map<std::array<uint8_t, 32>, std::string> tokens;
    std::map<uint32_t, std::string> uids;
    for (const auto& node : *tenants) {
      const toml::table& t = *node.as_table();
      TenantSpec spec;
      if (Status s = parse_tenant(t, refuse, &spec); !s) return s;
      if (names.count(spec.name)) {
        return refuse.at(t.source(), "tenant '" + spec.name + "' is named twice");
      }
      if (auto it = tokens.find(spec.token_sha256); spec.has_token && it != tokens.end()) {
        return refuse.at(t.source(), "tenant '" + spec.name + "' has the same token as tenant '" +
                                         it->second + "'");
      }
      if (spec.has_token && out->admin_token_sha256 == spec.token_sha256) {
        return refuse.at(t.source(), "tenant '" + spec.name + "' has the admin token");
      }
      for (uint32_t uid : spec.uids) {
        if (auto it = uids.find(uid); it != uids.end()) {
          return refuse.at(t.get("uids")->source(),
                           "tenant '" + spec.name + "': uid " + std::to_string(uid) +
                               " belongs to tenant '" + it->second + "' already");
        }
        uids[uid] = spec.name;
      }
      names[spec.name] = out->tenants.size();
      if (spec.has_token) tokens[spec.token_sha256] = spec.name;
      where.push_back(t.source());
      out->tenants.push_back(std::move(spec));
    }
    if (Status s = check_compute(out->tenants, where, refuse); !s) return s;
  }
  if (out->open.value_or(false) && !out->tenants.empty()) {
    return refuse.at(root["server"]["open"].node()->source(),
                     "open = true: a server with [[tenant]]s is never open");
  }
  return Status::ok();
}

Status tenant_from_fields(const TenantFields& f, TenantSpec* out) {
  toml::table t;
  t.insert("name", f.name);
  if (f.token) t.insert("token", *f.token);
  if (f.memory) {
    // A share is a fraction of the card, as the file writes it (0.25); a percent too.
    const std::string& m = *f.memory;
    char* end = nullptr;
    const double v = std::strtod(m.c_str(), &end);
    const bool percent = !m.empty() && end && *end == '%' && end[1] == 0;
    const bool fraction = !m.empty() && end && *end == 0 && m.find('.') != std::string::npos;
    if (percent) {
      t.insert("memory", v / 100);
    } else if (fraction) {
      t.insert("memory", v);
    } else {
      t.insert("memory", m);
    }
  }
  if (f.placement) t.insert("placement", *f.placement);
  if (f.compute) t.insert("compute", *f.compute);
  if (f.sms) t.insert("sms", *f.sms);
  if (f.max_sessions) t.insert("max_sessions", *f.max_sessions);
  if (f.borrow) t.insert("borrow", *f.borrow);
  if (f.gpus) {
    toml::array a;
    for (int64_t g : *f.gpus) a.push_back(g);
    t.insert("gpus", std::move(a));
  }
  const std::string name = "tenant add";
  return parse_tenant(t, Refusal(name), out);
}

Status check_config_further(const std::string& path, const FileConfig& file,
                            std::vector<std::string>* warnings) {
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const std::exception& e) {
    return Status::invalid_argument(path + ": " + e.what());
  }
  // Secrets every user may read.
  std::vector<std::pair<std::string, std::string>> secrets;  // key, file
  for (const char* key : {"admin_token_file", "token_file", "tls_key"}) {
    if (auto v = root["server"][key].value<std::string>()) secrets.emplace_back(key, *v);
  }
  if (const toml::array* tenants = root["tenant"].as_array()) {
    for (const auto& t : *tenants) {
      if (!t.is_table()) continue;
      if (auto v = (*t.as_table())["token_file"].value<std::string>()) {
        secrets.emplace_back(
            "tenant '" + (*t.as_table())["name"].value_or(std::string()) + "' token_file", *v);
      }
    }
  }
  for (const auto& [key, file_path] : secrets) {
    struct stat st {};
    if (::stat(file_path.c_str(), &st) == 0 && (st.st_mode & S_IROTH)) {
      char mode[8];
      std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
      return Status::invalid_argument(path + ": " + key + " " + file_path +
                                      " is readable by every user (mode " + mode +
                                      "): chmod o-rwx " + file_path);
    }
  }
  // What the GPUs are, where the file says (the sim); else only what needs no size.
  const bool sim = file.backend && *file.backend == "sim";
  SimOptions defaults;
  int gpus = sim ? static_cast<int>(file.sim_gpus.value_or(defaults.gpus)) : 0;
  uint64_t memory = defaults.memory_bytes;
  if (sim && file.sim_memory) (void)parse_size(*file.sim_memory, &memory);
  const int sm_count = defaults.sm_count;
  auto gib = [](double bytes) {
    char text[32];
    std::snprintf(text, sizeof text, "%.3g GiB", bytes / double(uint64_t{1} << 30));
    return std::string(text);
  };
  int highest = 0;
  for (const TenantSpec& t : file.tenants) {
    for (int g : t.gpus) highest = std::max(highest, g);
    if (!sim) continue;
    if (t.memory_bytes > memory) {
      return Status::invalid_argument(path + ": tenant '" + t.name + "': memory cap " +
                                      gib(double(t.memory_bytes)) + " is more than a GPU's " +
                                      gib(double(memory)));
    }
    for (int g : t.gpus) {
      if (g >= gpus) {
        return Status::invalid_argument(
            path + ": tenant '" + t.name + "': gpus names GPU " + std::to_string(g) +
            "; the sim has " + std::to_string(gpus) + " (0 to " + std::to_string(gpus - 1) + ")");
      }
    }
  }
  if (!sim) gpus = highest + 1;
  const std::string placement = file.placement.value_or("spread");
  for (int g = 0; g < gpus; ++g) {
    int sms = 0;
    double fraction = 0, bytes = 0;
    std::string names;
    for (const TenantSpec& t : file.tenants) {
      if (!t.may_use(g)) continue;
      sms += t.sms;
      if (t.memory_fraction > 0 || t.memory_bytes > 0) {
        names.append(names.empty() ? "" : ", ").append(t.name);
        fraction += t.memory_fraction;
        bytes += double(t.memory_bytes);
      }
    }
    if (sim && sms > sm_count) {
      return Status::invalid_argument(path + ": the tenants' sms on GPU " + std::to_string(g) +
                                      " add up to " + std::to_string(sms) + " of its " +
                                      std::to_string(sm_count) + " SMs");
    }
    const double total = fraction * double(memory) + bytes;
    const bool over = sim ? total > double(memory) : fraction > 1.0;
    if (over) {
      const std::string sum =
          sim ? gib(total) + " of its " + gib(double(memory))
              : std::to_string(static_cast<int>(fraction * 100 + 0.5)) + " % of it";
      warnings->push_back("the memory caps of the tenants that may use GPU " + std::to_string(g) +
                          " (" + names + ") add up to " + sum +
                          ": caps are limits, not reservations; placement '" + placement +
                          "' may put sessions of all of them there, and an allocation within its "
                          "tenant's cap then fails when the GPU is full");
    }
  }
  return Status::ok();
}

Status load_config_file(const std::string& path, FileConfig* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::invalid_argument("cannot read the config file '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_config(ss.str(), path, out);
}

}  // namespace cuwire::server
