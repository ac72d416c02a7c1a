// Compute caps and placement end to end: tenants as separate client processes (compute_probe)
// on an in-process sim server. Each probe keeps its device busy with kernels that record when
// they ran; a tenant's share is the time its kernels ran in a 10-second window, measured by the
// device's clock, not by what the server charged. Run alone (RUN_SERIAL): the shares are of
// one simulated GPU whose kernels run on this machine's cores.
//
// With COMPUTE_CAP_TEST_RELAY naming cuwire's libcuda.so.1, the caps are a relay's (gpu-server
// --backend cuda over that library, in front of the sim server) and, with CUWIRE_TEST_ISOLATION,
// its tenants' sessions run in worker processes that share the GPU's schedule (design
// decision 14).

#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/test_support.h"

namespace cuwire::testing {
namespace {

// A share never passes its cap by more than 3 points. Under AddressSanitizer the sim and the
// clients run several times slower: the gaps between a tenant's batches of kernels, when it has
// nothing on the GPU, grow, and its share falls short of its cap (measured: 4 points for a 70
// percent cap), so there the lower bound is looser.
#if defined(__SANITIZE_ADDRESS__)
constexpr double kShort = 10;
#else
constexpr double kShort = 3;
#endif

void expect_share(double got, int cap, const std::string& who) {
  EXPECT_GE(got, cap - kShort) << who << " capped at " << cap;
  EXPECT_LE(got, cap + 3) << who << " capped at " << cap;
}

// Runs one saturating probe per tenant of `caps` (test_support compute_mix: 0 is uncapped) on
// one sim GPU and returns each one's measured share, in percent.
std::vector<double> shares(const std::vector<int>& caps, const std::string& extra = "") {
  const std::string relay = env_or_empty("COMPUTE_CAP_TEST_RELAY");
  TempDir dir;
  std::unique_ptr<TestServer> s;
  if (relay.empty()) {
    s = std::make_unique<TenantServer>(compute_mix(caps, extra), 1);
  } else {
    std::ofstream(dir.file("relay.toml")) << compute_mix(caps, extra);
    s = std::make_unique<TestServer>(
        TestServerOptions{.gpus = 1,
                          .relay_library = relay,
                          .relay_gpu_server = GPU_SERVER,
                          .relay_args = {"--config", dir.file("relay.toml")}});
  }
  std::vector<double> got = measure_shares(COMPUTE_PROBE, *s, compute_mix_tokens(caps.size()));
  EXPECT_EQ(got.size(), caps.size());
  got.resize(caps.size());
  return got;
}

// Each capped tenant's share within 3 points of its cap.
void expect_caps_held(const std::vector<int>& caps) {
  const std::vector<double> got = shares(caps);
  for (size_t i = 0; i < caps.size(); ++i) {
    if (caps[i]) expect_share(got[i], caps[i], "tenant t" + std::to_string(i));
  }
}

TEST(ComputeCaps, ThirtySeventy) { expect_caps_held({30, 70}); }

TEST(ComputeCaps, TwentyThirtyFifty) { expect_caps_held({20, 30, 50}); }

TEST(ComputeCaps, CappedTenantBesideUncappedOnes) {
  const std::vector<double> got = shares({30, 0, 0});
  expect_share(got[0], 30, "the capped tenant");
  // The uncapped tenants share the rest, work-conserving.
  EXPECT_GT(got[1] + got[2], 67 - kShort);
  EXPECT_NEAR(got[1], got[2], 8);
}

TEST(ComputeCaps, CappedTenantAloneIsHeldToItsCap) { expect_caps_held({30}); }

TEST(ComputeCaps, CappedTenantAloneMayBorrowIdleTime) {
  EXPECT_GT(shares({30}, "borrow = true\n")[0], 88 - kShort);
}

// ---- placement

// The PCI bus id the sim gives backend device d.
std::string bus(int d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0000:%02X:00.0", 0x17 + d);
  return buf;
}

// A client that keeps its session (and its place) until released.
std::unique_ptr<ChildProcess> hold(TenantServer& s, const std::string& token, std::string* line) {
  auto p = std::make_unique<ChildProcess>(COMPUTE_PROBE, std::vector<std::string>{"where", "hold"},
                                          s.env(token));
  *line = p->line();
  return p;
}

std::string where(TenantServer& s, const std::string& token) {
  std::string line;
  auto p = hold(s, token, &line);
  const bool refused = line.rfind("error ", 0) == 0;  // it has exited already
  if (!refused) p->send("done\n");
  EXPECT_EQ(p->wait(), refused ? 1 : 0);
  return line;
}

TEST(Placement, ATenantSeesItsGpusOnlyWithItsOwnFirst) {
  TenantServer s(R"(
[[tenant]]
name = "only2"
token = "only2"
gpus = [2]
[[tenant]]
name = "one3"
token = "one3"
gpus = [1, 3]
)",
                 4);
  EXPECT_EQ(where(s, "only2"), "devices 1 bus0 " + bus(2));
  const std::string line = where(s, "one3");
  EXPECT_TRUE(line == "devices 2 bus0 " + bus(1) || line == "devices 2 bus0 " + bus(3)) << line;
}

constexpr const char* kOne = "[[tenant]]\nname = \"t\"\ntoken = \"t\"\n";

// Three sessions of kOne's tenant, held at once, on a server of three GPUs with `server` (its
// [server] table) and `placement`: each sees all three GPUs, first the one in `first`.
void expect_placed(const std::string& server, const char* placement, std::array<int, 3> first) {
  TenantServer s(server + kOne, 3, placement);
  std::vector<std::unique_ptr<ChildProcess>> held;
  std::vector<std::string> lines(3);
  for (int i = 0; i < 3; ++i) held.push_back(hold(s, "t", &lines[i]));
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(lines[i], "devices 3 bus0 " + bus(first[i])) << "session " << i;
  }
  for (auto& p : held) p->send("done\n");
}

TEST(Placement, SpreadPutsSessionsOnDifferentGpus) {
  // Each sees a different one first.
  expect_placed("", "spread", {0, 1, 2});
}

TEST(Placement, BinpackFillsOneGpuUpToItsSessionBound) {
  expect_placed("[server]\nmax_sessions_per_gpu = 2\n", "binpack", {0, 0, 1});
}

TEST(Placement, ASessionNoGpuCanHoldIsRefusedWithWhatIsShort) {
  // Two tenants whose memory caps do not fit on one card together.
  TenantServer s(R"(
[[tenant]]
name = "big"
token = "big"
memory = 0.75
[[tenant]]
name = "also"
token = "also"
memory = 0.75
)",
                 1);
  std::string line;
  auto first = hold(s, "big", &line);
  EXPECT_EQ(line, "devices 1 bus0 " + bus(0));
  LogCapture log;
  EXPECT_EQ(where(s, "also"), "error CUDA_ERROR_NO_DEVICE");
  EXPECT_EQ(log.count("no GPU can hold a session of tenant also (GPU 0: memory: "), 1)
      << log.text();
  EXPECT_EQ(log.count(" MiB needed)"), 1) << log.text();
  first->send("done\n");
  EXPECT_EQ(first->wait(), 0);
  // Once the first tenant is gone, the second fits.
  for (int i = 0; i < 1000 && s.server().session_count() != 0; ++i) usleep(10000);
  EXPECT_EQ(where(s, "also"), "devices 1 bus0 " + bus(0));
}

}  // namespace
}  // namespace cuwire::testing
