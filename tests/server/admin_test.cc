// The admin API through the `cuwire` command line on a server with two tenants, and
// libnvidia-ml.so.1 as nvidia-smi-like tools see it (server/ops/admin.h,
// client-lib/cli/admin_cli.h, client-lib/nvml/nvml.cc).

#include <gtest/gtest.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "client-lib/core/control_client.h"
#include "server/ops/config_file.h"
#include "tests/support/test_support.h"

namespace cuwire::testing {
namespace {

using json = nlohmann::json;

const char kConfig[] = R"(
[server]
admin_token = "admin-secret"
[[tenant]]
name = "alice"
token = "alice-token"
memory = "1GiB"
compute = 30
[[tenant]]
name = "bob"
token = "bob-token"
gpus = [1]
)";

class AdminTest : public ::testing::Test {
 protected:
  AdminTest() : server_(kConfig, 2) {}

  std::vector<std::string> env(const std::string& token) const {
    std::vector<std::string> e = server_.env(token);
    e.push_back("CUWIRE_ADMIN_TOKEN=");
    return e;
  }
  std::vector<std::string> admin_env() const {
    std::vector<std::string> e = server_.env("");
    e.push_back("CUWIRE_ADMIN_TOKEN=admin-secret");
    return e;
  }
  // Runs the CLI with the admin token; *rc gets its exit status. Its stdout, all of it.
  std::string cli(const std::vector<std::string>& args, int* rc,
                  const std::vector<std::string>& env = {}) {
    ChildProcess p(CUWIRE_CLI, args, env.empty() ? admin_env() : env);
    const std::string out = p.rest();
    *rc = p.wait();
    return out;
  }
  json cli_json(const std::vector<std::string>& args) {
    int rc = -1;
    std::vector<std::string> a = args;
    a.push_back("--json");
    const std::string out = cli(a, &rc);
    EXPECT_EQ(rc, 0) << out;
    json j = json::parse(out, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << out;
    return j;
  }
  // A hold_probe of `token` holding `mib`, ready.
  std::unique_ptr<ChildProcess> hold(const std::string& token, int mib) {
    auto p = std::make_unique<ChildProcess>(
        HOLD_PROBE, std::vector<std::string>{std::to_string(mib)}, server_.env(token));
    EXPECT_EQ(p->line(), "ready");
    return p;
  }
  TenantServer server_;
};

TEST_F(AdminTest, RefusedToTenantsAndWrongTokens) {
  int rc = -1;
  EXPECT_EQ(cli({"sessions"}, &rc, env("alice-token")), "");
  EXPECT_EQ(rc, 1);
  EXPECT_EQ(cli({"sessions"}, &rc, env("nobody")), "");
  EXPECT_EQ(rc, 1);
  EXPECT_EQ(cli({"tenant", "set", "alice", "--memory", "none"}, &rc, env("bob-token")), "");
  EXPECT_EQ(rc, 1);
  // Over the protocol: the tenant's token is refused the admin commands with a reason, and
  // may ask its own view.
  client::ControlOptions o;
  o.server = server_.env("")[0].substr(std::string("CUWIRE_SERVER=").size());
  o.token = "alice-token";
  std::unique_ptr<client::ControlClient> c;
  ASSERT_TRUE(client::ControlClient::connect(o, &c).is_ok());
  std::string body;
  Status s = c->request("evict", R"({"session": 1})", &body);
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("admin token"), std::string::npos) << s.message();
  s = c->request("no-such-command", "", &body);
  EXPECT_NE(s.message().find("unknown command"), std::string::npos) << s.message();
  s = c->request("gpus", "[1, 2]", &body);
  EXPECT_FALSE(s.is_ok());
  ASSERT_TRUE(c->request("view", "", &body).is_ok());
  const json view = json::parse(body);
  EXPECT_EQ(view["gpus"].size(), 2u);  // alice may use both
  o.token = "wrong";
  std::unique_ptr<client::ControlClient> c2;
  s = client::ControlClient::connect(o, &c2);
  EXPECT_NE(s.message().find("unauthorized"), std::string::npos) << s.message();
}

// Control connections are bounded per tenant, apart from sessions: a tenant that holds its
// most keeps neither the admin nor another tenant's sessions out.
TEST_F(AdminTest, ControlConnectionsAreBoundedPerTenant) {
  client::ControlOptions o;
  o.server = server_.env("")[0].substr(std::string("CUWIRE_SERVER=").size());
  o.token = "alice-token";
  std::vector<std::unique_ptr<client::ControlClient>> held;
  for (int i = 0; i < 8; ++i) {
    std::unique_ptr<client::ControlClient> c;
    ASSERT_TRUE(client::ControlClient::connect(o, &c).is_ok()) << i;
    held.push_back(std::move(c));
  }
  std::unique_ptr<client::ControlClient> over;
  Status s = client::ControlClient::connect(o, &over);
  EXPECT_NE(s.message().find("8 control connections of this tenant are open"), std::string::npos)
      << s.message();
  auto b = hold("bob-token", 16);  // a session of bob's
  int rc = -1;
  cli({"sessions"}, &rc);  // the admin's
  EXPECT_EQ(rc, 0);
  // One gone, one may come.
  held.pop_back();
  for (int i = 0; i < 100 && !client::ControlClient::connect(o, &over).is_ok(); ++i) usleep(10000);
  EXPECT_TRUE(over != nullptr);
  // Arguments larger than any command takes are refused.
  std::string body;
  EXPECT_TRUE(held[0]->request("view", std::string(5000, ' '), &body).code() != Status::Code::kOk);
}

TEST_F(AdminTest, GpusSessionsAndStatsOfTwoTenants) {
  auto a = hold("alice-token", 64);
  auto b = hold("bob-token", 128);

  const json gpus = cli_json({"gpus"});
  ASSERT_EQ(gpus["gpus"].size(), 2u);
  int sessions = 0;
  uint64_t used = 0;
  for (const json& g : gpus["gpus"]) {
    sessions += g["sessions"].get<int>();
    used += g["memory_used"].get<uint64_t>();
    EXPECT_EQ(g["memory_total"].get<uint64_t>(), 16ull << 30);
    EXPECT_EQ(g["uuid"].get<std::string>().rfind("GPU-", 0), 0u);
  }
  EXPECT_EQ(sessions, 2);
  EXPECT_EQ(used, 192ull << 20);
  EXPECT_EQ(gpus["gpus"][1]["tenants"]["bob"], 1);  // bob may use GPU 1 only

  int rc = -1;
  const std::string table = cli({"gpus"}, &rc);
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(table.rfind("GPU  NAME", 0), 0u) << table;
  EXPECT_NE(table.find("bob 1"), std::string::npos) << table;

  const json list = cli_json({"sessions"});
  ASSERT_EQ(list["sessions"].size(), 2u);
  std::map<std::string, json> by_tenant;
  for (const json& s : list["sessions"]) by_tenant[s["tenant"]] = s;
  EXPECT_EQ(by_tenant["alice"]["memory_used"].get<uint64_t>(), 64ull << 20);
  EXPECT_EQ(by_tenant["bob"]["memory_used"].get<uint64_t>(), 128ull << 20);
  EXPECT_EQ(by_tenant["bob"]["gpu"], 1);
  EXPECT_EQ(by_tenant["alice"]["client"], "hold_probe");
  EXPECT_GT(by_tenant["alice"]["calls"].get<uint64_t>(), 0u);
  const std::string lines = cli({"sessions"}, &rc);
  EXPECT_NE(lines.find("alice"), std::string::npos) << lines;
  EXPECT_NE(lines.find("hold_probe"), std::string::npos) << lines;

  const json stats = cli_json({"stats", "--tenant", "alice"});
  ASSERT_EQ(stats["tenants"].size(), 1u);
  const json& alice = stats["tenants"][0];
  EXPECT_EQ(alice["tenant"], "alice");
  bool saw_alloc = false;
  for (const json& c : alice["calls_by_name"]) {
    if (c["call"] == "cuMemAlloc_v2") {
      saw_alloc = true;
      EXPECT_EQ(c["count"], 1);
      EXPECT_GT(c["service"]["p99"].get<double>(), 0);
    }
  }
  EXPECT_TRUE(saw_alloc) << alice.dump();
  const std::string both = cli({"stats"}, &rc);
  EXPECT_NE(both.find("tenant alice: 1 sessions"), std::string::npos) << both;
  EXPECT_NE(both.find("tenant bob: 1 sessions"), std::string::npos) << both;
  EXPECT_NE(both.find("cuMemAlloc_v2"), std::string::npos) << both;
  EXPECT_EQ(cli({"stats", "--tenant", "carol"}, &rc), "");
  EXPECT_EQ(rc, 1);
}

TEST_F(AdminTest, TenantSetChangesCapsWhileSessionsRun) {
  int rc = -1;
  std::string out = cli({"tenant", "set", "alice", "--memory", "128MiB"}, &rc);
  EXPECT_EQ(rc, 0);
  EXPECT_NE(out.find("tenant alice: memory 128.0 MiB, compute 30% (was memory 1024.0 MiB"),
            std::string::npos)
      << out;
  // A new session of alice's holds 2 blocks of 64 MiB now.
  ChildProcess probe(CAP_PROBE, {"linear", "16"}, server_.env("alice-token"));
  const std::string line = probe.line();
  EXPECT_EQ(line.rfind("blocks 2 error CUDA_ERROR_OUT_OF_MEMORY", 0), 0u) << line;
  probe.wait();
  const json set = cli_json({"tenant", "set", "alice", "--memory", "25%", "--compute", "none"});
  EXPECT_EQ(set["caps"]["memory_fraction"], 0.25);
  EXPECT_EQ(set["caps"]["compute"], 0);
  EXPECT_EQ(set["was"]["memory_bytes"].get<uint64_t>(), 128ull << 20);
  // Over 100 percent on GPU 1 together, an unknown tenant, a bad size: refused.
  cli({"tenant", "set", "alice", "--compute", "60"}, &rc);
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(cli({"tenant", "set", "bob", "--compute", "50"}, &rc), "");
  EXPECT_EQ(rc, 1);
  EXPECT_EQ(cli({"tenant", "set", "carol", "--memory", "1GiB"}, &rc), "");
  EXPECT_EQ(rc, 1);
  EXPECT_EQ(cli({"tenant", "set", "bob", "--memory", "lots"}, &rc), "");
  EXPECT_EQ(rc, 1);
  // A compute cap of 0 is an error, not "uncapped" (that is `none`).
  EXPECT_EQ(cli({"tenant", "set", "bob", "--compute", "0"}, &rc), "");
  EXPECT_EQ(rc, 1);
  EXPECT_EQ(cli({"tenant", "set", "bob", "--compute", "0%"}, &rc), "");
  EXPECT_EQ(rc, 1);
}

// A tenant added at run time: its token opens sessions held to its caps, it is listed as made
// at run time, a reload keeps it, the config's checks hold for it, and removing it evicts its
// sessions and refuses its token from then on.
TEST_F(AdminTest, TenantsAddedAndRemovedAtRunTime) {
  TempDir dir;
  const std::string token_file = dir.file("carol.token");
  {
    std::ofstream f(token_file);
    f << "carol-token\n";
  }
  int rc = -1;
  // Sessions in worker processes behind a relay (the variant): the relay leaves busy time and
  // compute caps to its upstream, so the tenant is added without one there.
  const char* isolation = std::getenv("CUWIRE_TEST_ISOLATION");
  const bool workers = isolation && *isolation && std::string(isolation) != "none";
  std::vector<std::string> add{"tenant",   "add",      "carol", "--token-file",
                               token_file, "--memory", "128MiB"};
  if (!workers) add.insert(add.end(), {"--compute", "20"});
  std::string out = cli(add, &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("tenant carol added"), std::string::npos) << out;
  // Held to its cap: two blocks of 64 MiB, as a configured tenant with 128 MiB is.
  {
    ChildProcess probe(CAP_PROBE, {"linear", "16"}, server_.env("carol-token"));
    const std::string line = probe.line();
    EXPECT_EQ(line.rfind("blocks 2 error CUDA_ERROR_OUT_OF_MEMORY", 0), 0u) << line;
    probe.wait();
  }
  const json stats = cli_json({"stats", "--tenant", "carol"});
  ASSERT_EQ(stats["tenants"].size(), 1u);
  EXPECT_EQ(stats["tenants"][0]["runtime"], true);
  EXPECT_EQ(cli_json({"stats", "--tenant", "alice"})["tenants"][0]["runtime"], false);
  // The config's checks: a name or token taken, compute over 100 % on a GPU, a bad size.
  EXPECT_EQ(cli({"tenant", "add", "carol", "--token-file", token_file}, &rc), "");
  EXPECT_EQ(rc, 1);
  EXPECT_EQ(cli({"tenant", "add", "dave", "--token-file", token_file}, &rc), "");
  EXPECT_EQ(rc, 1);
  const std::string dave_file = dir.file("dave.token");
  {
    std::ofstream f(dave_file);
    f << "dave-token\n";
  }
  if (!workers) {
    EXPECT_EQ(cli({"tenant", "add", "dave", "--token-file", dave_file, "--compute", "60"}, &rc),
              "");
    EXPECT_EQ(rc, 1);  // alice 30 + carol 20 + 60 on GPU 0
  }
  EXPECT_EQ(cli({"tenant", "add", "dave", "--token-file", dave_file, "--memory", "8GB!"}, &rc), "");
  EXPECT_EQ(rc, 1);
  EXPECT_EQ(cli({"tenant", "add", "d@ve", "--token-file", dave_file}, &rc), "");
  EXPECT_EQ(rc, 1);
  // A configured tenant is not removed at run time.
  EXPECT_EQ(cli({"tenant", "remove", "alice"}, &rc), "");
  EXPECT_EQ(rc, 1);
  // A reload of the file (which does not name carol) keeps carol.
  server::FileConfig file;
  ASSERT_TRUE(server::parse_config(kConfig, "admin.toml", &file).is_ok());
  server_->reload(file.tenants);
  EXPECT_EQ(cli_json({"stats", "--tenant", "carol"})["tenants"].size(), 1u);
  // Removed while a session of carol's holds memory: the session is evicted, its memory
  // reclaimed, and the token refused from then on.
  auto held = hold("carol-token", 64);
  const json removed = cli_json({"tenant", "remove", "carol"});
  EXPECT_EQ(removed["sessions_evicted"], 1);
  EXPECT_EQ(removed["ended"], true);
  EXPECT_EQ(removed["retired"], true);  // nothing of it is left: forgotten, freed
  held->send("go\n");
  const std::string what = held->line();
  EXPECT_EQ(what.rfind("after CUDA_ERROR_", 0), 0u) << what;
  EXPECT_EQ(cli({"stats", "--tenant", "carol"}, &rc), "");
  EXPECT_EQ(rc, 1);
  ChildProcess refused(CAP_PROBE, {"linear", "1"}, server_.env("carol-token"));
  EXPECT_EQ(refused.line().rfind("blocks 0", 0), 0u);
  refused.wait();
  uint64_t used = 0;
  const json gpus = cli_json({"gpus"});  // kept: the loop reads into it
  for (const json& g : gpus["gpus"]) used += g["memory_used"].get<uint64_t>();
  EXPECT_EQ(used, 0u);
  // Its name again, with another cap: a tenant of its own, nothing of the old one's.
  out = cli({"tenant", "add", "carol", "--token-file", token_file, "--memory", "192MiB"}, &rc);
  EXPECT_EQ(rc, 0) << out;
  {
    ChildProcess probe(CAP_PROBE, {"linear", "16"}, server_.env("carol-token"));
    const std::string line = probe.line();
    EXPECT_EQ(line.rfind("blocks 3 error CUDA_ERROR_OUT_OF_MEMORY", 0), 0u) << line;
    probe.wait();
  }
  EXPECT_EQ(cli_json({"tenant", "remove", "carol"})["retired"], true);
}

// A tenant's own token: gpus, stats and smi answer within its scope, never another tenant's.
TEST_F(AdminTest, ATenantSeesItsOwnScope) {
  auto a = hold("alice-token", 64);
  auto b = hold("bob-token", 32);
  int rc = -1;
  std::string out = cli({"gpus", "--json"}, &rc, env("alice-token"));
  ASSERT_EQ(rc, 0) << out;
  json gpus = json::parse(out);
  ASSERT_EQ(gpus["gpus"].size(), 2u);  // alice may use both
  uint64_t used = 0;
  for (const json& g : gpus["gpus"]) {
    EXPECT_EQ(g["memory_total"].get<uint64_t>(), 1ull << 30);  // its 1 GiB cap
    used += g["memory_used"].get<uint64_t>();
    EXPECT_FALSE(g["tenants"].contains("bob")) << g.dump();
  }
  EXPECT_GE(used, 64ull << 20);
  EXPECT_LT(used, 96ull << 20);  // bob's 32 MiB are not in it
  out = cli({"gpus", "--json"}, &rc, env("bob-token"));
  ASSERT_EQ(rc, 0) << out;
  gpus = json::parse(out);
  ASSERT_EQ(gpus["gpus"].size(), 1u);  // bob: GPU 1 only
  EXPECT_EQ(gpus["gpus"][0]["index"], 1);
  out = cli({"stats", "--json"}, &rc, env("bob-token"));
  ASSERT_EQ(rc, 0) << out;
  const json stats = json::parse(out);
  ASSERT_EQ(stats["tenants"].size(), 1u);
  EXPECT_EQ(stats["tenants"][0]["tenant"], "bob");
  EXPECT_EQ(cli({"stats", "--tenant", "alice"}, &rc, env("bob-token")), "");
  EXPECT_EQ(rc, 1);
  // smi: nvidia-smi's layout, bob's GPU with its memory of the whole card, its one process.
  out = cli({"smi"}, &rc, env("bob-token"));
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("cuwire smi"), std::string::npos) << out;
  EXPECT_NE(out.find("Memory-Usage"), std::string::npos) << out;
  EXPECT_NE(out.find("hold_probe"), std::string::npos) << out;
  EXPECT_EQ(out.find("No running processes found"), std::string::npos) << out;
  out = cli({"smi"}, &rc, env("alice-token"));
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("/ 1024MiB"), std::string::npos) << out;  // its cap as the total
  a->send("go\n");
  b->send("go\n");
}

TEST_F(AdminTest, EvictReclaimsAndTheClientGetsErrors) {
  // alice's probe with its stderr: the client library says why its session ended.
  auto a = std::make_unique<ChildProcess>(
      "/bin/sh", std::vector<std::string>{"-c", std::string("exec ") + HOLD_PROBE + " 64 2>&1"},
      server_.env("alice-token"));
  ASSERT_EQ(a->line(), "ready");
  auto b = hold("bob-token", 32);
  const json list = cli_json({"sessions"});
  uint64_t alice_id = 0;
  for (const json& s : list["sessions"]) {
    if (s["tenant"] == "alice") alice_id = s["id"];
  }
  ASSERT_NE(alice_id, 0u);
  int rc = -1;
  const std::string out = cli({"evict", std::to_string(alice_id)}, &rc);
  EXPECT_EQ(rc, 0);
  EXPECT_NE(out.find("evicted: it has ended and what it held is reclaimed"), std::string::npos)
      << out;
  const json after = cli_json({"sessions"});
  ASSERT_EQ(after["sessions"].size(), 1u);
  EXPECT_EQ(after["sessions"][0]["tenant"], "bob");
  uint64_t used = 0;
  const json gpus = cli_json({"gpus"});
  for (const json& g : gpus["gpus"]) used += g["memory_used"].get<uint64_t>();
  EXPECT_EQ(used, 32ull << 20);  // alice's 64 MiB went with its session
  a->send("go\n");
  std::string said, what;
  while (!(what = a->line()).empty() && what.rfind("after ", 0) != 0) said += what + "\n";
  EXPECT_EQ(what.rfind("after CUDA_ERROR_", 0), 0u) << what;
  EXPECT_NE(said.find("cuwire: lost gpu-server at "), std::string::npos) << said;
  EXPECT_NE(said.find(": the session was evicted by the server's admin\n"), std::string::npos)
      << said;
  // bob's session is untouched.
  b->send("go\n");
  EXPECT_EQ(b->line(), "after CUDA_SUCCESS");
  EXPECT_EQ(cli({"evict", "999999"}, &rc), "");
  EXPECT_EQ(rc, 1);
}

TEST_F(AdminTest, TopShowsEachGpuAndTenant) {
  auto a = hold("alice-token", 64);
  int rc = -1;
  const std::string out = cli({"top", "--count", "2", "--interval", "0.2", "--json"}, &rc);
  EXPECT_EQ(rc, 0);
  std::vector<json> frames;
  size_t at = 0;
  while (at < out.size()) {
    const size_t nl = out.find('\n', at);
    frames.push_back(json::parse(out.substr(at, nl - at)));
    at = nl + 1;
  }
  ASSERT_EQ(frames.size(), 2u) << out;
  // GPU 0: alice and (not) bob; GPU 1: both.
  std::vector<std::string> rows;
  for (const json& r : frames[1]["rows"]) {
    rows.push_back(std::to_string(r["gpu"].get<int>()) + " " + r["tenant"].get<std::string>());
    EXPECT_TRUE(r.contains("calls_per_second")) << r.dump();
    EXPECT_TRUE(r.contains("busy_percent")) << r.dump();
    if (r["tenant"] == "alice") {
      EXPECT_EQ(r["memory_cap"].get<uint64_t>(), 1ull << 30);
      EXPECT_EQ(r["compute_cap"], 30);
    }
  }
  EXPECT_EQ(rows, (std::vector<std::string>{"0 alice", "1 alice", "1 bob"}));
  EXPECT_FALSE(frames[0]["rows"][0].contains("calls_per_second"));  // no interval yet
  const std::string text = cli({"top", "--count", "1"}, &rc);
  EXPECT_EQ(rc, 0);
  EXPECT_NE(text.find("TENANT"), std::string::npos) << text;
  EXPECT_NE(text.find("64.0 MiB / 1024.0 MiB"), std::string::npos) << text;
}

// What nvidia-smi -L and --query-gpu would print, under `cuwire run`, for each tenant.
TEST_F(AdminTest, NvmlAnswersForTheTenant) {
  auto a = hold("alice-token", 64);
  ChildProcess smi(CUWIRE_CLI, {"run", "--", NVML_SMI}, server_.env("alice-token"));
  std::vector<std::string> lines;
  for (std::string l; !(l = smi.line()).empty();) lines.push_back(l);
  EXPECT_EQ(smi.wait(), 0);
  ASSERT_GE(lines.size(), 12u) << lines.size();
  EXPECT_EQ(lines[0], "before init: Uninitialized");
  EXPECT_EQ(lines[1].rfind("GPU 0: cuwire sim GPU", 0), 0u) << lines[1];
  EXPECT_NE(lines[1].find("(UUID: GPU-"), std::string::npos) << lines[1];
  EXPECT_EQ(lines[2].rfind("GPU 1: ", 0), 0u) << lines[2];
  EXPECT_EQ(lines[3], "name, memory.total [MiB], memory.used [MiB], utilization.gpu [%]");
  // alice's cap is the total; its 64 MiB are on the GPU it was placed on (0: the emptier).
  EXPECT_NE(lines[4].find(", 1024 MiB, 64 MiB, 0 %"), std::string::npos) << lines[4];
  EXPECT_NE(lines[5].find(", 1024 MiB, 0 MiB, 0 %"), std::string::npos) << lines[5];
  std::string all;
  for (const auto& l : lines) all += l + "\n";
  EXPECT_NE(all.find("by uuid same, by bus id same"), std::string::npos) << all;
  EXPECT_NE(all.find(", 64 MiB\nGPU 0: temperature: Not Supported"), std::string::npos) << all;
  EXPECT_NE(all.find("driver 580."), std::string::npos) << all;
  EXPECT_NE(all.find("index 2: Invalid Argument"), std::string::npos) << all;
  EXPECT_NE(all.find("after shutdown: Uninitialized"), std::string::npos) << all;

  // bob sees its one GPU, whole, and none of alice's processes.
  int rc = -1;
  const std::string bob_all = cli({"run", "--", NVML_SMI}, &rc, server_.env("bob-token"));
  EXPECT_EQ(rc, 0);
  EXPECT_NE(bob_all.find("GPU 0: cuwire sim GPU"), std::string::npos) << bob_all;
  EXPECT_EQ(bob_all.find("GPU 1:"), std::string::npos) << bob_all;
  EXPECT_NE(bob_all.find(", 16384 MiB, 0 MiB, 0 %"), std::string::npos) << bob_all;
  EXPECT_EQ(bob_all.find("process"), std::string::npos) << bob_all;

  // A token that is no one's: NVML reports no driver.
  const std::string none_all = cli({"run", "--", NVML_SMI}, &rc, server_.env("nobody"));
  EXPECT_EQ(rc, 1);
  EXPECT_NE(none_all.find("init: Driver Not Loaded"), std::string::npos) << none_all;
}

// An open server (no tenants, no admin token): the commands that read are open, the ones that
// change are not, and busy time is measured on a GPU no compute cap shares.
TEST(AdminOpenServer, ReadsAreOpenAndBusyTimeIsMeasured) {
  TenantServer server("", 1);
  auto env = server.env("");
  env.push_back("CUWIRE_ADMIN_TOKEN=");
  const auto now_ns = [] {
    return std::to_string(std::chrono::duration_cast<std::chrono::nanoseconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count());
  };
  const std::string start = now_ns();
  const std::string end = std::to_string(std::stoull(start) + 1'000'000'000ull);
  ChildProcess probe(COMPUTE_PROBE, {"2000", start, end, start, end}, env);
  const std::string line = probe.line();  // "busy_ns B kernels K"
  ASSERT_EQ(line.rfind("busy_ns ", 0), 0u) << line;
  const double ran = std::stod(line.substr(8)) / 1e9;
  EXPECT_EQ(probe.wait(), 0);
  ChildProcess gpus(CUWIRE_CLI, {"gpus", "--json"}, env);
  const json g = json::parse(gpus.rest());
  EXPECT_EQ(gpus.wait(), 0);
  const double busy = g["gpus"][0]["busy_seconds"].get<double>();
  // What the device ran, give or take the poll interval per kernel and the probe's own ends.
  EXPECT_GT(ran, 0.5);
  EXPECT_GT(busy, 0.5 * ran) << g.dump();
  EXPECT_LT(busy, 2.0) << g.dump();
  ChildProcess evict(CUWIRE_CLI, {"evict", "1"}, env);
  EXPECT_EQ(evict.rest(), "");
  EXPECT_EQ(evict.wait(), 1);
}

}  // namespace
}  // namespace cuwire::testing
