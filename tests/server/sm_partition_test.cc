// SM partitions (server/tenancy/sm_partition.h): a tenant with `sms` gets SMs of its own on each
// GPU, through green contexts the server makes for its sessions on the sim (which implements the
// green-context calls). Clients are processes (sm_probe) talking to an in-process server.

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "server/ops/config_file.h"
#include "tests/support/test_support.h"

namespace cuwire::testing {
namespace {

using server::FileConfig;
using server::parse_config;

// The sim's GPUs have 40 SMs, partitioned in groups of 2.
constexpr int kSimSms = 40;

// A server of two sim GPUs with the tenants of `tenants`, started by the test.
TestServerOptions with_tenants(const std::string& tenants) {
  return {.gpus = 2, .sm_count = kSimSms, .config = tenants, .start = false};
}

class SmPartition : public ::testing::Test {
 protected:
  void SetUp() override {
    Status s = server_.start();
    ASSERT_TRUE(s.is_ok()) << s.message();
  }

  std::string probe(const std::string& token, const std::vector<std::string>& args = {}) {
    ChildProcess p(SM_PROBE, args, server_.env(token));
    std::string line = p.line();
    EXPECT_EQ(p.wait(), 0) << line;
    return line;
  }

  TestServer server_{with_tenants(R"(
[server]
admin_token = "admin-secret"
[[tenant]]
name = "eight"
token = "eight-token"
sms = 8
[[tenant]]
name = "odd"
token = "odd-token"
sms = 5
gpus = [1]
[[tenant]]
name = "whole"
token = "whole-token"
)")};
};

std::string figures(int sms, const char* more) {
  const std::string n = std::to_string(sms);
  return "sms " + n + " resource " + n + " context " + n + " coop_all CUDA_SUCCESS coop_more " +
         more;
}

TEST_F(SmPartition, TenantSeesAndKeepsItsSms) {
  // Its device shows 8 SMs, its context is a green context of 8, and a cooperative grid of
  // one block per SM fits 8 and not 9.
  EXPECT_EQ(probe("eight-token"), figures(8, "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE"));
  // Asked for 5, it gets whole groups of 2: 6.
  EXPECT_EQ(probe("odd-token"), figures(6, "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE"));
  // A tenant without sms has the whole GPU: the same grids that the partition refuses fit.
  EXPECT_EQ(probe("whole-token"), figures(kSimSms, "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE"));
  EXPECT_EQ(probe("whole-token", {"sms", "9"}), "coop 9 CUDA_SUCCESS");
  EXPECT_EQ(probe("eight-token", {"sms", "9"}), "coop 9 CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE");
}

TEST_F(SmPartition, SessionsOfOneTenantShareItsPartition) {
  ChildProcess a(SM_PROBE, {}, server_.env("eight-token"));
  ChildProcess b(SM_PROBE, {}, server_.env("eight-token"));
  EXPECT_EQ(a.line(), figures(8, "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE"));
  EXPECT_EQ(b.line(), figures(8, "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE"));
  EXPECT_EQ(a.wait(), 0);
  EXPECT_EQ(b.wait(), 0);
}

TEST_F(SmPartition, GreenContextsThroughTheServer) {
  auto green = [&](const std::string& token, const char* min, const char* leave = nullptr) {
    std::vector<std::string> args{min};
    if (leave) args.push_back(leave);
    ChildProcess p(GREEN_PROBE, args, server_.env(token));
    std::string line = p.line();
    EXPECT_EQ(p.wait(), 0) << line;
    return line;
  };
  // The whole GPU splits into 20 groups of 2, or 10 of 4.
  EXPECT_EQ(green("whole-token", "2"), "green ok sms 40 groups 20 group 2");
  EXPECT_EQ(green("whole-token", "4"), "green ok sms 40 groups 10 group 4");
  // A partitioned tenant splits its partition, never more.
  EXPECT_EQ(green("eight-token", "2"), "green ok sms 8 groups 4 group 2");
  EXPECT_EQ(green("eight-token", "4"), "green ok sms 8 groups 2 group 4");
  // A client that leaves its green contexts behind: the server destroys them with the rest.
  // Through a relay the server also has the relay's own sessions (and its workers'), which
  // stay: the count comes back to where it was once the earlier clients' sessions ended.
  size_t before = server_->session_count();
  for (int i = 0; i < 50; ++i) {
    usleep(20000);
    const size_t now = server_->session_count();
    if (now == before) break;
    before = now;
  }
  if (!server_.relay()) {
    EXPECT_EQ(before, 0u);
  }
  for (int i = 0; i < 3; ++i) EXPECT_EQ(green("eight-token", "2", "leave"), "green left");
  for (int i = 0; i < 1000 && server_->session_count() > before; ++i) usleep(10000);
  EXPECT_EQ(server_->session_count(), before);
  EXPECT_EQ(green("eight-token", "2"), "green ok sms 8 groups 4 group 2");
}

// `cuwire tenant add --sms`: a tenant added at run time takes free groups of SMs (the first
// that hold its count), is refused with the GPU's figures when they are not free, and gives
// them back when removed. Sessions of the tenants already there keep theirs.
TEST_F(SmPartition, AddedAndRemovedAtRunTime) {
  TempDir dir;
  // The CLI as the admin, its stderr with its stdout.
  auto cli = [&](const std::vector<std::string>& args, int* rc) {
    std::vector<std::string> env = server_.env("");
    env.push_back("CUWIRE_ADMIN_TOKEN=admin-secret");
    std::vector<std::string> sh{"-c", "exec \"$0\" \"$@\" 2>&1", CUWIRE_CLI};
    sh.insert(sh.end(), args.begin(), args.end());
    ChildProcess run("/bin/sh", sh, env);
    const std::string out = run.rest();
    *rc = run.wait();
    return out;
  };
  // On GPU 0 (GPU 1 also has odd's 6 SMs).
  auto add = [&](const std::string& name, int sms, int* rc) {
    const std::string file = dir.file(name + ".token");
    std::ofstream(file) << name << "-token\n";
    return cli(
        {"tenant", "add", name, "--token-file", file, "--sms", std::to_string(sms), "--gpus", "0"},
        rc);
  };
  int rc = -1;
  // GPU 0: eight holds 8 of 40 SMs; ten takes 10 more.
  std::string out = add("ten", 10, &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(probe("ten-token"), figures(10, "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE"));
  // 22 are left on GPU 0: 30 do not fit, and the refusal says who holds what.
  out = add("thirty", 30, &rc);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("GPU 0: the tenants' sms do not fit: the GPU has 40 SMs"), std::string::npos)
      << out;
  EXPECT_NE(out.find("asked: eight 8, ten 10, thirty 30"), std::string::npos) << out;
  // The tenants already there keep their SMs.
  EXPECT_EQ(probe("eight-token"), figures(8, "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE"));
  // Removed, ten's SMs are free again: now 30 fit.
  out = cli({"tenant", "remove", "ten"}, &rc);
  ASSERT_EQ(rc, 0) << out;
  out = add("thirty", 30, &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(probe("thirty-token"), figures(30, "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE"));
  EXPECT_EQ(probe("eight-token"), figures(8, "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE"));
  ChildProcess refused(SM_PROBE, {}, server_.env("ten-token"));  // its token, refused
  EXPECT_EQ(refused.line().rfind("sms", 0), std::string::npos);
  EXPECT_NE(refused.wait(), 0);
}

TEST(SmPartitionConfig, SmsThatDoNotFitAreRefusedAtStart) {
  TestServer refused(
      with_tenants("[[tenant]]\nname = \"a\"\ntoken = \"t\"\nsms = 30\n"
                   "[[tenant]]\nname = \"b\"\ntoken = \"u\"\nsms = 12\n"));
  Status s = refused.start();
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("GPU 0: the tenants' sms do not fit: the GPU has 40 SMs"),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("asked: a 30, b 12"), std::string::npos) << s.message();
  // On different GPUs they fit.
  TestServer fits(
      with_tenants("[[tenant]]\nname = \"a\"\ntoken = \"t\"\nsms = 30\ngpus = [0]\n"
                   "[[tenant]]\nname = \"b\"\ntoken = \"u\"\nsms = 12\ngpus = [1]\n"));
  s = fits.start();
  EXPECT_TRUE(s.is_ok()) << s.message();
  fits.stop();
  FileConfig file;
  for (const char* bad : {"sms = 0", "sms = \"8\"", "sms = 2.5"}) {
    s = parse_config(std::string("[[tenant]]\nname = \"a\"\ntoken = \"t\"\n") + bad + "\n",
                     "bad.toml", &file);
    EXPECT_FALSE(s.is_ok()) << bad;
    EXPECT_NE(s.message().find("sms must be"), std::string::npos) << s.message();
  }
}

}  // namespace
}  // namespace cuwire::testing
