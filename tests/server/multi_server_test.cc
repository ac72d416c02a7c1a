// Several servers in CUWIRE_SERVER (client-lib/core/connection.cc: rank_by_room): the client probes
// each for its room for the client's tenant (a probe Hello, server/session/session.cc:
// answer_probe) and opens its session on the best by the policy the servers report. Three sim
// servers of one 16 GiB GPU each differ by what is already placed on them:
//   A: nothing (16 GiB left)
//   B: a session of "filler", capped at 8 GiB (8 GiB left)
//   C: a session of "wide", capped at 14 GiB (2 GiB left)
// The client is compute_probe (`where hold`); which server it chose shows in the servers'
// session counts while it holds its session.

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "generated/call_ids.h"
#include "protocol/messages.h"
#include "protocol/transport.h"
#include "server/ops/config_file.h"
#include "tests/support/test_support.h"

namespace cuwire::testing {
namespace {

constexpr const char* kTenants = R"(
[[tenant]]
name = "filler"
token = "filler"
memory = "8GiB"
[[tenant]]
name = "wide"
token = "wide"
memory = "14GiB"
[[tenant]]
name = "app"
token = "app"
memory = "4GiB"
[[tenant]]
name = "pack"
token = "pack"
memory = "4GiB"
placement = "binpack"
[[tenant]]
name = "huge"
token = "huge"
memory = "12GiB"
[[tenant]]
name = "once"
token = "once"
max_sessions = 1
)";

constexpr const char* kMissing = "unix:/nonexistent/cuwire-multi-server.sock";

std::string address_of(const TestServer& s) { return s.address().to_string(); }

std::vector<std::string> env_for(const std::vector<std::string>& servers,
                                 const std::string& token) {
  std::string list;
  for (const std::string& s : servers) list += (list.empty() ? "" : ",") + s;
  return {"CUWIRE_SERVER=" + list, "CUWIRE_TOKEN=" + token};
}

// compute_probe holding its session until released; *line is what it printed first.
std::unique_ptr<ChildProcess> hold(const std::vector<std::string>& env, std::string* line) {
  auto p =
      std::make_unique<ChildProcess>(COMPUTE_PROBE, std::vector<std::string>{"where", "hold"}, env);
  *line = p->line();
  return p;
}

// Whether the server's open connections come to `n` within a few seconds (a probe's
// connection closes on the server's side a moment after the client has its answer).
bool settles(server::Server& s, size_t n) {
  for (int i = 0; i < 500; ++i) {
    if (s.session_count() == n) return true;
    usleep(10000);
  }
  return s.session_count() == n;
}
bool settles(TestServer& s, size_t n) { return settles(s.server(), n); }

// What compute_probe prints first on the servers here (one GPU each).
constexpr const char* kOneGpu = "devices 1 bus0 0000:17:00.0";

// Lets a held compute_probe end, as it does then.
void release(ChildProcess& p) {
  p.send("done\n");
  EXPECT_EQ(p.wait(), 0);
}

// compute_probe, given `servers` and the token of a tenant, opens its session on one of them:
// while it holds it, each server of `counts` comes to its count of sessions.
void expect_placed(const std::vector<std::string>& servers, const std::string& token,
                   std::initializer_list<std::pair<TestServer*, size_t>> counts) {
  std::string line;
  auto p = hold(env_for(servers, token), &line);
  EXPECT_EQ(line, kOneGpu);
  for (const auto& [server, n] : counts) {
    EXPECT_TRUE(settles(*server, n)) << address_of(*server) << ": " << n << " sessions";
  }
  release(*p);
}

// One probe Hello to `address`, as the client library sends it; *answer is the server's frame.
Status probe(const std::string& address, const std::string& token, Frame* answer,
             std::unique_ptr<ByteStream>* stream_out = nullptr) {
  Address a;
  if (Status s = parse_address(address, &a); !s) return s;
  std::unique_ptr<ByteStream> stream;
  if (Status s = connect_stream(a, {}, &stream); !s) return s;
  HelloMsg hello;
  hello.manifest_hash = kManifestHash;
  hello.client_name = "multi_server_test";
  hello.pid = static_cast<uint32_t>(getpid());
  hello.token = token;
  hello.probe = true;
  std::vector<uint8_t> msg;
  encode_hello(hello, &msg);
  if (Status s = send_raw(*stream, FrameType::kHello, msg); !s) return s;
  Status s = read_frame(*stream, FrameLimits{}, answer);
  if (stream_out) *stream_out = std::move(stream);
  return s;
}

RoomMsg room_of(const std::string& address, const std::string& token) {
  Frame f;
  WelcomeMsg w;
  EXPECT_TRUE(probe(address, token, &f).is_ok());
  EXPECT_EQ(f.type(), FrameType::kWelcome);
  EXPECT_TRUE(decode_welcome(f, &w).is_ok());
  EXPECT_TRUE(w.has_room);
  EXPECT_EQ(w.session_id, 0u);
  return w.room;
}

constexpr uint64_t kGiB = uint64_t{1} << 30;

class MultiServer : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string line;
    filler_ = hold(b_.env("filler"), &line);
    ASSERT_EQ(line, kOneGpu);
    wide_ = hold(c_.env("wide"), &line);
    ASSERT_EQ(line, kOneGpu);
    ASSERT_TRUE(settles(a_, 0) && settles(b_, 1) && settles(c_, 1));
  }
  void TearDown() override {
    release(*filler_);
    release(*wide_);
  }

  // Servers first, so the clients below end before them.
  TenantServer a_{kTenants, 1};
  TenantServer b_{kTenants, 1};
  TenantServer c_{kTenants, 1};
  std::string a = address_of(a_), b = address_of(b_), c = address_of(c_);
  std::unique_ptr<ChildProcess> filler_, wide_;
};

TEST_F(MultiServer, AProbeReportsTheRoomPlacementSees) {
  RoomMsg r = room_of(a, "app");
  EXPECT_TRUE(r.fits);
  EXPECT_EQ(r.memory_left, 16 * kGiB);
  EXPECT_EQ(r.sessions, 0u);
  EXPECT_EQ(r.compute_left, 100u);
  EXPECT_EQ(r.placement, "spread");
  r = room_of(b, "pack");
  EXPECT_TRUE(r.fits);
  EXPECT_EQ(r.memory_left, 8 * kGiB);
  EXPECT_EQ(r.sessions, 1u);
  EXPECT_EQ(r.placement, "binpack");  // the tenant's own placement over the server's
  r = room_of(c, "app");
  EXPECT_FALSE(r.fits);
  EXPECT_EQ(r.why,
            "no GPU can hold a session of tenant app (GPU 0: memory: 2048 MiB left, "
            "4096 MiB needed)");
  EXPECT_EQ(r.placement, "spread");
}

TEST_F(MultiServer, AProbeWithAWrongTokenIsRefusedAsAHelloIs) {
  Frame f;
  ASSERT_TRUE(probe(a, "nobody", &f).is_ok());
  ASSERT_EQ(f.type(), FrameType::kError);
  ErrorMsg e;
  ASSERT_TRUE(decode_error(f, &e).is_ok());
  EXPECT_EQ(e.kind, ErrorKind::kUnauthorized);
  EXPECT_EQ(e.message, "no tenant has this token");
}

TEST_F(MultiServer, AProbeIsNoSession) {
  LogCapture log;
  // Probes at once, of a tenant with room for one session only: were a probe counted, some
  // would find the tenant's one session taken by another probe.
  std::atomic<int> fitting{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 25; ++i) {
        if (room_of(a, "once").fits) ++fitting;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(fitting.load(), 8 * 25);
  // The server closes a probe's connection after its answer.
  Frame f;
  std::unique_ptr<ByteStream> stream;
  ASSERT_TRUE(probe(a, "once", &f, &stream).is_ok());
  EXPECT_EQ(f.type(), FrameType::kWelcome);
  EXPECT_FALSE(read_frame(*stream, FrameLimits{}, &f).is_ok());
  EXPECT_TRUE(settles(a_, 0));
  EXPECT_EQ(log.count("): connected"), 0) << log.text();
  // The tenant's one session is still to be had, through a client that probed all three.
  std::string line;
  auto once = hold(env_for({a, b, c}, "once"), &line);
  EXPECT_EQ(line, kOneGpu);
  EXPECT_EQ(log.count("): connected"), 1) << log.text();
  // And now it is taken, which a probe reports.
  const RoomMsg r = room_of(a, "once");
  EXPECT_FALSE(r.fits);
  EXPECT_EQ(r.why, "tenant once already has its 1 sessions (max_sessions)");
  release(*once);
}

TEST_F(MultiServer, SpreadTakesTheServerWithTheMostRoom) {
  expect_placed({c, b, a}, "app", {{&a_, 1}, {&b_, 1}, {&c_, 1}});
}

TEST_F(MultiServer, BinpackTakesTheFullestServerThatFits) {
  // C is fuller than B, but has no room for 4 GiB.
  expect_placed({b, c, a}, "pack", {{&b_, 2}, {&a_, 0}, {&c_, 1}});
}

TEST_F(MultiServer, ServersThatDisagreeAreFollowedAsTheFirstThatAnswers) {
  // The first reachable server places by binpack: the client picks B (8 GiB left) over that
  // server (16 GiB), as spread, B's policy, would not.
  TenantServer packing(kTenants, 1, "binpack");
  EXPECT_EQ(room_of(address_of(packing), "app").placement, "binpack");
  expect_placed({kMissing, address_of(packing), b}, "app", {{&b_, 2}, {&packing, 0}});
}

TEST_F(MultiServer, AnUnreachableServerIsSkipped) {
  expect_placed({kMissing, c, b}, "app", {{&b_, 2}, {&c_, 1}});
}

TEST_F(MultiServer, NoneFittingFailsAsNoDeviceNamingEachServer) {
  TempDir dir;
  const std::string err = dir.file("stderr");
  // The child's stderr to a file: the library's one line goes there.
  ChildProcess p("/bin/sh", {"-c", "exec \"$0\" where 2>\"$1\"", COMPUTE_PROBE, err},
                 env_for({b, kMissing, c}, "huge"));
  EXPECT_EQ(p.line(), "error CUDA_ERROR_NO_DEVICE");
  EXPECT_EQ(p.wait(), 1);
  const std::string text = read_file(err);
  const std::string expected =
      "cuwire: no gpu-server in CUWIRE_SERVER can take a session: gpu-server at " + b +
      " has no room: no GPU can hold a session of tenant huge (GPU 0: memory: 8192 MiB left, "
      "12288 MiB needed); cannot reach gpu-server at " +
      std::string(kMissing) + ": ";
  EXPECT_EQ(text.rfind(expected, 0), 0u) << text;
  EXPECT_NE(text.find("; gpu-server at " + c +
                      " has no room: no GPU can hold a session of tenant huge (GPU 0: memory: "
                      "2048 MiB left, 12288 MiB needed)\n"),
            std::string::npos)
      << text;
  EXPECT_TRUE(settles(a_, 0) && settles(b_, 1) && settles(c_, 1));
}

// `cuwire run --server a,b` hands the list to the library; a bad entry stops it first.
TEST_F(MultiServer, CuwireRunPassesTheListThrough) {
  ChildProcess p(CUWIRE_CLI, {"run", "--server", b + "," + a, "--", COMPUTE_PROBE, "where", "hold"},
                 {"CUWIRE_TOKEN=app"});
  EXPECT_EQ(p.line(), kOneGpu);
  EXPECT_TRUE(settles(a_, 1));
  EXPECT_TRUE(settles(b_, 1));
  release(p);
  ChildProcess bad(CUWIRE_CLI, {"run", "--server", a + ",tcp:nohost", "--", "/bin/true"});
  EXPECT_EQ(bad.wait(), 2);
}

// A server whose probe says it fits may still refuse the session (here its --max-sessions,
// which a probe does not see): the client goes on to the next best.
TEST(MultiServerFallback, ARefusedSessionFallsToTheNextBest) {
  TestServer full({.config = kTenants, .start = false});
  full.config().limits.max_sessions = 1;
  ASSERT_TRUE(full.start().is_ok()) << full.status().to_string();
  const Address m = full.address();
  TenantServer other(kTenants, 1);
  std::string line;
  // An uncapped tenant's session on the full server, which keeps all 16 GiB free there.
  auto held = hold(env_for({m.to_string()}, "once"), &line);
  ASSERT_EQ(line, kOneGpu);
  auto filler = hold(other.env("filler"), &line);
  ASSERT_EQ(line, kOneGpu);
  ASSERT_TRUE(settles(other, 1));
  // Spread prefers the full server (16 GiB left to 8), which refuses.
  auto p = hold(env_for({m.to_string(), address_of(other)}, "app"), &line);
  EXPECT_EQ(line, kOneGpu);
  EXPECT_TRUE(settles(other, 2));
  EXPECT_TRUE(settles(full, 1));
  for (auto* c : {p.get(), filler.get(), held.get()}) release(*c);
  full.stop();
}

}  // namespace
}  // namespace cuwire::testing
