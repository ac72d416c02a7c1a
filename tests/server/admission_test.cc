// Admission that one peer cannot monopolise, and local access by design (server/session/server.h,
// server/ops/metrics_http.h): a Unix peer is its uid and a network peer its IP address, each held
// to its own handshakes; host-call connections hold no handshake slot past their Hello; a
// client gets its session (and the admin CLI its control connection) within 2 s while another
// peer holds all the half-open connections it may; /metrics answers while trickling
// connections are held open; the Unix socket's mode and group are set; a Unix peer's uid names
// its tenant.
//
// Every wait on the server is bounded by a client-side deadline, so a broken bound fails a test
// instead of hanging it.

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <grp.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "generated/call_ids.h"
#include "server/calls/host_calls.h"
#include "server/ops/config_file.h"
#include "server/ops/metrics_http.h"
#include "server/session/server.h"
#include "tests/support/test_support.h"

namespace cuwire::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using server::Server;
using server::ServerConfig;

// The bound on a legitimate client's wait while another peer holds its half-open most.
// Under AddressSanitizer everything runs two to three times slower, and on a loaded 2-core
// machine a scrape was seen taking 2.03 s: the bound there is twice the (the release
// pass holds the issue's own).
#if defined(__SANITIZE_ADDRESS__)
constexpr auto kAdmitted = 4s;
#else
constexpr auto kAdmitted = 2s;
#endif
// The uid (and gid) an attacking child process takes.
constexpr uid_t kNobody = 65534;

HelloMsg hello_of(const std::string& token = "") {
  HelloMsg h;
  h.manifest_hash = kManifestHash;
  h.client_name = "admission_test";
  h.pid = static_cast<uint32_t>(getpid());
  h.token = token;
  return h;
}

// Sends `hello` and reads the answer: a Welcome or an Error (kind and message in *error).
FrameType greet(ByteStream& s, const HelloMsg& hello, WelcomeMsg* welcome = nullptr,
                ErrorMsg* error = nullptr) {
  std::vector<uint8_t> msg;
  encode_hello(hello, &msg);
  if (!send_raw(s, FrameType::kHello, msg).is_ok()) return FrameType::kGoodbye;
  Frame f;
  if (!read_frame(s, FrameLimits{}, &f).is_ok()) return FrameType::kGoodbye;
  if (f.type() == FrameType::kWelcome && welcome) {
    EXPECT_TRUE(decode_welcome(f, welcome).is_ok());
  }
  if (f.type() == FrameType::kError && error) {
    EXPECT_TRUE(decode_error(f, error).is_ok());
  }
  return f.type();
}

// A session and a control connection (the admin CLI's kind), each timed from connect to Welcome.
void expect_session_and_control_in_time(const Address& a) {
  for (bool control : {false, true}) {
    const auto t0 = Clock::now();
    auto s = dial(a);
    ASSERT_TRUE(s);
    HelloMsg h = hello_of();
    h.control = control;
    ErrorMsg e;
    EXPECT_EQ(greet(*s, h, nullptr, &e), FrameType::kWelcome)
        << (control ? "control: " : "session: ") << e.message;
    const auto took = Clock::now() - t0;
    EXPECT_LT(took, kAdmitted) << (control ? "control" : "session") << " took "
                               << std::chrono::duration<double>(took).count() << " s";
  }
}

// Waits (up to `limit`) for the server's open connections to reach n; false if they did not.
bool wait_connections(const Server& server, size_t n, std::chrono::milliseconds limit = 3000ms) {
  for (auto end = Clock::now() + limit; Clock::now() < end; std::this_thread::sleep_for(5ms)) {
    if (server.session_count() == n) return true;
  }
  return false;
}

// A child process as uid and gid kNobody that connects `n` times to the Unix socket at `path`
// and holds every connection open, silent, until destroyed. Needs root.
class NobodyHoldingConnections {
 public:
  NobodyHoldingConnections(const std::string& path, int n) {
    int ready[2], release[2];
    if (pipe(ready) != 0 || pipe(release) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      // Only what is safe after fork in a threaded process: system calls, then _exit.
      for (int fd = 3; fd < 4096; ++fd) {
        if (fd != ready[1] && fd != release[0]) close(fd);
      }
      if (setgroups(0, nullptr) != 0 || setgid(kNobody) != 0 || setuid(kNobody) != 0) _exit(3);
      sockaddr_un sa{};
      sa.sun_family = AF_UNIX;
      std::strncpy(sa.sun_path, path.c_str(), sizeof sa.sun_path - 1);
      int connected = 0;
      for (int i = 0; i < n; ++i) {
        int fd = socket(AF_UNIX, SOCK_STREAM, 0);
        if (fd < 0) break;
        if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0) ++connected;
      }
      (void)!write(ready[1], &connected, sizeof connected);
      char c;
      (void)!read(release[0], &c, 1);  // until the parent closes its end
      _exit(0);
    }
    close(ready[1]);
    close(release[0]);
    release_ = release[1];
    if (pid_ < 0 || read(ready[0], &connected_, sizeof connected_) != sizeof connected_) {
      connected_ = -1;
    }
    close(ready[0]);
  }
  ~NobodyHoldingConnections() {
    if (release_ >= 0) close(release_);
    if (pid_ > 0) waitpid(pid_, nullptr, 0);
  }
  int connected() const { return connected_; }

 private:
  pid_t pid_ = -1;
  int release_ = -1;
  int connected_ = -1;
};

// `n` silent TCP connections to `a` from the local address `from` (127.0.0.2: another peer).
std::vector<int> hold_tcp_from(const std::string& from, const Address& a, int n) {
  std::vector<int> fds;
  for (int i = 0; i < n; ++i) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) break;
    sockaddr_in src{};
    src.sin_family = AF_INET;
    inet_pton(AF_INET, from.c_str(), &src.sin_addr);
    sockaddr_in dst{};
    dst.sin_family = AF_INET;
    dst.sin_port = htons(static_cast<uint16_t>(a.port));
    inet_pton(AF_INET, a.host.c_str(), &dst.sin_addr);
    if (bind(fd, reinterpret_cast<sockaddr*>(&src), sizeof src) != 0 ||
        connect(fd, reinterpret_cast<sockaddr*>(&dst), sizeof dst) != 0) {
      close(fd);
      break;
    }
    fds.push_back(fd);
  }
  return fds;
}

class Admission : public ::testing::Test {
 protected:
  void SetUp() override {
    cfg_.listen.clear();  // each test names its own
    cfg_.session.server_name = "test";
    // The attackers' connections must still be held while the test runs, not timed out.
    cfg_.session.handshake_timeout = 30s;
    cfg_.limits.max_connections = 64;
    cfg_.limits.max_sessions = 32;
    cfg_.limits.max_handshakes_per_peer = 4;
  }
  void start() {
    Status s = server_.start();
    ASSERT_TRUE(s.is_ok()) << s.to_string();
  }
  Address unix_address() { return server_.listen_address(Address::Kind::kUnix); }
  Address tcp_address() { return server_.listen_address(Address::Kind::kTcp); }

  TestServer server_{{.start = false}};
  ServerConfig& cfg_ = server_.config();
};

// ---- half-open connections of another peer

TEST_F(Admission, AUnixPeerHoldingItsMostHalfOpenKeepsNoOtherUidOut) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: the attacker is a child that becomes uid 65534";
  cfg_.listen = {unix_address()};
  cfg_.socket_mode = "0666";  // uid 65534 may connect
  std::filesystem::permissions(server_.dir().path(), std::filesystem::perms(0755));
  start();
  // uid 65534 tries to take every connection the server has, and says nothing.
  NobodyHoldingConnections attacker(cfg_.listen[0].path,
                                    static_cast<int>(cfg_.limits.max_connections));
  ASSERT_GT(attacker.connected(), 0);
  // It holds its uid's handshakes, no more (the rest were refused and closed).
  EXPECT_TRUE(wait_connections(server_.server(), cfg_.limits.max_handshakes_per_peer))
      << server_->session_count() << " connections open";
  // root, another uid, gets a session and a control connection at once.
  expect_session_and_control_in_time(server_->addresses().at(0));
}

TEST_F(Admission, ATcpPeerHoldingItsMostHalfOpenKeepsNoOtherAddressOut) {
  cfg_.listen = {tcp_address()};
  start();
  const Address a = server_->addresses().at(0);
  std::vector<int> held =
      hold_tcp_from("127.0.0.2", a, static_cast<int>(cfg_.limits.max_connections));
  ASSERT_FALSE(held.empty()) << "cannot connect from 127.0.0.2";
  EXPECT_TRUE(wait_connections(server_.server(), cfg_.limits.max_handshakes_per_peer))
      << server_->session_count() << " connections open";
  expect_session_and_control_in_time(a);  // from 127.0.0.1
  for (int fd : held) close(fd);
}

// ---- host-call connections

class HostCallAdmission : public Admission, public ::testing::WithParamInterface<Address::Kind> {};

TEST_P(HostCallAdmission, HoldNoHandshakeSlotPastTheirHello) {
  cfg_.listen = {GetParam() == Address::Kind::kUnix ? unix_address() : tcp_address()};
  start();
  const Address a = server_->addresses().at(0);
  // Twice the peer's handshake limit in sessions that use host functions, from one peer (a
  // host, one NAT): each session and its host-call connection.
  const size_t n = 2 * cfg_.limits.max_handshakes_per_peer;
  std::vector<std::unique_ptr<ByteStream>> held;
  for (size_t i = 0; i < n; ++i) {
    auto s = dial(a);
    ASSERT_TRUE(s);
    WelcomeMsg w;
    ErrorMsg e;
    ASSERT_EQ(greet(*s, hello_of(), &w, &e), FrameType::kWelcome)
        << "session " << i << ": " << e.message;
    ASSERT_EQ(w.host_call_key.size(), server::HostCallRegistry::kKeyBytes);
    auto hc = dial(a);
    ASSERT_TRUE(hc);
    HelloMsg h = hello_of();
    h.host_calls = true;
    h.host_call_session = w.session_id;
    h.host_call_key = w.host_call_key;
    EXPECT_EQ(greet(*hc, h, nullptr, &e), FrameType::kWelcome)
        << "host calls " << i << ": " << e.message;
    held.push_back(std::move(s));
    held.push_back(std::move(hc));
  }
  // The same peer still has every handshake slot: it opens its most half-open connections,
  // and a new session and a control connection still come at once.
  std::vector<std::unique_ptr<ByteStream>> silent;
  for (size_t i = 0; i + 1 < cfg_.limits.max_handshakes_per_peer; ++i) silent.push_back(dial(a));
  EXPECT_TRUE(wait_connections(server_.server(), held.size() + silent.size()));
  expect_session_and_control_in_time(a);
}

INSTANTIATE_TEST_SUITE_P(Transports, HostCallAdmission,
                         ::testing::Values(Address::Kind::kUnix, Address::Kind::kTcp), kind_name);

// ---- /metrics

// An HTTP answer from the endpoint at `a` to a whole request; empty when none came in `limit`.
std::string scrape(const Address& a, std::chrono::milliseconds limit) {
  std::unique_ptr<ByteStream> s;
  if (!connect_stream(a, {}, &s).is_ok()) return "";
  StreamTimeouts t;
  t.deadline = Clock::now() + limit;
  s->set_timeouts(t);
  const std::string req = "GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n";
  const std::span<const uint8_t> piece(reinterpret_cast<const uint8_t*>(req.data()), req.size());
  if (!s->write_all({&piece, 1}).is_ok()) return "";
  std::string out;
  char buf[4096];
  size_t got = 0;
  while (s->read_some(buf, sizeof buf, &got).is_ok()) out.append(buf, got);
  return s->timed_out() ? "" : out;
}

// An endpoint on 127.0.0.1 whose /metrics are "up 1\n"; null, and a test failure, without one.
std::unique_ptr<server::MetricsHttp> start_metrics() {
  std::unique_ptr<server::MetricsHttp> m;
  Status st = server::MetricsHttp::start(
      "127.0.0.1:0", [] { return std::string("up 1\n"); }, &m);
  EXPECT_TRUE(st.is_ok()) << st.to_string();
  return m;
}

// Five scrapes of the endpoint at `a`, `pause` apart, while other peers crowd it: each one is
// answered in full within kAdmitted.
void expect_scrapes_served(const Address& a, std::chrono::milliseconds pause) {
  for (int i = 0; i < 5; ++i) {
    const auto t0 = Clock::now();
    const std::string answer =
        scrape(a, std::chrono::duration_cast<std::chrono::milliseconds>(kAdmitted) + 1000ms);
    const auto took = Clock::now() - t0;
    EXPECT_EQ(answer.rfind("HTTP/1.1 200 OK", 0), 0u) << "scrape " << i << ": '" << answer << "'";
    EXPECT_NE(answer.find("\r\n\r\nup 1\n"), std::string::npos) << answer;
    EXPECT_LT(took, kAdmitted) << "scrape " << i;
    std::this_thread::sleep_for(pause);
  }
}

TEST(MetricsAdmission, ScrapesAreServedWhileConnectionsTrickle) {
  std::unique_ptr<server::MetricsHttp> m = start_metrics();
  ASSERT_TRUE(m);
  const Address a = m->local_address();
  // As many tricklers as the endpoint serves at once, kept open (reopened when the endpoint
  // closes one): half say nothing, half send a request a byte every 200 ms.
  std::atomic<bool> stop{false};
  std::thread trickler([&] {
    const std::string req = "GET /metrics HTTP/1.1\r\nHost: slow\r\n\r\n";
    struct Slow {
      std::unique_ptr<ByteStream> s;
      size_t sent = 0;
    };
    std::vector<Slow> slow(server::MetricsHttp::kMaxConcurrent);
    while (!stop) {
      for (size_t i = 0; i < slow.size() && !stop; ++i) {
        Slow& c = slow[i];
        if (c.s && c.s->peer_closed()) c.s.reset();
        if (!c.s) {
          if (!connect_stream(a, {}, &c.s).is_ok()) continue;
          c.sent = 0;
        }
        if (i % 2 == 1 && c.sent + 1 < req.size()) {  // never the last byte
          const std::span<const uint8_t> one(reinterpret_cast<const uint8_t*>(&req[c.sent]), 1);
          if (c.s->write_all({&one, 1}).is_ok()) ++c.sent;
        }
      }
      std::this_thread::sleep_for(200ms);
    }
  });
  std::this_thread::sleep_for(500ms);  // every slot taken, and the tricklers on their way
  expect_scrapes_served(a, 100ms);
  stop = true;
  trickler.join();
}

// A peer that opens connections as fast as it can (never finishing a request) makes room from
// its own connections: another address's scrapes are served.
TEST(MetricsAdmission, AFloodFromOneAddressEvictsItsOwnConnections) {
  std::unique_ptr<server::MetricsHttp> m = start_metrics();
  ASSERT_TRUE(m);
  const Address a = m->local_address();
  std::atomic<bool> stop{false};
  std::atomic<int> opened{0};
  std::thread flood([&] {
    std::deque<int> open_fds;  // the newest 64 kept open, silent
    while (!stop) {
      std::vector<int> one = hold_tcp_from("127.0.0.2", a, 1);
      if (one.empty()) {
        std::this_thread::sleep_for(1ms);
        continue;
      }
      ++opened;
      open_fds.push_back(one[0]);
      if (open_fds.size() > 64) {
        close(open_fds.front());
        open_fds.pop_front();
      }
    }
    for (int fd : open_fds) close(fd);
  });
  std::this_thread::sleep_for(200ms);
  expect_scrapes_served(a, 0ms);
  stop = true;
  flood.join();
  EXPECT_GT(opened.load(), 64) << "the flood did not flood";
}

// ---- local access: the socket's mode and group, tenants by uid

TEST_F(Admission, TheUnixSocketGetsItsModeAndGroup) {
  // As root, a group that is not the server's own; otherwise the server's own (the only one
  // it may give).
  const gid_t gid = geteuid() == 0 ? kNobody : getgid();
  const group* g = getgrgid(gid);
  cfg_.listen = {unix_address()};
  cfg_.socket_mode = "0660";
  cfg_.socket_group = g ? std::string(g->gr_name) : std::to_string(gid);
  start();
  struct stat st {};
  ASSERT_EQ(lstat(cfg_.listen[0].path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0660u);
  EXPECT_EQ(st.st_gid, gid);
  // It still serves.
  auto s = dial(server_->addresses().at(0));
  ASSERT_TRUE(s);
  EXPECT_EQ(greet(*s, hello_of()), FrameType::kWelcome);
}

TEST_F(Admission, BadSocketModesAndGroupsAreRefused) {
  cfg_.listen = {unix_address()};
  for (const char* mode : {"0999", "rw-rw----", "01777", "", "0660 "}) {
    if (!*mode) continue;
    ServerConfig c = cfg_;
    c.socket_mode = mode;
    Status s = server::check_config(c);
    EXPECT_FALSE(s.is_ok()) << mode;
    EXPECT_NE(s.message().find("--socket-mode"), std::string::npos) << s.message();
    TestServer server({.start = false});
    server.config() = c;
    EXPECT_FALSE(server.start().is_ok()) << mode;
  }
  ServerConfig c = cfg_;
  c.socket_group = "no-such-group-cuwire-test";
  Status s = server::check_config(c);
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("socket group 'no-such-group-cuwire-test' is not a group"),
            std::string::npos)
      << s.message();
  TestServer server({.start = false});
  server.config() = c;
  EXPECT_FALSE(server.start().is_ok());
  EXPECT_FALSE(std::filesystem::exists(cfg_.listen[0].path));
  int mode = 0;
  ASSERT_TRUE(server::parse_socket_mode("660", &mode).is_ok());
  EXPECT_EQ(mode, 0660);
  ASSERT_TRUE(server::parse_socket_mode("0600", &mode).is_ok());
  EXPECT_EQ(mode, 0600);
}

TEST_F(Admission, AUnixPeersUidNamesItsTenant) {
  server::FileConfig file;
  const std::string toml = "[[tenant]]\nname = \"local\"\nuids = [" + std::to_string(getuid()) +
                           "]\n[[tenant]]\nname = \"remote\"\ntoken = \"remote-token\"\n";
  Status p = server::parse_config(toml, "uids.toml", &file);
  ASSERT_TRUE(p.is_ok()) << p.message();
  cfg_.tenants = file.tenants;
  cfg_.listen = {unix_address(), tcp_address()};
  start();
  const Address local = server_->addresses().at(0), network = server_->addresses().at(1);
  // The admin's list of sessions once it holds `needle` (the server fills a session's entry
  // just after its Welcome), or as it is after 3 s.
  auto sessions_with = [&](const std::string& needle) {
    server::ControlCaller admin;
    admin.admin = true;
    std::string body;
    for (auto end = Clock::now() + 3s; Clock::now() < end; std::this_thread::sleep_for(5ms)) {
      body = server_->control(admin, {"sessions", ""}).body;
      if (body.find(needle) != std::string::npos) break;
    }
    return body;
  };
  // Over the Unix socket without a token: the uid's tenant.
  auto mine = dial(local);
  ErrorMsg e;
  ASSERT_EQ(greet(*mine, hello_of(), nullptr, &e), FrameType::kWelcome) << e.message;
  std::string sessions = sessions_with("\"tenant\":\"local\"");
  EXPECT_NE(sessions.find("\"tenant\":\"local\""), std::string::npos) << sessions;
  // Its peer as the log lines name it: the socket, the uid and the pid.
  EXPECT_NE(
      sessions.find("s.sock uid " + std::to_string(getuid()) + " pid " + std::to_string(getpid())),
      std::string::npos)
      << sessions;
  // A token, when given, is checked as always: the right one is its tenant, a wrong one is
  // refused (not taken for the uid's).
  auto other = dial(local);
  ASSERT_EQ(greet(*other, hello_of("remote-token")), FrameType::kWelcome);
  sessions = sessions_with("\"tenant\":\"remote\"");
  EXPECT_NE(sessions.find("\"tenant\":\"remote\""), std::string::npos) << sessions;
  auto wrong = dial(local);
  ASSERT_EQ(greet(*wrong, hello_of("not-a-token"), nullptr, &e), FrameType::kError);
  EXPECT_EQ(e.kind, ErrorKind::kUnauthorized);
  // A control connection without a token is the uid's tenant too: its own view.
  auto control = dial(local);
  HelloMsg h = hello_of();
  h.control = true;
  EXPECT_EQ(greet(*control, h, nullptr, &e), FrameType::kWelcome) << e.message;
  // Over TCP a uid means nothing: a token is required.
  auto tcp = dial(network);
  ASSERT_EQ(greet(*tcp, hello_of(), nullptr, &e), FrameType::kError);
  EXPECT_EQ(e.kind, ErrorKind::kUnauthorized);
  EXPECT_NE(e.message.find("a token is required"), std::string::npos) << e.message;
}

TEST_F(Admission, AUidNamedByNoTenantNeedsAToken) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: the other uid is a child that becomes 65534";
  server::FileConfig file;
  ASSERT_TRUE(server::parse_config("[[tenant]]\nname = \"root\"\nuids = [0]\n", "uids.toml", &file)
                  .is_ok());
  cfg_.tenants = file.tenants;
  cfg_.listen = {unix_address()};
  cfg_.socket_mode = "0666";
  std::filesystem::permissions(server_.dir().path(), std::filesystem::perms(0755));
  start();
  // A child as uid 65534 says Hello without a token and reports the answer's frame type.
  int answer[2];
  ASSERT_EQ(pipe(answer), 0);
  const std::string path = cfg_.listen[0].path;
  std::vector<uint8_t> msg;
  encode_hello(hello_of(), &msg);
  // The frame as write_frame sends it: the header's bytes, then the message.
  FrameHeader head;
  head.type = static_cast<uint16_t>(FrameType::kHello);
  head.sequence = 1;
  head.message_bytes = static_cast<uint32_t>(msg.size());
  std::vector<uint8_t> frame(sizeof head);
  std::memcpy(frame.data(), &head, sizeof head);
  frame.insert(frame.end(), msg.begin(), msg.end());
  pid_t pid = fork();
  if (pid == 0) {
    if (setgroups(0, nullptr) != 0 || setgid(kNobody) != 0 || setuid(kNobody) != 0) _exit(3);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::strncpy(sa.sun_path, path.c_str(), sizeof sa.sun_path - 1);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) _exit(4);
    if (write(fd, frame.data(), frame.size()) != static_cast<ssize_t>(frame.size())) _exit(5);
    uint8_t reply[sizeof(FrameHeader)];
    size_t got = 0;
    while (got < sizeof reply) {
      ssize_t r = read(fd, reply + got, sizeof reply - got);
      if (r <= 0) _exit(6);
      got += static_cast<size_t>(r);
    }
    (void)!write(answer[1], reply, sizeof reply);
    _exit(0);
  }
  close(answer[1]);
  uint8_t reply[sizeof(FrameHeader)] = {};
  const bool read_all = read(answer[0], reply, sizeof reply) == sizeof reply;
  close(answer[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  ASSERT_TRUE(read_all);
  FrameHeader got;
  std::memcpy(&got, reply, sizeof got);
  EXPECT_EQ(got.magic, kFrameMagic);
  EXPECT_EQ(got.type, static_cast<uint16_t>(FrameType::kError));
  // And root, named by uids, is its tenant without one.
  auto mine = dial(server_->addresses().at(0));
  EXPECT_EQ(greet(*mine, hello_of()), FrameType::kWelcome);
}

}  // namespace
}  // namespace cuwire::testing
