// Framing, message encoding and address parsing.

#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "protocol/address.h"
#include "protocol/args.h"
#include "protocol/byte_stream.h"
#include "protocol/frame.h"
#include "protocol/messages.h"

namespace cuwire {
namespace {

TEST(FrameHeader, Checks) {
  FrameLimits limits;
  FrameHeader h;
  h.type = static_cast<uint16_t>(FrameType::kCall);
  EXPECT_TRUE(check_header(h, limits).is_ok());

  FrameHeader bad_magic = h;
  bad_magic.magic = 0x12345678;
  EXPECT_EQ(check_header(bad_magic, limits).code(), Status::Code::kMalformed);

  FrameHeader bad_type = h;
  bad_type.type = 99;
  EXPECT_EQ(check_header(bad_type, limits).code(), Status::Code::kUnknownType);
  bad_type.type = 0;
  EXPECT_EQ(check_header(bad_type, limits).code(), Status::Code::kUnknownType);

  FrameHeader odd = h;
  odd.message_bytes = 12;
  EXPECT_EQ(check_header(odd, limits).code(), Status::Code::kMalformed);

  FrameHeader big = h;
  big.message_bytes = limits.max_message_bytes + 8;
  EXPECT_EQ(check_header(big, limits).code(), Status::Code::kTooLarge);
  big = h;
  big.bulk_bytes = limits.max_bulk_bytes + 1;
  EXPECT_EQ(check_header(big, limits).code(), Status::Code::kTooLarge);
}

// Writes `count` call frames with `bulk` bytes each in one write, as a client's batch goes out.
void write_batch(ByteStream& s, int count, size_t bulk) {
  std::vector<uint8_t> all;
  for (int i = 0; i < count; ++i) {
    std::vector<uint8_t> msg;
    const uint8_t args[3] = {static_cast<uint8_t>(i), 2, 3};
    encode_call(static_cast<uint32_t>(i), 0, args, &msg);
    FrameHeader h;
    h.type = static_cast<uint16_t>(FrameType::kCall);
    h.message_bytes = static_cast<uint32_t>(msg.size());
    h.bulk_bytes = bulk;
    h.sequence = static_cast<uint64_t>(i + 1);
    const auto* hp = reinterpret_cast<const uint8_t*>(&h);
    all.insert(all.end(), hp, hp + sizeof h);
    all.insert(all.end(), msg.begin(), msg.end());
    all.insert(all.end(), bulk, static_cast<uint8_t>(i));
  }
  std::span<const uint8_t> piece[1] = {all};
  ASSERT_TRUE(s.write_all(piece).is_ok());
}

TEST(FrameReader, ABatchOfFramesComesOutFrameByFrame) {
  StreamPair p = make_stream_pair();
  std::thread writer([&] { write_batch(*p.a, 200, 37); });
  FrameReader reader(*p.b, 1024);  // small: frames straddle its refills
  for (int i = 0; i < 200; ++i) {
    Frame f;
    ASSERT_TRUE(reader.read(FrameLimits{}, &f).is_ok()) << i;
    EXPECT_EQ(f.header.sequence, static_cast<uint64_t>(i + 1));
    CallView c;
    ASSERT_TRUE(decode_call(f, &c).is_ok());
    EXPECT_EQ(c.call_id, static_cast<uint32_t>(i));
    ASSERT_EQ(f.bulk.size(), 37u);
    EXPECT_EQ(f.bulk[36], static_cast<uint8_t>(i));
  }
  writer.join();
  p.a->close_write();
  Frame f;
  EXPECT_EQ(reader.read(FrameLimits{}, &f).code(), Status::Code::kDisconnected);
}

TEST(FrameReader, BulkIsTakenInPiecesOrSkipped) {
  StreamPair p = make_stream_pair();
  constexpr size_t kBulk = 300000;  // larger than the reader's buffer: read straight through
  std::thread writer([&] { write_batch(*p.a, 3, kBulk); });
  FrameReader reader(*p.b, 4096);
  Frame f;
  ASSERT_TRUE(reader.read_head(FrameLimits{}, &f).is_ok());
  std::vector<uint8_t> part(1000);
  ASSERT_TRUE(reader.read_bulk(part.data(), part.size()).is_ok());
  EXPECT_EQ(reader.bulk_left(), kBulk - 1000);
  EXPECT_FALSE(reader.read_bulk(part.data(), kBulk).is_ok());  // past the frame's bulk
  ASSERT_TRUE(reader.skip_bulk(reader.bulk_left()).is_ok());
  ASSERT_TRUE(reader.read_head(FrameLimits{}, &f).is_ok());
  EXPECT_EQ(f.header.sequence, 2u);
  std::vector<uint8_t> all(kBulk);
  ASSERT_TRUE(reader.read_bulk(all.data(), all.size()).is_ok());
  EXPECT_EQ(all.front(), 1);
  EXPECT_EQ(all.back(), 1);
  ASSERT_TRUE(reader.read(FrameLimits{}, &f).is_ok());
  EXPECT_EQ(f.header.sequence, 3u);
  EXPECT_EQ(f.bulk.size(), kBulk);
  writer.join();
}

TEST(FrameReader, APeerThatStopsMidFrameSentATruncatedFrame) {
  StreamPair p = make_stream_pair();
  FrameHeader h;
  h.type = static_cast<uint16_t>(FrameType::kCall);
  h.message_bytes = 64;
  const std::span<const uint8_t> piece[1] = {{reinterpret_cast<const uint8_t*>(&h), sizeof h - 5}};
  ASSERT_TRUE(p.a->write_all(piece).is_ok());
  p.a->close_write();
  FrameReader reader(*p.b);
  Frame f;
  EXPECT_EQ(reader.read(FrameLimits{}, &f).code(), Status::Code::kMalformed);
}

TEST(Frame, RoundTripWithBulkPieces) {
  StreamPair p = make_stream_pair();
  std::vector<uint8_t> msg;
  const uint8_t args[] = {1, 2, 3, 4, 5};
  encode_call(42, 7, args, &msg);
  std::vector<uint8_t> a(1000, 0xab), b(3, 0xcd);
  std::span<const uint8_t> bulk[] = {a, b};
  FrameHeader h;
  h.type = static_cast<uint16_t>(FrameType::kCall);
  h.flags = kFlagNoReply;
  h.sequence = 99;
  ASSERT_TRUE(write_frame(*p.a, h, msg, bulk).is_ok());

  Frame f;
  ASSERT_TRUE(read_frame(*p.b, FrameLimits{}, &f).is_ok());
  EXPECT_EQ(f.type(), FrameType::kCall);
  EXPECT_EQ(f.header.flags, kFlagNoReply);
  EXPECT_EQ(f.header.sequence, 99u);
  ASSERT_EQ(f.bulk.size(), 1003u);
  EXPECT_EQ(f.bulk[0], 0xab);
  EXPECT_EQ(f.bulk[1002], 0xcd);
  CallView c;
  ASSERT_TRUE(decode_call(f, &c).is_ok());
  EXPECT_EQ(c.call_id, 42u);
  EXPECT_EQ(c.context, 7u);
  ASSERT_EQ(c.args.size(), 5u);
  EXPECT_EQ(c.args[4], 5);
}

TEST(Frame, TruncatedFrameIsMalformedCleanCloseIsDisconnect) {
  {
    StreamPair p = make_stream_pair();
    FrameHeader h;
    h.type = static_cast<uint16_t>(FrameType::kCall);
    h.message_bytes = 64;
    std::span<const uint8_t> pieces[] = {{reinterpret_cast<uint8_t*>(&h), sizeof h}};
    ASSERT_TRUE(p.a->write_all(pieces).is_ok());
    p.a.reset();  // closes after the header: the message never comes
    Frame f;
    Status s = read_frame(*p.b, FrameLimits{}, &f);
    EXPECT_EQ(s.code(), Status::Code::kMalformed) << s.to_string();
  }
  {
    StreamPair p = make_stream_pair();
    uint8_t half[10] = {};
    std::span<const uint8_t> pieces[] = {half};
    ASSERT_TRUE(p.a->write_all(pieces).is_ok());
    p.a.reset();  // a partial header
    Frame f;
    EXPECT_EQ(read_frame(*p.b, FrameLimits{}, &f).code(), Status::Code::kMalformed);
  }
  {
    StreamPair p = make_stream_pair();
    p.a.reset();
    Frame f;
    EXPECT_EQ(read_frame(*p.b, FrameLimits{}, &f).code(), Status::Code::kDisconnected);
  }
}

TEST(Messages, EncodeDecodeEveryType) {
  auto frame_of = [](FrameType t, const std::vector<uint8_t>& msg) {
    Frame f;
    f.header.type = static_cast<uint16_t>(t);
    f.message.resize(msg.size() / 8);
    std::memcpy(f.message.data(), msg.data(), msg.size());
    return f;
  };
  std::vector<uint8_t> msg;
  HelloMsg h{kProtocolVersion, 0x1122334455667788ull, "app", 1234, "secret"};
  encode_hello(h, &msg);
  HelloMsg h2;
  ASSERT_TRUE(decode_hello(frame_of(FrameType::kHello, msg), &h2).is_ok());
  EXPECT_EQ(h2.manifest_hash, h.manifest_hash);
  EXPECT_EQ(h2.client_name, "app");
  EXPECT_EQ(h2.pid, 1234u);
  EXPECT_EQ(h2.token, "secret");

  WelcomeMsg sent;
  sent.session_id = 5;
  sent.server_name = "host";
  sent.backend = "sim";
  encode_welcome(sent, &msg);
  WelcomeMsg w;
  ASSERT_TRUE(decode_welcome(frame_of(FrameType::kWelcome, msg), &w).is_ok());
  EXPECT_EQ(w.session_id, 5u);
  EXPECT_EQ(w.backend, "sim");

  encode_error({ErrorKind::kManifestMismatch, "why"}, &msg);
  ErrorMsg e;
  ASSERT_TRUE(decode_error(frame_of(FrameType::kError, msg), &e).is_ok());
  EXPECT_EQ(e.kind, ErrorKind::kManifestMismatch);
  EXPECT_EQ(e.message, "why");

  const uint8_t outs[] = {9, 8, 7};
  encode_reply(700, outs, &msg);
  ReplyView r;
  Frame rf = frame_of(FrameType::kReply, msg);
  ASSERT_TRUE(decode_reply(rf, &r).is_ok());
  EXPECT_EQ(r.result, 700u);
  ASSERT_EQ(r.outs.size(), 3u);
  EXPECT_EQ(r.outs[2], 7);

  // A message decoded as the wrong type is refused.
  EXPECT_FALSE(decode_hello(rf, &h2).is_ok());

  // The host-call connection's Hello, Welcome key, and its two frames.
  HelloMsg hc;
  hc.host_calls = true;
  hc.host_call_session = 77;
  hc.host_call_key = std::string("k\0ey", 4);
  encode_hello(hc, &msg);
  ASSERT_TRUE(decode_hello(frame_of(FrameType::kHello, msg), &h2).is_ok());
  EXPECT_TRUE(h2.host_calls);
  EXPECT_EQ(h2.host_call_session, 77u);
  EXPECT_EQ(h2.host_call_key, hc.host_call_key);
  sent.host_call_key = "0123456789abcdef";
  encode_welcome(sent, &msg);
  ASSERT_TRUE(decode_welcome(frame_of(FrameType::kWelcome, msg), &w).is_ok());
  EXPECT_EQ(w.host_call_key, sent.host_call_key);
  encode_host_call({1ull << 40, 719}, &msg);
  HostCallMsg call;
  ASSERT_TRUE(
      decode_host_call(frame_of(FrameType::kHostCall, msg), FrameType::kHostCall, &call).is_ok());
  EXPECT_EQ(call.id, 1ull << 40);
  EXPECT_EQ(call.status, 719u);
  EXPECT_TRUE(
      decode_host_call(frame_of(FrameType::kHostCallDone, msg), FrameType::kHostCallDone, &call)
          .is_ok());
  // A HostCall frame is not taken for a HostCallDone one.
  EXPECT_FALSE(
      decode_host_call(frame_of(FrameType::kHostCall, msg), FrameType::kHostCallDone, &call)
          .is_ok());
}

TEST(Messages, GarbageIsMalformedNotACrash) {
  Frame f;
  f.header.type = static_cast<uint16_t>(FrameType::kHello);
  f.message = {0xffffffffffffffffull, 0x0123456789abcdefull, 0};
  HelloMsg h;
  EXPECT_EQ(decode_hello(f, &h).code(), Status::Code::kMalformed);
  f.message.clear();
  EXPECT_EQ(decode_hello(f, &h).code(), Status::Code::kMalformed);
  // Segment table claiming a huge segment.
  f.message = {0x7fffffff00000000ull, 0};
  EXPECT_EQ(decode_hello(f, &h).code(), Status::Code::kMalformed);
}

TEST(Args, CursorIsBoundsChecked) {
  ArgBuffer b;
  b.put<uint32_t>(7);
  b.put_bytes("abc", 3);
  b.put_string("hi");
  b.put_string(nullptr);
  ArgCursor c(b.data());
  uint32_t v = 0;
  ASSERT_TRUE(c.get(&v));
  EXPECT_EQ(v, 7u);
  std::span<const uint8_t> bytes;
  ASSERT_TRUE(c.get_bytes(&bytes));
  EXPECT_EQ(bytes.size(), 3u);
  std::string s;
  bool is_null = true;
  ASSERT_TRUE(c.get_string(&s, &is_null));
  EXPECT_FALSE(is_null);
  EXPECT_EQ(s, "hi");
  ASSERT_TRUE(c.get_string(&s, &is_null));
  EXPECT_TRUE(is_null);
  EXPECT_TRUE(c.at_end());
  uint64_t more;
  EXPECT_FALSE(c.get(&more));
  EXPECT_FALSE(c.ok());

  // A length prefix larger than what follows.
  ArgBuffer lie;
  lie.put<uint64_t>(1000);
  lie.put<uint8_t>(1);
  ArgCursor c2(lie.data());
  EXPECT_FALSE(c2.get_bytes(&bytes));
}

TEST(Address, Parse) {
  Address a;
  ASSERT_TRUE(parse_address("unix:/tmp/x.sock", &a).is_ok());
  EXPECT_EQ(a.kind, Address::Kind::kUnix);
  EXPECT_EQ(a.path, "/tmp/x.sock");
  ASSERT_TRUE(parse_address("tcp:127.0.0.1:4000", &a).is_ok());
  EXPECT_EQ(a.kind, Address::Kind::kTcp);
  EXPECT_EQ(a.host, "127.0.0.1");
  EXPECT_EQ(a.port, 4000);
  ASSERT_TRUE(parse_address("tls:[::1]:443", &a).is_ok());
  EXPECT_EQ(a.kind, Address::Kind::kTls);
  EXPECT_EQ(a.host, "::1");
  EXPECT_EQ(a.to_string(), "tls:[::1]:443");
  for (const char* bad : {"", "tcp", "tcp:host", "tcp::80", "tcp:h:99999", "tcp:h:x",
                          "unix:", "udp:h:1", "tls:[::1:4"}) {
    EXPECT_FALSE(parse_address(bad, &a).is_ok()) << bad;
  }
}

}  // namespace
}  // namespace cuwire
