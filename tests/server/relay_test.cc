// A relay whose upstream goes away (server/upstream.h): its clients' calls fail with
// CUDA_ERROR_DEVICE_UNAVAILABLE, the relay keeps serving, and a session that starts once the
// upstream is back works. Clients are processes (upstream_probe) talking to a relay process
// (test_support RelayServer) in front of an in-process sim server.

#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "server.h"
#include "test_support.h"

extern char** environ;

namespace cuwire::testing {
namespace {

// One upstream_probe process with its stdin and stdout on pipes.
class Probe {
 public:
  Probe(const Address& server, const char* mode) {
    int to_child[2], from_child[2];
    EXPECT_EQ(pipe(to_child), 0);
    EXPECT_EQ(pipe(from_child), 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, to_child[0], 0);
    posix_spawn_file_actions_adddup2(&fa, from_child[1], 1);
    posix_spawn_file_actions_addclose(&fa, to_child[1]);
    posix_spawn_file_actions_addclose(&fa, from_child[0]);
    std::vector<std::string> env_text;
    for (char** e = environ; *e; ++e) {
      if (std::strncmp(*e, "CUWIRE_SERVER=", 14) != 0) env_text.emplace_back(*e);
    }
    env_text.push_back("CUWIRE_SERVER=" + server.to_string());
    std::vector<char*> envp;
    for (auto& e : env_text) envp.push_back(e.data());
    envp.push_back(nullptr);
    char* argv[] = {const_cast<char*>(UPSTREAM_PROBE), const_cast<char*>(mode), nullptr};
    EXPECT_EQ(posix_spawn(&pid_, UPSTREAM_PROBE, &fa, nullptr, argv, envp.data()), 0);
    posix_spawn_file_actions_destroy(&fa);
    close(to_child[0]);
    close(from_child[1]);
    in_ = fdopen(to_child[1], "w");
    out_ = fdopen(from_child[0], "r");
  }
  ~Probe() {
    if (in_) fclose(in_);
    if (out_) fclose(out_);
    if (pid_ > 0) waitpid(pid_, nullptr, 0);
  }
  // The next line it prints, without the newline; empty at its end.
  std::string line() {
    char buf[256];
    if (!std::fgets(buf, sizeof buf, out_)) return "";
    std::string s(buf);
    if (!s.empty() && s.back() == '\n') s.pop_back();
    return s;
  }
  void go() {
    std::fputs("go\n", in_);
    std::fflush(in_);
  }

 private:
  pid_t pid_ = -1;
  FILE* in_ = nullptr;
  FILE* out_ = nullptr;
};

std::unique_ptr<server::Server> start_upstream(const Address& a) {
  server::ServerConfig cfg;
  cfg.listen = {a};
  cfg.backend = "sim";
  auto s = std::make_unique<server::Server>(cfg);
  EXPECT_TRUE(s->start().is_ok());
  return s;
}

TEST(Relay, UpstreamGoneThenBack) {
  TempDir dir;
  Address up;
  ASSERT_TRUE(parse_address("unix:" + dir.file("upstream.sock"), &up).is_ok());
  auto upstream = start_upstream(up);
  RelayServer relay(GPU_SERVER, CLIENT_LIBRARY, up, dir);
  ASSERT_TRUE(relay.ok()) << relay.log();

  // A session through the relay works, and stays open across the loss.
  Probe before(relay.address(), "wait");
  EXPECT_EQ(before.line(), "ready CUDA_SUCCESS");
  upstream->stop();
  upstream.reset();
  before.go();
  EXPECT_EQ(before.line(), "copy CUDA_ERROR_DEVICE_UNAVAILABLE");
  EXPECT_EQ(before.line(), "info CUDA_ERROR_DEVICE_UNAVAILABLE");

  // While the upstream is down, a new session is served and told the device is unavailable.
  {
    Probe during(relay.address(), nullptr);
    EXPECT_EQ(during.line(), "ready CUDA_ERROR_DEVICE_UNAVAILABLE");
  }

  // The upstream is back (a new server at the same address): the next session reconnects.
  upstream = start_upstream(up);
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
  if (getenv("RELAY_TEST_SHOW_LOG")) std::printf("%s", log.c_str());
}

// The relay's sessions share one upstream session. An error the upstream defers (a
// fire-and-forget call that failed there) still reaches only the session that made the call,
// at its next synchronising call, as with one hop.
TEST(Relay, DeferredErrorsStayWithTheirSession) {
  TempDir dir;
  Address up;
  ASSERT_TRUE(parse_address("unix:" + dir.file("upstream.sock"), &up).is_ok());
  auto upstream = start_upstream(up);
  RelayServer relay(GPU_SERVER, CLIENT_LIBRARY, up, dir);
  ASSERT_TRUE(relay.ok()) << relay.log();
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
