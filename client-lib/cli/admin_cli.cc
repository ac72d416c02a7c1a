#include "client-lib/cli/admin_cli.h"

#include <toml++/toml.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <poll.h>
#include <termios.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "client-lib/core/call_stats.h"
#include "client-lib/core/control_client.h"
#include "client-lib/core/token.h"
#include "protocol/address.h"
#include "protocol/histogram.h"
#include "protocol/secret_file.h"

namespace cuwire::client {
namespace {

using json = nlohmann::json;

struct Options {
  std::string server, token, token_file, ca, config;
  bool json = false;
  // stats
  std::string tenant;
  // top
  double interval = 1.0;
  int count = 0;
  // tenant set, tenant add
  std::string name, memory, compute;
  // tenant add: the new tenant's token file and settings
  std::string tenant_token_file, gpus, placement;
  int sms = 0, max_sessions = 0;
  bool borrow = false;
  // evict
  uint64_t session = 0;
};

void fail(const std::string& line) { std::fprintf(stderr, "cuwire: %s\n", line.c_str()); }

// A token file's first line; empty, with *error, when it cannot be read or holds none.
std::string first_line(const std::string& path, std::string* error) {
  std::string line;
  if (!read_first_line(path, &line, error)) {
    *error = "cannot read a token from " + path + ": " + *error;
    return "";
  }
  if (line.empty()) *error = "no token on the first line of " + path;
  return line;
}

// The server and the admin token: flags first, then the environment (CUWIRE_SERVER,
// CUWIRE_ADMIN_TOKEN, CUWIRE_TOKEN), then the server's own config file (--config: its first
// listen address and its admin_token or admin_token_file).
bool resolve(Options& o, ControlOptions* out) {
  std::string error;
  std::string config_listen, config_token;
  if (!o.config.empty()) {
    try {
      const toml::table t = toml::parse_file(o.config);
      if (auto* l = t["server"]["listen"].as_array(); l && !l->empty()) {
        if (auto v = (*l)[0].value<std::string>()) config_listen = *v;
      }
      if (auto v = t["server"]["admin_token"].value<std::string>()) config_token = *v;
      if (auto v = t["server"]["admin_token_file"].value<std::string>()) {
        config_token = first_line(*v, &error);
      }
    } catch (const std::exception& e) {
      error = o.config + ": " + e.what();
    }
    if (!error.empty()) {
      fail(error);
      return false;
    }
  }
  auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v ? v : "";
  };
  out->server = !o.server.empty()               ? o.server
                : !env("CUWIRE_SERVER").empty() ? env("CUWIRE_SERVER")
                : !config_listen.empty()        ? config_listen
                                                : kDefaultAddress;
  if (!o.token.empty()) {
    out->token = o.token;
  } else if (!o.token_file.empty()) {
    out->token = first_line(o.token_file, &error);
  } else if (!env("CUWIRE_ADMIN_TOKEN").empty()) {
    out->token = env("CUWIRE_ADMIN_TOKEN");
  } else if (!config_token.empty()) {
    out->token = config_token;
  } else {
    // CUWIRE_TOKEN, _FILE or _DIR: a tenant's; a grant directory's server goes with it.
    const Credentials c = credentials_from_environment();
    out->token = c.token;
    if (o.server.empty() && !c.server.empty()) out->server = c.server;
  }
  if (!error.empty()) {
    fail(error);
    return false;
  }
  out->ca_file = !o.ca.empty() ? o.ca : env("CUWIRE_CA");
  out->client_name = "cuwire";
  return true;
}

// Asks one command; prints why not and returns false on failure.
bool ask(const ControlOptions& c, const std::string& command, const json& args, json* answer,
         std::unique_ptr<ControlClient>* keep = nullptr) {
  std::unique_ptr<ControlClient> local;
  std::unique_ptr<ControlClient>& client = keep ? *keep : local;
  std::string body;
  // A kept connection the server closed meanwhile (idle) is made again, once.
  for (int attempt = 0;; ++attempt) {
    if (!client) {
      if (Status s = ControlClient::connect(c, &client); !s) {
        fail(s.message());
        return false;
      }
    }
    Status s = client->request(command, args.empty() ? "" : args.dump(), &body);
    if (s) break;
    client.reset();
    if (s.code() != Status::Code::kDisconnected || attempt > 0 || !keep) {
      fail(s.message());
      return false;
    }
  }
  *answer = json::parse(body, nullptr, false);
  if (answer->is_discarded()) {
    fail("gpu-server answered " + command + " with something that is not JSON");
    return false;
  }
  return true;
}

std::string fmt_seconds(double s) { return format_ns(static_cast<uint64_t>(s * 1e9)); }

std::string fmt_duration(double s) {
  char buf[32];
  const long t = static_cast<long>(s);
  if (t < 60)
    std::snprintf(buf, sizeof buf, "%lds", t);
  else if (t < 3600)
    std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
  else
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 3600, t / 60 % 60);
  return buf;
}

std::string fmt_memory(uint64_t b) { return b ? format_bytes(b) : "0"; }

template <typename T>
T get(const json& j, const char* key, T fallback = T()) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  try {
    return it->get<T>();
  } catch (const json::exception&) {
    return fallback;
  }
}

int print_gpus(const json& a) {
  if (const std::string why = get<std::string>(a, "backend_fallback"); !why.empty()) {
    std::printf("warning: simulated GPUs: backend auto found no usable GPU driver (%s)\n",
                why.c_str());
  }
  std::printf("%-4s %-28s %-22s %-9s %s\n", "GPU", "NAME", "MEMORY USED / TOTAL", "SESSIONS",
              "TENANTS");
  for (const json& g : a.value("gpus", json::array())) {
    std::string tenants;
    const json by_tenant = g.value("tenants", json::object());
    for (const auto& [name, n] : by_tenant.items()) {
      tenants += (tenants.empty() ? "" : ", ") + name + " " + std::to_string(n.get<int>());
    }
    const std::string memory = fmt_memory(get<uint64_t>(g, "memory_used")) + " / " +
                               fmt_memory(get<uint64_t>(g, "memory_total"));
    std::printf("%-4d %-28s %-22s %-9d %s\n", get<int>(g, "index"),
                get<std::string>(g, "name").c_str(), memory.c_str(), get<int>(g, "sessions"),
                tenants.empty() ? "-" : tenants.c_str());
  }
  return 0;
}

// `cuwire smi`: the caller's view (a tenant's: its GPUs, its cap as their memory, its own use,
// busy share and processes; the admin's: the whole GPUs), laid out as nvidia-smi lays out its
// table.
int print_smi(const json& a) {
  const std::string rule(79, '-');
  std::printf("+%s+\n", rule.c_str());
  char head[128];
  std::snprintf(head, sizeof head, " cuwire smi     Driver Version: %-14s CUDA Version: %s",
                get<std::string>(a, "driver_version").c_str(),
                get<std::string>(a, "cuda_version").c_str());
  std::printf("|%-79s|\n", head);
  std::printf("|%s|\n", rule.c_str());
  std::printf("| %-3s %-30s %-17s %-19s %-4s |\n", "GPU", "Name", "Bus-Id", "Memory-Usage", "Util");
  std::printf("|%s|\n", std::string(79, '=').c_str());
  const json gpus = a.value("gpus", json::array());
  for (const json& g : gpus) {
    const std::string memory = std::to_string(get<uint64_t>(g, "memory_used") >> 20) + "MiB / " +
                               std::to_string(get<uint64_t>(g, "memory_total") >> 20) + "MiB";
    const std::string util = std::to_string(get<int>(g, "utilization")) + "%";
    std::printf("| %3d %-30.30s %-17.17s %-19s %4s |\n", get<int>(g, "index"),
                get<std::string>(g, "name").c_str(), get<std::string>(g, "pci_bus_id").c_str(),
                memory.c_str(), util.c_str());
  }
  if (gpus.empty()) std::printf("| %-77s |\n", "No GPU in this view");
  std::printf("+%s+\n", rule.c_str());
  std::printf("| %-77s |\n", "Processes:");
  std::printf("| %-5s %-9s %-43s %-16s |\n", "GPU", "PID", "Process name", "GPU Memory");
  std::printf("|%s|\n", std::string(79, '=').c_str());
  int processes = 0;
  for (const json& g : gpus) {
    for (const json& p : g.value("processes", json::array())) {
      ++processes;
      const std::string memory = std::to_string(get<uint64_t>(p, "memory_used") >> 20) + "MiB";
      std::printf("| %5d %9llu %-43.43s %-16s |\n", get<int>(g, "index"),
                  static_cast<unsigned long long>(get<uint64_t>(p, "pid")),
                  get<std::string>(p, "name").c_str(), memory.c_str());
    }
  }
  if (!processes) std::printf("| %-77s |\n", "No running processes found");
  std::printf("+%s+\n", rule.c_str());
  return 0;
}

int print_sessions(const json& a) {
  const json list = a.value("sessions", json::array());
  if (list.empty()) {
    std::printf("no sessions\n");
    return 0;
  }
  std::printf("%-6s %-12s %-20s %-8s %-4s %-10s %-10s %-11s %s\n", "ID", "TENANT", "CLIENT", "PID",
              "GPU", "CONNECTED", "CALLS", "MEMORY", "PEER");
  for (const json& s : list) {
    const int gpu = get<int>(s, "gpu", -1);
    std::printf(
        "%-6llu %-12s %-20s %-8u %-4s %-10s %-10llu %-11s %s\n",
        static_cast<unsigned long long>(get<uint64_t>(s, "id")),
        get<std::string>(s, "tenant", "-").empty() ? "-" : get<std::string>(s, "tenant").c_str(),
        get<std::string>(s, "client").c_str(), get<unsigned>(s, "pid"),
        gpu < 0 ? "-" : std::to_string(gpu).c_str(),
        fmt_duration(get<double>(s, "connected_seconds")).c_str(),
        static_cast<unsigned long long>(get<uint64_t>(s, "calls")),
        fmt_memory(get<uint64_t>(s, "memory_used")).c_str(), get<std::string>(s, "peer").c_str());
  }
  return 0;
}

int print_stats(const json& a) {
  bool first = true;
  for (const json& t : a.value("tenants", json::array())) {
    if (!first) std::printf("\n");
    first = false;
    std::printf("tenant %s: %d sessions, %llu calls, %s host to device, %s device to host\n",
                get<std::string>(t, "tenant").c_str(), get<int>(t, "sessions"),
                static_cast<unsigned long long>(get<uint64_t>(t, "calls")),
                format_bytes(get<uint64_t>(t, "bytes_host_to_device")).c_str(),
                format_bytes(get<uint64_t>(t, "bytes_device_to_host")).c_str());
    const json calls = t.value("calls_by_name", json::array());
    if (calls.empty()) continue;
    std::printf("  %-36s %9s %7s %11s %11s %11s %11s %11s\n", "CALL", "CALLS", "ERRORS", "P50",
                "P99", "MEAN", "MAX", "QUEUE P99");
    for (const json& c : calls) {
      const json sv = c.value("service", json::object()), q = c.value("queue", json::object());
      std::printf(
          "  %-36s %9llu %7llu %11s %11s %11s %11s %11s\n", get<std::string>(c, "call").c_str(),
          static_cast<unsigned long long>(get<uint64_t>(c, "count")),
          static_cast<unsigned long long>(get<uint64_t>(c, "errors")),
          fmt_seconds(get<double>(sv, "p50")).c_str(), fmt_seconds(get<double>(sv, "p99")).c_str(),
          fmt_seconds(get<double>(sv, "mean")).c_str(), fmt_seconds(get<double>(sv, "max")).c_str(),
          fmt_seconds(get<double>(q, "p99")).c_str());
      const json codes = c.value("error_codes", json::object());
      for (const auto& [code, n] : codes.items()) {
        std::printf("  %-36s %9s %7llu %s\n", "", "",
                    static_cast<unsigned long long>(n.get<uint64_t>()), code.c_str());
      }
    }
  }
  if (first) std::printf("no tenants\n");
  return 0;
}

// ---- top

// One GPU x tenant's figures between two usage answers.
struct TopRow {
  int gpu = 0;
  std::string tenant;
  int sessions = 0;
  uint64_t memory_used = 0, memory_cap = 0;
  int compute_cap = 0;
  double busy_share = -1;  // percent of the GPU's time; -1: no interval yet
  double calls_per_second = -1;
  uint64_t p99_ns = 0;  // of the calls in the interval; 0: none
};

LatencyHistogram histogram_of(const json& buckets) {
  LatencyHistogram h;
  uint64_t count = 0;
  for (const json& b : buckets) {
    if (!b.is_array() || b.size() != 2) continue;
    const size_t i = b[0].get<size_t>();
    const uint64_t n = b[1].get<uint64_t>();
    if (i >= LatencyHistogram::kBuckets) continue;
    h.add_bucket(i, n);
    count += n;
  }
  // Extremes are not sent; a percentile is the midpoint of its bucket.
  h.add_summary(count, 0, 0, UINT64_MAX);
  return h;
}

std::vector<TopRow> top_rows(const json& now, const json* before,
                             std::map<int, std::string>* names) {
  std::vector<TopRow> rows;
  const double dt = before ? get<double>(now, "time") - get<double>(*before, "time") : 0;
  auto find_before = [&](int gpu, const std::string& tenant) -> const json* {
    // Pointers into *before itself (value() would answer copies).
    if (!before || !before->is_object()) return nullptr;
    auto gs = before->find("gpus");
    if (gs == before->end() || !gs->is_array()) return nullptr;
    for (const json& g : *gs) {
      if (!g.is_object() || get<int>(g, "index") != gpu) continue;
      auto ts = g.find("tenants");
      if (ts == g.end() || !ts->is_array()) continue;
      for (const json& t : *ts) {
        if (t.is_object() && get<std::string>(t, "tenant") == tenant) return &t;
      }
    }
    return nullptr;
  };
  for (const json& g : now.value("gpus", json::array())) {
    const int gpu = get<int>(g, "index");
    (*names)[gpu] = get<std::string>(g, "name");
    for (const json& t : g.value("tenants", json::array())) {
      TopRow r;
      r.gpu = gpu;
      r.tenant = get<std::string>(t, "tenant");
      r.sessions = get<int>(t, "sessions");
      r.memory_used = get<uint64_t>(t, "memory_used");
      r.memory_cap = get<uint64_t>(t, "memory_cap");
      r.compute_cap = get<int>(t, "compute_cap");
      const json* was = find_before(gpu, r.tenant);
      if (was && dt > 0) {
        r.busy_share =
            100.0 * (get<double>(t, "busy_seconds") - get<double>(*was, "busy_seconds")) / dt;
        r.calls_per_second =
            static_cast<double>(get<uint64_t>(t, "calls") -
                                std::min(get<uint64_t>(t, "calls"), get<uint64_t>(*was, "calls"))) /
            dt;
        // The interval's histogram: now's buckets less before's.
        LatencyHistogram h_now = histogram_of(t.value("service_buckets", json::array()));
        LatencyHistogram h_was = histogram_of(was->value("service_buckets", json::array()));
        LatencyHistogram delta;
        uint64_t count = 0;
        for (size_t i = 0; i < LatencyHistogram::kBuckets; ++i) {
          const uint64_t a = h_now.bucket(i), b = h_was.bucket(i);
          if (a > b) {
            delta.add_bucket(i, a - b);
            count += a - b;
          }
        }
        delta.add_summary(count, 0, 0, UINT64_MAX);
        r.p99_ns = count ? delta.quantile(0.99) : 0;
      }
      rows.push_back(r);
    }
  }
  return rows;
}

json rows_json(const std::vector<TopRow>& rows) {
  json out = json::array();
  for (const TopRow& r : rows) {
    json j = {{"gpu", r.gpu},
              {"tenant", r.tenant},
              {"sessions", r.sessions},
              {"memory_used", r.memory_used},
              {"memory_cap", r.memory_cap},
              {"compute_cap", r.compute_cap}};
    if (r.busy_share >= 0) {
      j["busy_percent"] = r.busy_share;
      j["calls_per_second"] = r.calls_per_second;
      j["p99_seconds"] = static_cast<double>(r.p99_ns) / 1e9;
    }
    out.push_back(j);
  }
  return out;
}

void print_top(const std::vector<TopRow>& rows, const std::map<int, std::string>& names,
               const std::string& server, double interval) {
  char when[32] = {};
  const std::time_t t = std::time(nullptr);
  std::strftime(when, sizeof when, "%H:%M:%S", std::localtime(&t));
  std::printf("cuwire top: %s  %s  every %.1f s (Ctrl-C quits)\n\n", server.c_str(), when,
              interval);
  std::printf("%-4s %-14s %-8s %-24s %-18s %-10s %s\n", "GPU", "TENANT", "SESSIONS",
              "MEMORY USED / CAP", "BUSY / CAP", "CALLS/S", "P99");
  int last_gpu = -1;
  for (const TopRow& r : rows) {
    if (r.gpu != last_gpu) {
      auto it = names.find(r.gpu);
      std::printf("%-4d %s\n", r.gpu, it == names.end() ? "" : it->second.c_str());
      last_gpu = r.gpu;
    }
    char busy[32], calls[32];
    const std::string cap = r.compute_cap ? std::to_string(r.compute_cap) + "%" : "-";
    if (r.busy_share >= 0) {
      std::snprintf(busy, sizeof busy, "%.1f%% / %s", r.busy_share, cap.c_str());
      std::snprintf(calls, sizeof calls, "%.0f", r.calls_per_second);
    } else {
      std::snprintf(busy, sizeof busy, "... / %s", cap.c_str());
      std::snprintf(calls, sizeof calls, "...");
    }
    const std::string memory = fmt_memory(r.memory_used) + " / " + fmt_memory(r.memory_cap);
    std::printf("%-4s %-14s %-8d %-24s %-18s %-10s %s\n", "", r.tenant.c_str(), r.sessions,
                memory.c_str(), busy, calls, r.p99_ns ? format_ns(r.p99_ns).c_str() : "-");
  }
  if (rows.empty()) std::printf("(no GPUs)\n");
}

volatile std::sig_atomic_t g_stop = 0;

int run_top(const ControlOptions& c, const Options& o) {
  std::signal(SIGINT, [](int) { g_stop = 1; });
  std::signal(SIGTERM, [](int) { g_stop = 1; });
  const bool tty = isatty(STDOUT_FILENO) && !o.json;
  std::unique_ptr<ControlClient> client;
  json before;
  bool have_before = false;
  for (int n = 0; !g_stop && (o.count <= 0 || n < o.count); ++n) {
    json now;
    if (!ask(c, "usage", json::object(), &now, &client)) return 1;
    std::map<int, std::string> names;
    const auto rows = top_rows(now, have_before ? &before : nullptr, &names);
    if (o.json) {
      std::printf("%s\n", json{{"time", now["time"]}, {"rows", rows_json(rows)}}.dump().c_str());
    } else {
      if (tty)
        std::printf("\033[H\033[2J");  // home, clear: the view is redrawn in place
      else if (n > 0)
        std::printf("\n");
      print_top(rows, names, c.server, o.interval);
    }
    std::fflush(stdout);
    before = std::move(now);
    have_before = true;
    if (o.count > 0 && n + 1 >= o.count) break;
    const auto until = std::chrono::steady_clock::now() +
                       std::chrono::milliseconds(static_cast<int64_t>(o.interval * 1000));
    while (!g_stop && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  return 0;
}

// admin_prefix: `tenant add`, whose --token-file is the new tenant's, names the admin token's
// options --admin-token and --admin-token-file.
void add_connection_options(CLI::App* sub, Options& o, bool admin_prefix = false) {
  sub->add_option("--server", o.server,
                  "gpu-server address (default: $CUWIRE_SERVER, else the --config file's first "
                  "listen address, else unix:/tmp/cuwire.sock)");
  sub->add_option(admin_prefix ? "--admin-token" : "--token", o.token,
                  "the admin token (default: $CUWIRE_ADMIN_TOKEN, else the --config file's, "
                  "else $CUWIRE_TOKEN)");
  sub->add_option(admin_prefix ? "--admin-token-file" : "--token-file", o.token_file,
                  "read the admin token from this file");
  sub->add_option("--config", o.config,
                  "the server's config file: its admin token and address are used");
  sub->add_option("--ca", o.ca, "CA file for tls: servers (default: $CUWIRE_CA)");
  sub->add_flag("--json", o.json, "print the server's answer as JSON");
}

}  // namespace

void add_admin_commands(CLI::App& app, AdminCommands* out) {
  auto o = std::make_shared<Options>();
  // Runs `command`, prints its answer with `print` (or as JSON).
  auto simple = [o](const char* command, std::function<json()> args, int (*print)(const json&)) {
    return [o, command, args, print]() -> int {
      ControlOptions c;
      if (!resolve(*o, &c)) return 2;
      json a;
      if (!ask(c, command, args(), &a)) return 1;
      if (o->json) {
        std::printf("%s\n", a.dump(2).c_str());
        return 0;
      }
      return print(a);
    };
  };
  auto none = [] { return json::object(); };

  auto* gpus = app.add_subcommand("gpus", "the server's GPUs: name, memory, sessions");
  add_connection_options(gpus, *o);
  gpus->callback([out, f = simple("gpus", none, print_gpus)] { out->run = f; });

  auto* smi = app.add_subcommand(
      "smi",
      "an nvidia-smi-like table of what this token may see: with a tenant's token its GPUs, "
      "its memory used of its cap, its busy share and its processes; with the admin's, the "
      "whole GPUs");
  add_connection_options(smi, *o);
  smi->callback([out, f = simple("view", none, print_smi)] { out->run = f; });

  auto* sessions = app.add_subcommand("sessions", "the server's sessions, one line each");
  add_connection_options(sessions, *o);
  sessions->callback([out, f = simple("sessions", none, print_sessions)] { out->run = f; });

  auto* stats = app.add_subcommand("stats", "the server's latency tables, per tenant and call");
  add_connection_options(stats, *o);
  stats->add_option("--tenant", o->tenant, "this tenant's only");
  stats->callback([o, out,
                   f = simple(
                       "stats",
                       [o] {
                         json a = json::object();
                         if (!o->tenant.empty()) a["tenant"] = o->tenant;
                         return a;
                       },
                       print_stats)] { out->run = f; });

  auto* top = app.add_subcommand("top",
                                 "a live view: per GPU and tenant, memory of cap, busy "
                                 "share of cap, calls per second, p99");
  add_connection_options(top, *o);
  top->add_option("--interval", o->interval, "seconds between refreshes")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  top->add_option("--count", o->count, "stop after this many refreshes (0: until Ctrl-C)")
      ->check(CLI::NonNegativeNumber);
  top->callback([o, out] {
    out->run = [o] {
      ControlOptions c;
      if (!resolve(*o, &c)) return 2;
      return run_top(c, *o);
    };
  });

  auto* tenant =
      app.add_subcommand("tenant", "add, change or remove tenants while the server runs");
  tenant->require_subcommand(1);
  auto* set = tenant->add_subcommand("set",
                                     "set a tenant's caps now (until the next reload "
                                     "or restart, which read the config file)");
  add_connection_options(set, *o);
  set->add_option("name", o->name, "the tenant")->required();
  set->add_option("--memory", o->memory,
                  "memory cap on each GPU: a size (8GiB), a share (0.25 or 25%), or none");
  set->add_option("--compute", o->compute, "compute cap: percent of each GPU (1-100), or none");
  set->callback([o, out] {
    out->run = [o] {
      if (o->memory.empty() && o->compute.empty()) {
        fail("tenant set: give --memory, --compute or both");
        return 2;
      }
      ControlOptions c;
      if (!resolve(*o, &c)) return 2;
      json args = {{"name", o->name}};
      if (!o->memory.empty()) args["memory"] = o->memory;
      if (!o->compute.empty()) args["compute"] = o->compute;
      json a;
      if (!ask(c, "tenant-set", args, &a)) return 1;
      if (o->json) {
        std::printf("%s\n", a.dump(2).c_str());
        return 0;
      }
      auto text = [](const json& caps) {
        std::string m = "uncapped";
        if (uint64_t b = get<uint64_t>(caps, "memory_bytes")) {
          m = format_bytes(b);
        } else if (double f = get<double>(caps, "memory_fraction"); f > 0) {
          char buf[32];
          std::snprintf(buf, sizeof buf, "%g%% of each GPU", f * 100);
          m = buf;
        }
        const int compute = get<int>(caps, "compute");
        return "memory " + m + ", compute " +
               (compute ? std::to_string(compute) + "%" : std::string("uncapped"));
      };
      std::printf("tenant %s: %s (was %s)\n", get<std::string>(a, "tenant").c_str(),
                  text(a["caps"]).c_str(), text(a["was"]).c_str());
      for (const json& n : a.value("notes", json::array())) {
        std::printf("note: %s\n", n.get<std::string>().c_str());
      }
      return 0;
    };
  });

  auto* add = tenant->add_subcommand("add",
                                     "serve a new tenant from now on (until `tenant remove` or "
                                     "a restart; a reload keeps it)");
  add_connection_options(add, *o, true);
  add->add_option("name", o->name, "the tenant's name (letters, digits, '.', '_', '-')")
      ->required();
  add->add_option("--token-file", o->tenant_token_file,
                  "the tenant's token: the first line of this file")
      ->required();
  add->add_option("--memory", o->memory,
                  "memory cap on each GPU: a size (4096MiB), a share (0.25 or 25%)");
  add->add_option("--compute", o->compute, "compute cap: percent of each GPU's time (1-100)");
  add->add_option("--sms", o->sms, "SMs of each GPU it may use, its own (an SM partition)");
  add->add_option("--gpus", o->gpus, "the GPUs it may use, such as 0,1 (default: any)");
  add->add_option("--max-sessions", o->max_sessions, "sessions at once (default: no limit)");
  add->add_option("--placement", o->placement, "spread or binpack (default: the server's)");
  add->add_flag("--borrow", o->borrow, "may use GPU time nobody else wants");
  add->callback([o, out] {
    out->run = [o] {
      std::string error;
      const std::string token = first_line(o->tenant_token_file, &error);
      if (!error.empty() || token.empty()) {
        fail("tenant add: " + (error.empty() ? o->tenant_token_file + " holds no token" : error));
        return 2;
      }
      ControlOptions c;
      if (!resolve(*o, &c)) return 2;
      json args = {{"name", o->name}, {"token", token}};
      if (!o->memory.empty()) args["memory"] = o->memory;
      if (!o->compute.empty()) {
        std::string digits = o->compute;
        if (!digits.empty() && digits.back() == '%') digits.pop_back();
        char* end = nullptr;
        const long v = std::strtol(digits.c_str(), &end, 10);
        if (digits.empty() || *end) {
          fail("tenant add: --compute is a percent such as 30");
          return 2;
        }
        args["compute"] = v;
      }
      if (o->sms) args["sms"] = o->sms;
      if (o->max_sessions) args["max_sessions"] = o->max_sessions;
      if (!o->gpus.empty()) args["gpus"] = o->gpus;
      if (!o->placement.empty()) args["placement"] = o->placement;
      if (o->borrow) args["borrow"] = true;
      json a;
      if (!ask(c, "tenant-add", args, &a)) return 1;
      if (o->json) {
        std::printf("%s\n", a.dump(2).c_str());
        return 0;
      }
      std::printf("tenant %s added\n", get<std::string>(a, "tenant").c_str());
      for (const json& n : a.value("notes", json::array())) {
        std::printf("note: %s\n", n.get<std::string>().c_str());
      }
      return 0;
    };
  });

  auto* remove = tenant->add_subcommand(
      "remove", "stop serving a tenant added at run time: its sessions are evicted");
  add_connection_options(remove, *o);
  remove->add_option("name", o->name, "the tenant")->required();
  remove->callback([o, out] {
    out->run = [o] {
      ControlOptions c;
      if (!resolve(*o, &c)) return 2;
      json a;
      if (!ask(c, "tenant-remove", json{{"name", o->name}}, &a)) return 1;
      if (o->json) {
        std::printf("%s\n", a.dump(2).c_str());
        return 0;
      }
      std::printf("tenant %s removed; %llu session(s) evicted\n",
                  get<std::string>(a, "tenant").c_str(),
                  static_cast<unsigned long long>(get<uint64_t>(a, "sessions_evicted")));
      return 0;
    };
  });

  auto* evict = app.add_subcommand("evict",
                                   "end a session: its client gets errors from then "
                                   "on, and what it held is reclaimed");
  add_connection_options(evict, *o);
  evict->add_option("session", o->session, "the session's id (cuwire sessions)")->required();
  evict->callback([o, out] {
    out->run = [o] {
      ControlOptions c;
      if (!resolve(*o, &c)) return 2;
      json a;
      if (!ask(c, "evict", json{{"session", o->session}}, &a)) return 1;
      if (o->json) {
        std::printf("%s\n", a.dump(2).c_str());
        return 0;
      }
      const std::string tenant = get<std::string>(a, "tenant");
      std::printf("session %llu (%s%s) evicted: %s\n",
                  static_cast<unsigned long long>(get<uint64_t>(a, "session")),
                  tenant.empty() ? "" : ("tenant " + tenant + ", ").c_str(),
                  get<std::string>(a, "client").c_str(),
                  get<bool>(a, "ended") ? "it has ended and what it held is reclaimed"
                                        : "it ends once its current call finishes");
      return 0;
    };
  });
}

}  // namespace cuwire::client
