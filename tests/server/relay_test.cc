// A relay whose upstream goes away (server/backend/relay/upstream.h): its clients' calls fail with
// CUDA_ERROR_DEVICE_UNAVAILABLE, the relay keeps serving, and a session that starts once the
// upstream is back works. Clients are processes (upstream_probe) talking to a relay process
// (test_support RelayServer) in front of an in-process sim server.

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "tests/support/test_support.h"

namespace cuwire::testing {
namespace {

// One upstream_probe process talking to `server`.
class Probe : public ChildProcess {
 public:
  Probe(const Address& server, const char* mode)
      : ChildProcess(UPSTREAM_PROBE,
                     mode ? std::vector<std::string>{mode} : std::vector<std::string>{},
                     {"CUWIRE_SERVER=" + server.to_string()}) {}
  void go() { send("go\n"); }
};

// An upstream sim server and a relay in front of it (a RelayServer of the test's own, which
// outlives the upstream: the fixture's relay would go with it).
class Relay : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(upstream_.ok()) << upstream_.status().to_string();
    relay_ = std::make_unique<RelayServer>(GPU_SERVER, CLIENT_LIBRARY, upstream_.address(),
                                           upstream_.dir());
    ASSERT_TRUE(relay_->ok()) << relay_->log();
  }
  // A new upstream server at the same address.
  void start_upstream() { ASSERT_TRUE(upstream_.start().is_ok()); }

  TestServer upstream_;
  std::unique_ptr<RelayServer> relay_;
};

TEST_F(Relay, UpstreamGoneThenBack) {
  RelayServer& relay = *relay_;

  // A session through the relay works, and stays open across the loss.
  Probe before(relay.address(), "wait");
  EXPECT_EQ(before.line(), "ready CUDA_SUCCESS");
  upstream_.stop();
  before.go();
  EXPECT_EQ(before.line(), "copy CUDA_ERROR_DEVICE_UNAVAILABLE");
  EXPECT_EQ(before.line(), "info CUDA_ERROR_DEVICE_UNAVAILABLE");

  // While the upstream is down, a new session is served and told the device is unavailable.
  {
    Probe during(relay.address(), nullptr);
    EXPECT_EQ(during.line(), "ready CUDA_ERROR_DEVICE_UNAVAILABLE");
  }

  // The upstream is back (a new server at the same address): the next session reconnects.
  start_upstream();
  {
    Probe after(relay.address(), nullptr);
    EXPECT_EQ(after.line(), "ready CUDA_SUCCESS");
  }
  // The session from before the loss still fails, without reaching the new upstream: the ids
  // and addresses it holds may name the new session's objects there.
  before.go();
  EXPECT_EQ(before.line(), "copy CUDA_ERROR_DEVICE_UNAVAILABLE");
  EXPECT_EQ(before.line(), "info CUDA_ERROR_DEVICE_UNAVAILABLE");
  std::string log = relay.log();
  EXPECT_NE(log.find("lost the upstream gpu-server"), std::string::npos) << log;
  EXPECT_NE(log.find("reconnected to the upstream gpu-server"), std::string::npos) << log;
}

// Each relay session has an upstream session of its own. An error the upstream defers (a
// fire-and-forget call that failed there) still reaches only the session that made the call,
// at its next synchronising call, as with one hop.
TEST_F(Relay, DeferredErrorsStayWithTheirSession) {
  RelayServer& relay = *relay_;
  Probe bad(relay.address(), "badstream");
  EXPECT_EQ(bad.line(), "ready CUDA_SUCCESS");
  EXPECT_EQ(bad.line(), "create CUDA_SUCCESS");  // fire-and-forget: not known yet
  EXPECT_EQ(bad.line(), "info CUDA_SUCCESS");    // in order: the relay has made the call
  {
    Probe other(relay.address(), "wait");
    EXPECT_EQ(other.line(), "ready CUDA_SUCCESS");
    other.go();
    EXPECT_EQ(other.line(), "copy CUDA_SUCCESS");  // synchronising: not the other's error
    EXPECT_EQ(other.line(), "info CUDA_SUCCESS");
  }
  bad.go();
  EXPECT_EQ(bad.line(), "sync CUDA_ERROR_INVALID_VALUE");
}

}  // namespace
}  // namespace cuwire::testing
