// gpu-server over real transports: the handshake on unix, tcp and tls, and bad input from a
// peer, each refused with a clear Error, a closed connection and one log line, while other
// clients keep being served.

#include <gtest/gtest.h>

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <span>

#include "generated/call_ids.h"
#include "server/session/server.h"
#include "tests/support/test_support.h"

namespace cuwire::testing {
namespace {

class ServerTest : public ::testing::TestWithParam<Address::Kind> {
 protected:
  // Starts a sim server on one listener of the test's transport.
  void start(const std::string& token = "", FrameLimits limits = {}) {
    server::ServerConfig& cfg = server_.config();
    cfg.session.token = token;
    cfg.session.limits = limits;
    cfg.session.server_name = "test";
    Status s = server_.start();
    ASSERT_TRUE(s.is_ok()) << s.to_string();
    address_ = server_.address();
  }

  std::unique_ptr<ByteStream> connect() { return dial(server_.address(), {}, server_.cert()); }

  std::unique_ptr<ByteStream> connect_and_handshake() { return welcomed(connect()); }

  // cuDeviceGetCount over the raw protocol.
  void expect_device_count(ByteStream& s, uint64_t seq) {
    std::vector<uint8_t> msg;
    encode_call(static_cast<uint32_t>(CallId::k_cuDeviceGetCount), 0, {}, &msg);
    ASSERT_TRUE(send_raw(s, FrameType::kCall, msg, seq).is_ok());
    Frame f;
    ASSERT_TRUE(read_frame(s, FrameLimits{}, &f).is_ok());
    ASSERT_EQ(f.type(), FrameType::kReply);
    EXPECT_EQ(f.header.sequence, seq);
    ReplyView r;
    ASSERT_TRUE(decode_reply(f, &r).is_ok());
    EXPECT_EQ(r.result, 0u);
    ASSERT_EQ(r.outs.size(), sizeof(int));
    int count = 0;
    std::memcpy(&count, r.outs.data(), sizeof count);
    EXPECT_EQ(count, 1);
  }

  // Writes a frame header as a peer would, with `more` bytes after it.
  static Status write_header(ByteStream& s, const FrameHeader& h,
                             std::span<const uint8_t> more = {}) {
    std::span<const uint8_t> pieces[] = {{reinterpret_cast<const uint8_t*>(&h), sizeof h}, more};
    return s.write_all(std::span(pieces, more.empty() ? 1 : 2));
  }

  // After bad input from other peers, `good` (connected before it) is still served, and the
  // server, once stopped, has logged `what` `times` times.
  void expect_only_they_were_refused(ByteStream& good, const LogCapture& log,
                                     const std::string& what, int times = 1) {
    expect_device_count(good, 10);
    server_->stop();
    EXPECT_EQ(log.count(what), times) << log.text();
  }

  // A peer that sends bad input (`send`, on a connection of its own, after a Hello when
  // `hello`) is answered with an Error, returned, and closed, and it alone: see
  // expect_only_they_were_refused, with `logged` once.
  ErrorMsg expect_refused(bool hello, const std::function<void(ByteStream&)>& send,
                          const std::string& logged) {
    auto good = connect_and_handshake();
    LogCapture log;
    auto s = hello ? connect_and_handshake() : connect();
    send(*s);
    if (::testing::Test::HasFatalFailure()) return {};
    const ErrorMsg e = expect_error_and_close(*s);
    expect_only_they_were_refused(*good, log, logged);
    return e;
  }

  TestServer server_{{.listen = {GetParam()}, .start = false}};
  Address address_;
};

TEST_P(ServerTest, HandshakeAndCall) {
  start();
  auto s = connect();
  Frame f;
  ASSERT_TRUE(handshake(*s, &f).is_ok());
  ASSERT_EQ(f.type(), FrameType::kWelcome);
  WelcomeMsg w;
  ASSERT_TRUE(decode_welcome(f, &w).is_ok());
  EXPECT_EQ(w.backend, "sim");
  EXPECT_EQ(w.protocol_version, kProtocolVersion);
  expect_device_count(*s, 2);
  expect_device_count(*s, 3);
}

TEST_P(ServerTest, VersionMismatch) {
  start();
  LogCapture log;
  auto s = connect();
  const ErrorMsg e = hello_refused(*s, kProtocolVersion + 1);
  EXPECT_EQ(e.kind, ErrorKind::kVersionMismatch);
  EXPECT_NE(e.message.find("protocol"), std::string::npos);
  server_->stop();
  EXPECT_EQ(log.count("protocol version mismatch"), 1) << log.text();
}

TEST_P(ServerTest, ManifestMismatch) {
  start();
  LogCapture log;
  auto s = connect();
  EXPECT_EQ(hello_refused(*s, kProtocolVersion, kManifestHash ^ 1).kind,
            ErrorKind::kManifestMismatch);
  server_->stop();
  EXPECT_EQ(log.count("manifest mismatch"), 1) << log.text();
}

TEST_P(ServerTest, TokenIsChecked) {
  start("sesame");
  EXPECT_EQ(hello_refused(*connect()).kind, ErrorKind::kUnauthorized);
  auto s = connect();
  Frame f;
  ASSERT_TRUE(handshake(*s, &f, kProtocolVersion, 0, "sesame").is_ok());
  EXPECT_EQ(f.type(), FrameType::kWelcome);
}

TEST_P(ServerTest, BadMagic) {
  start();
  FrameHeader h;
  h.magic = 0xdeadbeef;
  h.type = 1;
  auto send = [&](ByteStream& s) { ASSERT_TRUE(write_header(s, h).is_ok()); };
  EXPECT_EQ(expect_refused(false, send, "malformed frame").kind, ErrorKind::kMalformedFrame);
}

TEST_P(ServerTest, LengthOverTheLimit) {
  FrameLimits limits;
  limits.max_message_bytes = 4096;
  limits.max_bulk_bytes = 1 << 20;
  start("", limits);
  auto good = connect_and_handshake();
  LogCapture log;
  for (int which = 0; which < 2; ++which) {
    auto s = connect_and_handshake();
    FrameHeader h;
    h.type = static_cast<uint16_t>(FrameType::kCall);
    if (which == 0)
      h.message_bytes = 8192;
    else
      h.bulk_bytes = 2 << 20;
    ASSERT_TRUE(write_header(*s, h).is_ok());
    ErrorMsg e = expect_error_and_close(*s);
    EXPECT_EQ(e.kind, ErrorKind::kFrameTooLarge);
    EXPECT_NE(e.message.find("limit"), std::string::npos) << e.message;
  }
  expect_only_they_were_refused(*good, log, "frame too large", 2);
}

TEST_P(ServerTest, UnknownFrameType) {
  start();
  FrameHeader h;
  h.type = 77;
  auto send = [&](ByteStream& s) { ASSERT_TRUE(write_header(s, h).is_ok()); };
  EXPECT_EQ(expect_refused(true, send, "unknown frame type").kind, ErrorKind::kUnknownType);
}

TEST_P(ServerTest, TruncatedFrame) {
  start();
  // A header promising 64 message bytes, 8 of them, then the write side closes. The server
  // must answer (the read side is still open) and close.
  FrameHeader h;
  h.type = static_cast<uint16_t>(FrameType::kCall);
  h.message_bytes = 64;
  const uint8_t part[8] = {};
  const ErrorMsg e = expect_refused(
      true,
      [&](ByteStream& s) {
        ASSERT_TRUE(write_header(s, h, part).is_ok());
        s.close_write();
      },
      "truncated");
  EXPECT_EQ(e.kind, ErrorKind::kMalformedFrame);
  EXPECT_NE(e.message.find("truncated"), std::string::npos) << e.message;
}

TEST_P(ServerTest, GarbageMessage) {
  start();
  const std::vector<uint8_t> junk(64, 0xff);
  auto send = [&](ByteStream& s) { ASSERT_TRUE(send_raw(s, FrameType::kCall, junk).is_ok()); };
  EXPECT_EQ(expect_refused(true, send, "malformed frame").kind, ErrorKind::kMalformedFrame);
}

TEST_P(ServerTest, CallBeforeHello) {
  start();
  LogCapture log;
  auto s = connect();
  std::vector<uint8_t> msg;
  encode_call(static_cast<uint32_t>(CallId::k_cuDeviceGetCount), 0, {}, &msg);
  ASSERT_TRUE(send_raw(*s, FrameType::kCall, msg).is_ok());
  EXPECT_EQ(expect_error_and_close(*s).kind, ErrorKind::kUnexpected);
  server_->stop();
  EXPECT_EQ(log.count("unexpected message"), 1) << log.text();
}

TEST_P(ServerTest, ManyClientsAndDisconnectReclaims) {
  start();
  std::vector<std::unique_ptr<ByteStream>> clients;
  for (int i = 0; i < 8; ++i) clients.push_back(connect_and_handshake());
  for (size_t i = 0; i < clients.size(); ++i) expect_device_count(*clients[i], 100 + i);
  clients.clear();
  auto s = connect_and_handshake();
  expect_device_count(*s, 5);
}

INSTANTIATE_TEST_SUITE_P(Transports, ServerTest,
                         ::testing::Values(Address::Kind::kUnix, Address::Kind::kTcp,
                                           Address::Kind::kTls),
                         kind_name);

// A Unix socket path belongs to the server listening on it: a second server does not take it
// over, a stale socket of a dead server is replaced, another kind of file is left alone, and a
// listener going away removes only its own socket file.
TEST(UnixListener, PathIsOwnedByItsServer) {
  TempDir dir;
  Address a;
  ASSERT_TRUE(parse_address("unix:" + dir.file("s.sock"), &a).is_ok());
  std::unique_ptr<Listener> first, second;
  ASSERT_TRUE(listen_on(a, {}, &first).is_ok());
  Status busy = listen_on(a, {}, &second);
  EXPECT_FALSE(busy.is_ok());
  EXPECT_NE(busy.message().find("another server is listening"), std::string::npos)
      << busy.message();
  // The first one's socket is still there and still answers.
  std::unique_ptr<ByteStream> s;
  EXPECT_TRUE(connect_stream(a, {}, &s).is_ok());
  s.reset();

  // A socket left behind (its listener closed without removing it) is taken over.
  {
    int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::string stale = dir.file("stale.sock");
    std::snprintf(sa.sun_path, sizeof sa.sun_path, "%s", stale.c_str());
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
    ::close(fd);
    Address b;
    ASSERT_TRUE(parse_address("unix:" + stale, &b).is_ok());
    std::unique_ptr<Listener> l;
    EXPECT_TRUE(listen_on(b, {}, &l).is_ok());
  }

  // A regular file is not a socket to remove.
  std::string plain = dir.file("plain");
  std::ofstream(plain) << "data";
  Address c;
  ASSERT_TRUE(parse_address("unix:" + plain, &c).is_ok());
  std::unique_ptr<Listener> l3;
  EXPECT_FALSE(listen_on(c, {}, &l3).is_ok());
  EXPECT_TRUE(std::filesystem::exists(plain));

  // The path rebound by a later server survives the earlier listener's end.
  first->stop();
  ASSERT_EQ(::unlink(dir.file("s.sock").c_str()), 0);
  std::unique_ptr<Listener> later;
  ASSERT_TRUE(listen_on(a, {}, &later).is_ok());
  first.reset();
  EXPECT_TRUE(std::filesystem::exists(dir.file("s.sock")));
  later.reset();
  EXPECT_FALSE(std::filesystem::exists(dir.file("s.sock")));
}

TEST(TlsClient, RejectsAnUntrustedServer) {
  TempDir dir;
  std::string other_cert = dir.file("o.pem"), other_key = dir.file("ok.pem");
  make_self_signed_cert(other_cert, other_key);
  TestServer server({.listen = {Address::Kind::kTls}});
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  Address target = server.address();
  std::unique_ptr<ByteStream> s;
  Status st = connect_stream(target, {other_cert}, &s);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("handshake"), std::string::npos) << st.to_string();
}

}  // namespace
}  // namespace cuwire::testing
