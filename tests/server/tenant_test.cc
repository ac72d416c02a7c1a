// Tenants (server/tenancy/tenants.h, server/ops/config_file.h): the config file and what it
// refuses, tokens that name no tenant, max_sessions, and memory caps through every allocation path
// the client library has, across a tenant's sessions. Clients are processes (cap_probe) talking to
// an in-process sim server.

#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "server/ops/config_file.h"
#include "server/session/server.h"
#include "tests/support/test_support.h"

namespace cuwire::testing {
namespace {

using server::FileConfig;
using server::parse_config;

constexpr uint64_t kGiB = 1ull << 30;

// ---- the config file

TEST(TenantConfig, ReadsTheExample) {
  const char* text = R"(
[server]
listen = ["unix:/run/cuwire/gpu.sock", "tls:0.0.0.0:7740"]
backend = "auto"
placement = "spread"
[sim]
gpus = 2
memory = "16GiB"
[[tenant]]
name = "alice"
token = "alice's token"
memory = "8GiB"
compute = 30
gpus = [0]
max_sessions = 4
[[tenant]]
name = "bob"
token_sha256 = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
memory = 0.25
)";
  FileConfig c;
  Status s = parse_config(text, "example.toml", &c);
  ASSERT_TRUE(s.is_ok()) << s.message();
  ASSERT_TRUE(c.listen.has_value());
  EXPECT_EQ(c.listen->size(), 2u);
  EXPECT_EQ(c.backend.value_or(""), "auto");
  EXPECT_EQ(c.sim_gpus.value_or(0), 2);
  ASSERT_EQ(c.tenants.size(), 2u);
  const auto& alice = c.tenants[0];
  EXPECT_EQ(alice.name, "alice");
  EXPECT_EQ(alice.token_sha256, server::token_digest("alice's token"));
  EXPECT_EQ(alice.memory_bytes, 8 * kGiB);
  EXPECT_EQ(alice.compute, 30);
  EXPECT_EQ(alice.gpus, std::vector<int>{0});
  EXPECT_EQ(alice.max_sessions, 4);
  // sha256("hello")
  EXPECT_EQ(c.tenants[1].token_sha256, server::token_digest("hello"));
  EXPECT_DOUBLE_EQ(c.tenants[1].memory_fraction, 0.25);
}

// Each bad file is refused with its name, the line and the reason.
void expect_refused(const std::string& text, const std::string& where, const std::string& why) {
  FileConfig c;
  Status s = parse_config(text, "bad.toml", &c);
  ASSERT_FALSE(s.is_ok()) << text;
  EXPECT_NE(s.message().find("bad.toml:" + where + ": "), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(why), std::string::npos) << s.message();
}

TEST(TenantConfig, RefusesBadFiles) {
  expect_refused("[server]\nlisten = [\"unix:/x\"]\nlisen = 1\n", "3", "unknown key 'lisen'");
  expect_refused("[serv]\n", "1", "unknown section 'serv'");
  // Listen addresses as the server parses them: a scheme is needed.
  expect_refused("[server]\nlisten = [\"unix:/x\", \"0.0.0.0:7000\"]\n", "2",
                 "listen: bad address '0.0.0.0:7000': unknown scheme");
  expect_refused("[server]\nlisten = [\"/run/cuwire.sock\"]\n", "2", "no scheme");
  expect_refused("[server]\nbackend = \"gpu\"\n", "2", "backend must be one of auto, sim, cuda");
  expect_refused("[server]\nbusy_time = \"sometimes\"\n", "2",
                 "busy_time must be one of measured, off");
  expect_refused("[server]\nshm_lane = \"yes\"\n", "2", "shm_lane must be one of on, off");
  expect_refused("[server\n", "1", "");
  // open = true says nothing a file with tenants can mean.
  expect_refused("[server]\nopen = true\n[[tenant]]\nname = \"a\"\ntoken = \"t\"\n", "2",
                 "a server with [[tenant]]s is never open");
  expect_refused("[[tenant]]\nname = \"a\"\ntoken = \"t\"\nmemory = \"8GB!\"\n", "4",
                 "bad size unit");
  expect_refused("[[tenant]]\nname = \"a\"\ntoken = \"t\"\nmemory = 1.5\n", "4",
                 "fraction of the card must be in (0, 1]");
  expect_refused("[[tenant]]\nname = \"a\"\ntoken = \"t\"\ncompute = 101\n", "4",
                 "compute must be a whole percent, 1 to 100");
  expect_refused("[[tenant]]\nname = \"a\"\ntoken = \"t\"\ncompute = 12.5\n", "4",
                 "compute must be a whole percent");
  expect_refused(
      "[[tenant]]\nname = \"a\"\ntoken = \"t\"\ncompute = 60\n"
      "[[tenant]]\nname = \"b\"\ntoken = \"u\"\ncompute = 50\ngpus = [1]\n",
      "5", "capped compute on one GPU sums to more than 100 percent");
  expect_refused(
      "[[tenant]]\nname = \"a\"\ntoken = \"t\"\n[[tenant]]\nname = \"a\"\n"
      "token = \"u\"\n",
      "4", "tenant 'a' is named twice");
  expect_refused(
      "[[tenant]]\nname = \"a\"\ntoken = \"t\"\n[[tenant]]\nname = \"b\"\n"
      "token = \"t\"\n",
      "4", "the same token as tenant 'a'");
  expect_refused("[[tenant]]\nname = \"a\"\n", "1", "exactly one of token, token_file");
  expect_refused("[[tenant]]\nname = \"a\"\ntoken = \"t\"\ncolour = \"red\"\n", "4",
                 "unknown key 'colour' in [[tenant]]");
  expect_refused("[[tenant]]\nname = \"a\"\ntoken_file = \"/nonexistent/token\"\n", "3",
                 "cannot read token_file");
  expect_refused("[[tenant]]\nname = \"a\"\ntoken_sha256 = \"abc\"\n", "3",
                 "64 hexadecimal digits");
  // The admin token: one source at most, never a tenant's.
  expect_refused("[server]\nadmin_token = \"x\"\nadmin_token_file = \"/etc/x\"\n", "1",
                 "give one of admin_token, admin_token_file and admin_token_sha256");
  expect_refused("[server]\nadmin_token = \"t\"\n[[tenant]]\nname = \"a\"\ntoken = \"t\"\n", "3",
                 "tenant 'a' has the admin token");
  {
    FileConfig c;
    ASSERT_TRUE(parse_config("[server]\nadmin_token = \"secret\"\n", "ok.toml", &c).is_ok());
    ASSERT_TRUE(c.admin_token_sha256.has_value());
    EXPECT_EQ(*c.admin_token_sha256, server::token_digest("secret"));
  }
  // Compute on different GPUs does not add up.
  FileConfig ok;
  EXPECT_TRUE(parse_config("[[tenant]]\nname = \"a\"\ntoken = \"t\"\ncompute = 60\ngpus = [0]\n"
                           "[[tenant]]\nname = \"b\"\ntoken = \"u\"\ncompute = 50\ngpus = [1]\n",
                           "good.toml", &ok)
                  .is_ok());
}

// Local users by uid, and the Unix socket's mode and group.
TEST(TenantConfig, ContextMemory) {
  FileConfig c;
  ASSERT_TRUE(parse_config("[server]\ncontext_memory = \"300MiB\"\n", "c.toml", &c).is_ok());
  EXPECT_EQ(c.context_memory.value_or(""), "300MiB");
  FileConfig automatic;
  EXPECT_TRUE(parse_config("[server]\ncontext_memory = \"auto\"\n", "a.toml", &automatic).is_ok());
  FileConfig bad;
  const Status s = parse_config("[server]\ncontext_memory = \"lots\"\n", "b.toml", &bad);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("b.toml:2"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("context_memory"), std::string::npos) << s.message();
}

TEST(TenantConfig, UidsAndSocketAccess) {
  FileConfig c;
  Status s = parse_config(R"(
[server]
socket_mode = "0660"
socket_group = "0"
[[tenant]]
name = "local"
uids = [1000, 1001]
[[tenant]]
name = "both"
token = "both-token"
uids = [0]
[[tenant]]
name = "remote"
token = "remote-token"
)",
                          "uids.toml", &c);
  ASSERT_TRUE(s.is_ok()) << s.message();
  EXPECT_EQ(c.socket_mode.value_or(""), "0660");
  EXPECT_EQ(c.socket_group.value_or(""), "0");
  ASSERT_EQ(c.tenants.size(), 3u);
  EXPECT_EQ(c.tenants[0].uids, (std::vector<uint32_t>{1000, 1001}));
  EXPECT_FALSE(c.tenants[0].has_token);
  EXPECT_EQ(c.tenants[1].uids, std::vector<uint32_t>{0});
  EXPECT_TRUE(c.tenants[1].has_token);
  EXPECT_EQ(c.tenants[1].token_sha256, server::token_digest("both-token"));
  EXPECT_TRUE(c.tenants[2].uids.empty());
  // Tenants without tokens have none in common, and no empty token names them.
  server::TenantRegistry registry(c.tenants);
  EXPECT_EQ(registry.find_uid(1001), registry.tenants()[0]);
  EXPECT_EQ(registry.find_uid(0), registry.tenants()[1]);
  EXPECT_EQ(registry.find_uid(1002), nullptr);
  EXPECT_EQ(registry.find(""), nullptr);
  EXPECT_EQ(registry.find("both-token"), registry.tenants()[1]);
  FileConfig two;
  EXPECT_TRUE(parse_config("[[tenant]]\nname = \"a\"\nuids = [1]\n"
                           "[[tenant]]\nname = \"b\"\nuids = [2]\n",
                           "two.toml", &two)
                  .is_ok());

  expect_refused(
      "[[tenant]]\nname = \"a\"\nuids = [1000]\n[[tenant]]\nname = \"b\"\n"
      "uids = [7, 1000]\n",
      "6", "tenant 'b': uid 1000 belongs to tenant 'a' already");
  expect_refused("[[tenant]]\nname = \"a\"\nuids = [5, 5]\n", "3", "uid 5 is listed twice");
  expect_refused("[[tenant]]\nname = \"a\"\nuids = []\n", "3", "uids must be a list");
  expect_refused("[[tenant]]\nname = \"a\"\nuids = 1000\n", "3", "uids must be a list");
  expect_refused("[[tenant]]\nname = \"a\"\nuids = [-1]\n", "3", "uids holds user ids");
  expect_refused("[[tenant]]\nname = \"a\"\nuids = [\"alice\"]\n", "3", "uids holds user ids");
  expect_refused("[server]\nsocket_mode = \"0999\"\n", "2",
                 "socket_mode: socket mode '0999' is not an octal mode");
  expect_refused("[server]\nsocket_mode = \"rw-rw----\"\n", "2", "is not an octal mode");
  expect_refused("[server]\nsocket_mode = 660\n", "2", "socket_mode must be a string");
  expect_refused("[server]\nsocket_group = \"no-such-group-cuwire-test\"\n", "2",
                 "socket group 'no-such-group-cuwire-test' is not a group of this host");
}

// ---- a server with tenants

class Tenants : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(server_.ok()) << server_.status().to_string(); }

  // The server reclaims a session's memory on its own thread once it sees the client go.
  void wait_for_no_sessions() {
    for (int i = 0; i < 1000 && server_->session_count() != 0; ++i) usleep(10000);
    ASSERT_EQ(server_->session_count(), 0u);
  }

  std::vector<std::string> env(const std::string& token) const { return server_.env(token); }

  // ipc_probe `args`, a client of the tenant of `token`, prints `lines` and exits 0.
  void expect_ipc_probe(const std::vector<std::string>& args, const std::string& token,
                        const std::vector<std::string>& lines) {
    ChildProcess p(IPC_PROBE, args, env(token));
    for (const std::string& want : lines) EXPECT_EQ(p.line(), want) << args[0] << " " << token;
    EXPECT_EQ(p.wait(), 0) << args[0] << " " << token;
  }

  TestServer server_{{.memory_bytes = 4 * kGiB, .config = R"(
[[tenant]]
name = "capped"
token = "capped-token"
memory = "1GiB"
[[tenant]]
name = "quarter"
token = "quarter-token"
memory = 0.25
[[tenant]]
name = "free"
token = "free-token"
[[tenant]]
name = "two"
token = "two-token"
max_sessions = 2
)"}};
};

std::string blocks_line(int blocks, const char* error, uint64_t total) {
  return "blocks " + std::to_string(blocks) + " error " + error + " total " + std::to_string(total);
}

// Managed memory's host mirror is mapped at the device address the sim hands out
// (0x20000000000), a range AddressSanitizer's own reservations hold: under ASan the client
// cannot map it ("File exists") and the managed path is left to the release build.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kManagedMirrors = false;
#else
constexpr bool kManagedMirrors = true;
#endif

TEST_F(Tenants, CapHoldsOnEveryAllocationPath) {
  for (const char* path : {"linear", "pitch", "managed", "async", "pool", "array", "array3d",
                           "module", "library", "vmm", "vmm_mapped", "graph"}) {
    if (!kManagedMirrors && std::string(path) == "managed") continue;
    ChildProcess p(CAP_PROBE, {path, "100"}, env("capped-token"));
    std::string line = p.line();
    // Exactly 16 blocks of 64 MiB, then out of memory, and 1 GiB as the device's total.
    EXPECT_EQ(line.substr(0, line.find(" free ")),
              blocks_line(16, "CUDA_ERROR_OUT_OF_MEMORY", kGiB))
        << path;
    EXPECT_NE(line.find(" free 0 "), std::string::npos) << path << ": " << line;
    EXPECT_NE(line.find("device_total " + std::to_string(kGiB)), std::string::npos)
        << path << ": " << line;
    // The newest block freed (destroyed, unloaded), one more fits again.
    EXPECT_NE(line.find(" again CUDA_SUCCESS"), std::string::npos) << path << ": " << line;
    EXPECT_EQ(p.wait(), 0);
    wait_for_no_sessions();
  }
  // A fraction of the card: a quarter of the sim's 4 GiB.
  ChildProcess q(CAP_PROBE, {"linear", "100"}, env("quarter-token"));
  std::string line = q.line();
  EXPECT_EQ(line.substr(0, line.find(" free ")), blocks_line(16, "CUDA_ERROR_OUT_OF_MEMORY", kGiB));
}

TEST_F(Tenants, CapSpansTheTenantsSessions) {
  ChildProcess first(CAP_PROBE, {"linear", "10", "hold"}, env("capped-token"));
  std::string line = first.line();
  EXPECT_EQ(line.substr(0, line.find(" free ")), blocks_line(10, "CUDA_SUCCESS", kGiB));
  {
    // 6 blocks are left for the tenant, whichever session takes them; it sees its own use.
    ChildProcess second(CAP_PROBE, {"linear", "100"}, env("capped-token"));
    line = second.line();
    EXPECT_EQ(line.substr(0, line.find(" free ")),
              blocks_line(6, "CUDA_ERROR_OUT_OF_MEMORY", kGiB));
  }
  // Another tenant is not charged for them: uncapped, it sees the whole card.
  {
    ChildProcess other(CAP_PROBE, {"linear", "20"}, env("free-token"));
    line = other.line();
    EXPECT_EQ(line.substr(0, line.find(" free ")), blocks_line(20, "CUDA_SUCCESS", 4 * kGiB));
  }
  // The first session's memory goes back to the tenant when it ends.
  first.send("done\n");
  EXPECT_EQ(first.wait(), 0);
  wait_for_no_sessions();
  ChildProcess after(CAP_PROBE, {"linear", "100"}, env("capped-token"));
  line = after.line();
  EXPECT_EQ(line.substr(0, line.find(" free ")), blocks_line(16, "CUDA_ERROR_OUT_OF_MEMORY", kGiB));
}

TEST_F(Tenants, TokensThatNameNoTenantAreRefused) {
  LogCapture log;
  for (const char* token : {"wrong-token", ""}) {
    ChildProcess p(CAP_PROBE, {"linear", "1"}, env(token));
    // The client's cuInit fails as a driver with no device does; it says why on stderr.
    EXPECT_EQ(p.line(),
              "blocks 0 error CUDA_ERROR_NO_DEVICE total 0 free 0 device_total 0 again "
              "CUDA_ERROR_NO_DEVICE");
    EXPECT_EQ(p.wait(), 0);
  }
  server_->stop();
  EXPECT_EQ(log.count("no tenant has this token"), 1) << log.text();
  EXPECT_EQ(log.count("a token is required"), 1) << log.text();
}

TEST_F(Tenants, MaxSessions) {
  ChildProcess a(CAP_PROBE, {"linear", "1", "hold"}, env("two-token"));
  ChildProcess b(CAP_PROBE, {"linear", "1", "hold"}, env("two-token"));
  EXPECT_EQ(a.line().substr(0, 24), "blocks 1 error CUDA_SUCC");
  EXPECT_EQ(b.line().substr(0, 24), "blocks 1 error CUDA_SUCC");
  LogCapture log;
  {
    // The program sees a driver with no device; its stderr says which limit refused it.
    ChildProcess c("/bin/sh", {"-c", std::string("exec ") + CAP_PROBE + " linear 1 2>&1"},
                   env("two-token"));
    const std::string said = c.line();
    EXPECT_NE(said.find("refused the connection"), std::string::npos) << said;
    EXPECT_NE(said.find("tenant two already has its 2 sessions (max_sessions)"), std::string::npos)
        << said;
    EXPECT_EQ(c.line().substr(0, 34), "blocks 0 error CUDA_ERROR_NO_DEVIC");
  }
  EXPECT_EQ(log.count("tenant two already has its 2 sessions (max_sessions)"), 1) << log.text();
  a.send("done\n");
  EXPECT_EQ(a.wait(), 0);
  for (int i = 0; i < 1000 && server_->session_count() != 1; ++i) usleep(10000);
  ChildProcess d(CAP_PROBE, {"linear", "1"}, env("two-token"));
  EXPECT_EQ(d.line().substr(0, 24), "blocks 1 error CUDA_SUCC");
}

// Interprocess memory and event handles: a session of the same tenant opens the memory, reads
// it, writes it with a memset and a kernel, and closes it; the exporter sees the writes. It
// opens the exporter's event and waits for it. Another tenant's session, a handle with one bit
// changed, and the same tenant after the exporter freed the memory are all refused.
TEST_F(Tenants, IpcOnlyWithinATenant) {
  ChildProcess exporter(IPC_PROBE, {"export"}, env("free-token"));
  const std::string handle_line = exporter.line();
  ASSERT_EQ(handle_line.substr(0, 7), "handle ") << handle_line;
  const std::string handle = handle_line.substr(7);
  ASSERT_EQ(handle.size(), 128u);
  const std::string event_line = exporter.line();
  ASSERT_EQ(event_line.substr(0, 6), "event ") << event_line;
  const std::string event = event_line.substr(6);
  expect_ipc_probe({"open_event", event}, "free-token",
                   {"open_event CUDA_SUCCESS", "waited CUDA_SUCCESS", "destroyed CUDA_SUCCESS"});
  expect_ipc_probe({"open_event", event}, "capped-token", {"open_event CUDA_ERROR_INVALID_VALUE"});
  expect_ipc_probe({"open", handle}, "free-token",
                   {"open CUDA_SUCCESS", "read abcd1234 CUDA_SUCCESS", "wrote CUDA_SUCCESS",
                    "closed CUDA_SUCCESS", "after close CUDA_ERROR_INVALID_VALUE"});
  EXPECT_EQ(exporter.ask("check\n"), "value 00005555 abcd1235 CUDA_SUCCESS");
  expect_ipc_probe({"open", handle}, "capped-token", {"open CUDA_ERROR_INVALID_VALUE"});
  std::string forged = handle;
  forged[20] = forged[20] == '0' ? '1' : '0';  // another allocation's base, say
  expect_ipc_probe({"open", forged}, "free-token", {"open CUDA_ERROR_INVALID_VALUE"});
  EXPECT_EQ(exporter.ask("free\n"), "freed CUDA_SUCCESS");
  expect_ipc_probe({"open", handle}, "free-token", {"open CUDA_ERROR_INVALID_VALUE"});
  exporter.send("quit\n");
  EXPECT_EQ(exporter.wait(), 0);
}

// Physical memory exported as a POSIX file descriptor (cuMemExportToShareableHandle): a
// session of the same tenant imports and reads it; another tenant's session, a descriptor
// whose secret was changed, and the same tenant after the exporter released the memory are
// refused.
TEST_F(Tenants, ShareableMemoryOnlyWithinATenant) {
  ChildProcess exporter(IPC_PROBE, {"shareable_export"}, env("free-token"));
  const std::string line = exporter.line();
  ASSERT_EQ(line.substr(0, 10), "shareable ") << line;
  const std::string path = line.substr(10);
  const std::string refused = "import CUDA_ERROR_INVALID_VALUE";
  expect_ipc_probe({"shareable_import", path}, "free-token",
                   {"import CUDA_SUCCESS", "read 5a CUDA_SUCCESS"});
  expect_ipc_probe({"shareable_import", path}, "capped-token", {refused});
  expect_ipc_probe({"shareable_import", path, "forge"}, "free-token", {refused});
  EXPECT_EQ(exporter.ask("release\n"), "released CUDA_SUCCESS");
  expect_ipc_probe({"shareable_import", path}, "free-token", {refused});
  exporter.send("quit\n");
  EXPECT_EQ(exporter.wait(), 0);
}

// A memory pool exported as a POSIX file descriptor and one of its allocations exported as
// data (cuMemPoolExportToShareableHandle, cuMemPoolExportPointer; streamOrderedAllocationIPC):
// a session of the same tenant imports the pool and the allocation, reads it, writes it with a
// kernel and frees its import, which leaves the allocation to the exporter. Another tenant's
// session, a descriptor with a changed secret, and changed export data are refused; so are
// the allocation once the exporter freed it and the pool once the exporter destroyed it. A
// pool made without handle types cannot be exported, an imported pool holds no memory, and a
// session imports an allocation once.
TEST_F(Tenants, PoolsSharedOnlyWithinATenant) {
  ChildProcess exporter(IPC_PROBE, {"pool_export"}, env("free-token"));
  EXPECT_EQ(exporter.line(), "plain CUDA_ERROR_INVALID_VALUE");
  const std::string line = exporter.line();
  ASSERT_EQ(line.substr(0, 5), "pool ") << line;
  const size_t space = line.find(' ', 5);
  ASSERT_NE(space, std::string::npos) << line;
  const std::string path = line.substr(5, space - 5), data = line.substr(space + 1);
  ASSERT_EQ(data.size(), 128u);
  // The import is over after its free: a second free names no memory of this session's, and
  // never reaches the exporter's allocation (its words are checked next).
  expect_ipc_probe(
      {"pool_import", path, data}, "free-token",
      {"import CUDA_SUCCESS", "pointer CUDA_SUCCESS", "again CUDA_ERROR_INVALID_VALUE",
       "read 600dcafe CUDA_SUCCESS", "wrote CUDA_SUCCESS", "alloc CUDA_ERROR_INVALID_VALUE",
       "freed CUDA_SUCCESS", "freed again CUDA_ERROR_INVALID_VALUE",
       "after free CUDA_ERROR_INVALID_VALUE", "destroyed CUDA_SUCCESS"});
  EXPECT_EQ(exporter.ask("check\n"), "value 600dcafe 600dcaff CUDA_SUCCESS");
  const std::vector<std::string> refused = {"import CUDA_ERROR_INVALID_VALUE"};
  const std::vector<std::string> no_pointer = {
      "import CUDA_SUCCESS", "pointer CUDA_ERROR_INVALID_VALUE", "destroyed CUDA_SUCCESS"};
  expect_ipc_probe({"pool_import", path, data}, "capped-token", refused);
  expect_ipc_probe({"pool_import", path, data, "forge"}, "free-token", refused);
  expect_ipc_probe({"pool_import", path, data, "forge_data"}, "free-token", no_pointer);
  EXPECT_EQ(exporter.ask("free\n"), "freed CUDA_SUCCESS");
  expect_ipc_probe({"pool_import", path, data}, "free-token", no_pointer);
  EXPECT_EQ(exporter.ask("destroy\n"), "destroyed CUDA_SUCCESS");
  expect_ipc_probe({"pool_import", path, data}, "free-token", refused);
  exporter.send("quit\n");
  EXPECT_EQ(exporter.wait(), 0);
}

}  // namespace
}  // namespace cuwire::testing
