// The hand-written message layout (protocol/wire_layout.h, protocol/messages.cc) against Cap'n
// Proto's own library on the schema it stands for (protocol/cuwire.capnp): every message the
// codec writes reads back through capnp with the same fields, every message a capnp builder
// writes (split over many segments, so with far pointers) decodes by hand with the same fields,
// and damaged messages are refused without reading outside them.

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "protocol/cuwire.capnp.h"
#include "protocol/frame.h"
#include "protocol/messages.h"

namespace cuwire {
namespace {

Frame frame_of(FrameType t, const std::vector<uint8_t>& msg) {
  Frame f;
  f.header.type = static_cast<uint16_t>(t);
  f.message.resize((msg.size() + 7) / 8);
  if (!msg.empty()) std::memcpy(f.message.data(), msg.data(), msg.size());
  return f;
}

// A capnp builder whose segments hold `words` words each: anything larger than a few fields
// spills into further segments, reached through far pointers.
struct SmallSegments {
  explicit SmallSegments(unsigned words) : builder(words, capnp::AllocationStrategy::FIXED_SIZE) {}
  capnp::MallocMessageBuilder builder;
  std::vector<uint8_t> flat() {
    kj::Array<capnp::word> words = capnp::messageToFlatArray(builder);
    std::vector<uint8_t> out(words.size() * 8);
    std::memcpy(out.data(), words.begin(), out.size());
    return out;
  }
};

template <typename Root>
typename Root::Reader read_with_capnp(const std::vector<uint8_t>& msg,
                                      std::unique_ptr<capnp::FlatArrayMessageReader>* keep,
                                      std::vector<capnp::word>* words) {
  words->resize(msg.size() / 8);
  std::memcpy(words->data(), msg.data(), msg.size());
  *keep = std::make_unique<capnp::FlatArrayMessageReader>(
      kj::ArrayPtr<const capnp::word>(words->data(), words->size()));
  return (*keep)->getRoot<Root>();
}

std::string random_text(std::mt19937_64& rng, size_t most) {
  std::string s(rng() % (most + 1), ' ');
  for (char& c : s) c = static_cast<char>('a' + rng() % 26);
  return s;
}

std::string random_bytes(std::mt19937_64& rng, size_t most) {
  std::string s(rng() % (most + 1), '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

std::string text(capnp::Text::Reader t) { return std::string(t.begin(), t.size()); }
std::string bytes(capnp::Data::Reader d) {
  return std::string(reinterpret_cast<const char*>(d.begin()), d.size());
}

TEST(WireLayout, HelloBothWays) {
  std::mt19937_64 rng(1);
  for (int i = 0; i < 200; ++i) {
    HelloMsg m;
    m.protocol_version = static_cast<uint32_t>(rng());
    m.manifest_hash = rng();
    m.client_name = random_text(rng, 40);
    m.pid = static_cast<uint32_t>(rng());
    m.token = random_text(rng, 70);
    m.probe = rng() & 1;
    m.control = rng() & 1;
    m.lane = rng() & 1;
    m.host_calls = rng() & 1;
    m.host_call_session = rng();
    m.host_call_key = random_bytes(rng, 16);
    // Ours, read by capnp.
    std::vector<uint8_t> msg;
    encode_hello(m, &msg);
    std::unique_ptr<capnp::FlatArrayMessageReader> keep;
    std::vector<capnp::word> words;
    auto h = read_with_capnp<wire::Hello>(msg, &keep, &words);
    EXPECT_EQ(h.getProtocolVersion(), m.protocol_version);
    EXPECT_EQ(h.getManifestHash(), m.manifest_hash);
    EXPECT_EQ(text(h.getClientName()), m.client_name);
    EXPECT_EQ(h.getPid(), m.pid);
    EXPECT_EQ(text(h.getToken()), m.token);
    EXPECT_EQ(h.getProbe(), m.probe);
    EXPECT_EQ(h.getControl(), m.control);
    EXPECT_EQ(h.getLane(), m.lane);
    EXPECT_EQ(h.getHostCalls(), m.host_calls);
    EXPECT_EQ(h.getHostCallSession(), m.host_call_session);
    EXPECT_EQ(bytes(h.getHostCallKey()), m.host_call_key);
    // capnp's, over segments of 2 + i % 5 words, read by ours.
    SmallSegments b(2 + i % 5);
    auto w = b.builder.initRoot<wire::Hello>();
    w.setProtocolVersion(m.protocol_version);
    w.setManifestHash(m.manifest_hash);
    w.setClientName(m.client_name);
    w.setPid(m.pid);
    w.setToken(m.token);
    w.setProbe(m.probe);
    w.setControl(m.control);
    w.setLane(m.lane);
    w.setHostCalls(m.host_calls);
    w.setHostCallSession(m.host_call_session);
    w.setHostCallKey(kj::arrayPtr(reinterpret_cast<const uint8_t*>(m.host_call_key.data()),
                                  m.host_call_key.size()));
    HelloMsg got;
    ASSERT_TRUE(decode_hello(frame_of(FrameType::kHello, b.flat()), &got).is_ok()) << i;
    EXPECT_EQ(got.protocol_version, m.protocol_version);
    EXPECT_EQ(got.manifest_hash, m.manifest_hash);
    EXPECT_EQ(got.client_name, m.client_name);
    EXPECT_EQ(got.pid, m.pid);
    EXPECT_EQ(got.token, m.token);
    EXPECT_EQ(got.probe, m.probe);
    EXPECT_EQ(got.control, m.control);
    EXPECT_EQ(got.lane, m.lane);
    EXPECT_EQ(got.host_calls, m.host_calls);
    EXPECT_EQ(got.host_call_session, m.host_call_session);
    EXPECT_EQ(got.host_call_key, m.host_call_key);
  }
}

TEST(WireLayout, WelcomeWithAndWithoutRoomBothWays) {
  std::mt19937_64 rng(2);
  for (int i = 0; i < 200; ++i) {
    WelcomeMsg m;
    m.protocol_version = static_cast<uint32_t>(rng());
    m.session_id = rng();
    m.server_name = random_text(rng, 30);
    m.backend = random_text(rng, 5);
    m.lane = rng() & 1;
    m.host_call_key = random_bytes(rng, 16);
    m.has_room = rng() & 1;
    if (m.has_room) {
      m.room.fits = rng() & 1;
      m.room.memory_left = rng();
      m.room.compute_left = static_cast<uint32_t>(rng());
      m.room.sessions = static_cast<uint32_t>(rng());
      m.room.why = random_text(rng, 90);
      m.room.placement = random_text(rng, 8);
    }
    std::vector<uint8_t> msg;
    encode_welcome(m, &msg);
    std::unique_ptr<capnp::FlatArrayMessageReader> keep;
    std::vector<capnp::word> words;
    auto w = read_with_capnp<wire::Welcome>(msg, &keep, &words);
    EXPECT_EQ(w.getProtocolVersion(), m.protocol_version);
    EXPECT_EQ(w.getSessionId(), m.session_id);
    EXPECT_EQ(text(w.getServerName()), m.server_name);
    EXPECT_EQ(text(w.getBackend()), m.backend);
    EXPECT_EQ(w.getLane(), m.lane);
    EXPECT_EQ(bytes(w.getHostCallKey()), m.host_call_key);
    ASSERT_EQ(w.hasRoom(), m.has_room);
    if (m.has_room) {
      auto r = w.getRoom();
      EXPECT_EQ(r.getFits(), m.room.fits);
      EXPECT_EQ(r.getMemoryLeft(), m.room.memory_left);
      EXPECT_EQ(r.getComputeLeft(), m.room.compute_left);
      EXPECT_EQ(r.getSessions(), m.room.sessions);
      EXPECT_EQ(text(r.getWhy()), m.room.why);
      EXPECT_EQ(text(r.getPlacement()), m.room.placement);
    }
    SmallSegments b(1 + i % 6);
    auto c = b.builder.initRoot<wire::Welcome>();
    c.setProtocolVersion(m.protocol_version);
    c.setSessionId(m.session_id);
    c.setServerName(m.server_name);
    c.setBackend(m.backend);
    c.setLane(m.lane);
    c.setHostCallKey(kj::arrayPtr(reinterpret_cast<const uint8_t*>(m.host_call_key.data()),
                                  m.host_call_key.size()));
    if (m.has_room) {
      auto r = c.initRoom();
      r.setFits(m.room.fits);
      r.setMemoryLeft(m.room.memory_left);
      r.setComputeLeft(m.room.compute_left);
      r.setSessions(m.room.sessions);
      r.setWhy(m.room.why);
      r.setPlacement(m.room.placement);
    }
    WelcomeMsg got;
    ASSERT_TRUE(decode_welcome(frame_of(FrameType::kWelcome, b.flat()), &got).is_ok()) << i;
    EXPECT_EQ(got.protocol_version, m.protocol_version);
    EXPECT_EQ(got.session_id, m.session_id);
    EXPECT_EQ(got.server_name, m.server_name);
    EXPECT_EQ(got.backend, m.backend);
    EXPECT_EQ(got.lane, m.lane);
    EXPECT_EQ(got.host_call_key, m.host_call_key);
    ASSERT_EQ(got.has_room, m.has_room);
    EXPECT_EQ(got.room.fits, m.room.fits);
    EXPECT_EQ(got.room.memory_left, m.room.memory_left);
    EXPECT_EQ(got.room.compute_left, m.room.compute_left);
    EXPECT_EQ(got.room.sessions, m.room.sessions);
    EXPECT_EQ(got.room.why, m.room.why);
    EXPECT_EQ(got.room.placement, m.room.placement);
  }
}

TEST(WireLayout, CallsRepliesErrorsHostCallsAndControlBothWays) {
  std::mt19937_64 rng(3);
  for (int i = 0; i < 200; ++i) {
    const std::string args = random_bytes(rng, 300), outs = random_bytes(rng, 300),
                      printed = random_text(rng, 50), message = random_text(rng, 60),
                      command = random_text(rng, 12), json = random_text(rng, 200);
    const uint32_t id = static_cast<uint32_t>(rng()), result = static_cast<uint32_t>(rng());
    const uint64_t context = rng();
    const auto span = [](const std::string& s) {
      return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size());
    };
    const auto kj_bytes = [](const std::string& s) {
      return kj::arrayPtr(reinterpret_cast<const uint8_t*>(s.data()), s.size());
    };
    std::vector<uint8_t> msg;
    std::unique_ptr<capnp::FlatArrayMessageReader> keep;
    std::vector<capnp::word> words;
    // Call.
    encode_call(id, context, span(args), &msg);
    auto call = read_with_capnp<wire::Call>(msg, &keep, &words);
    EXPECT_EQ(call.getCallId(), id);
    EXPECT_EQ(call.getContext(), context);
    EXPECT_EQ(bytes(call.getArgs()), args);
    {
      SmallSegments b(1 + i % 4);
      auto c = b.builder.initRoot<wire::Call>();
      c.setCallId(id);
      c.setContext(context);
      c.setArgs(kj_bytes(args));
      CallView v;
      const Frame f = frame_of(FrameType::kCall, b.flat());
      ASSERT_TRUE(decode_call(f, &v).is_ok());
      EXPECT_EQ(v.call_id, id);
      EXPECT_EQ(v.context, context);
      EXPECT_EQ(std::string(v.args.begin(), v.args.end()), args);
    }
    // Reply, with and without device output.
    const bool with_output = rng() & 1;
    encode_reply(result, span(outs), &msg,
                 with_output ? span(printed) : std::span<const uint8_t>());
    auto reply = read_with_capnp<wire::Reply>(msg, &keep, &words);
    EXPECT_EQ(reply.getResult(), result);
    EXPECT_EQ(bytes(reply.getOuts()), outs);
    EXPECT_EQ(bytes(reply.getDeviceOutput()), with_output ? printed : "");
    {
      SmallSegments b(1 + i % 4);
      auto r = b.builder.initRoot<wire::Reply>();
      r.setResult(result);
      r.setOuts(kj_bytes(outs));
      if (with_output) r.setDeviceOutput(kj_bytes(printed));
      ReplyView v;
      const Frame f = frame_of(FrameType::kReply, b.flat());
      ASSERT_TRUE(decode_reply(f, &v).is_ok());
      EXPECT_EQ(v.result, result);
      EXPECT_EQ(std::string(v.outs.begin(), v.outs.end()), outs);
      EXPECT_EQ(std::string(v.device_output.begin(), v.device_output.end()),
                with_output ? printed : "");
    }
    // Error: every kind, and one this build does not know (read as kFailed).
    const auto kind = static_cast<ErrorKind>(rng() % 10);
    encode_error({kind, message}, &msg);
    auto e = read_with_capnp<wire::Error>(msg, &keep, &words);
    EXPECT_EQ(static_cast<uint16_t>(e.getKind()), static_cast<uint16_t>(kind));
    EXPECT_EQ(text(e.getMessage()), message);
    {
      SmallSegments b(1 + i % 3);
      auto w = b.builder.initRoot<wire::Error>();
      w.setKind(static_cast<wire::Error::Kind>(i % 2 ? static_cast<uint16_t>(kind) : 999));
      w.setMessage(message);
      ErrorMsg got;
      ASSERT_TRUE(decode_error(frame_of(FrameType::kError, b.flat()), &got).is_ok());
      EXPECT_EQ(got.kind, i % 2 ? kind : ErrorKind::kFailed);
      EXPECT_EQ(got.message, message);
    }
    // HostCall.
    encode_host_call({context, result}, &msg);
    auto hc = read_with_capnp<wire::HostCall>(msg, &keep, &words);
    EXPECT_EQ(hc.getId(), context);
    EXPECT_EQ(hc.getStatus(), result);
    // Control and its reply.
    encode_control({command, json}, &msg);
    auto control = read_with_capnp<wire::Control>(msg, &keep, &words);
    EXPECT_EQ(text(control.getCommand()), command);
    EXPECT_EQ(text(control.getArgs()), json);
    {
      SmallSegments b(1 + i % 5);
      auto r = b.builder.initRoot<wire::ControlReply>();
      r.setOk(i % 2);
      r.setError(message);
      r.setBody(json);
      ControlReplyMsg got;
      ASSERT_TRUE(decode_control_reply(frame_of(FrameType::kControlReply, b.flat()), &got).is_ok());
      EXPECT_EQ(got.ok, i % 2 == 1);
      EXPECT_EQ(got.error, message);
      EXPECT_EQ(got.body, json);
    }
  }
}

// The client's enqueue path writes Call messages straight into its buffer: byte for byte what
// a capnp builder makes of the same call in one segment, at every padding of the arguments.
TEST(WireLayout, CallsWrittenInPlaceAsCapnpWritesThem) {
  for (size_t n : {0, 1, 7, 8, 9, 63, 300, 4096}) {
    std::vector<uint8_t> args(n);
    for (size_t i = 0; i < n; ++i) args[i] = static_cast<uint8_t>(i * 13 + 1);
    std::vector<uint8_t> by_hand(call_message_bytes(n), 0xee);
    encode_call_into(0xdeadbeef, 0x1122334455667788ull, args, by_hand.data());
    capnp::MallocMessageBuilder b(static_cast<unsigned>(8 + n / 8),
                                  capnp::AllocationStrategy::FIXED_SIZE);
    auto c = b.initRoot<wire::Call>();
    c.setCallId(0xdeadbeef);
    c.setContext(0x1122334455667788ull);
    c.setArgs(kj::arrayPtr(args.data(), args.size()));
    kj::Array<capnp::word> words = capnp::messageToFlatArray(b);
    ASSERT_EQ(b.getSegmentsForOutput().size(), 1u) << n;
    std::vector<uint8_t> built(words.size() * 8);
    std::memcpy(built.data(), words.begin(), built.size());
    EXPECT_EQ(by_hand, built) << n << " argument bytes";
    std::vector<uint8_t> encoded;
    encode_call(0xdeadbeef, 0x1122334455667788ull, args, &encoded);
    EXPECT_EQ(encoded, by_hand) << n;
    CallView v;  // its args point into the frame
    const Frame f = frame_of(FrameType::kCall, by_hand);
    ASSERT_TRUE(decode_call(f, &v).is_ok()) << n;
    EXPECT_EQ(v.call_id, 0xdeadbeefu);
    EXPECT_EQ(v.context, 0x1122334455667788ull);
    EXPECT_EQ(std::vector<uint8_t>(v.args.begin(), v.args.end()), args);
  }
}

// Damaged messages: each is refused as malformed; none is read outside its bytes (the
// sanitizer pass checks that), whatever byte was changed.
TEST(WireLayout, DamagedMessagesAreRefused) {
  std::vector<uint8_t> good;
  WelcomeMsg w;
  w.server_name = "host";
  w.backend = "sim";
  w.has_room = true;
  w.room.why = "no room on GPU 0";
  encode_welcome(w, &good);
  auto refused = [](const std::vector<uint8_t>& msg) {
    WelcomeMsg out;
    return !decode_welcome(frame_of(FrameType::kWelcome, msg), &out).is_ok();
  };
  // The segment table: a count past the message, a size past it, no root.
  std::vector<uint8_t> m = good;
  m[0] = 0xff;
  m[1] = 0xff;
  EXPECT_TRUE(refused(m));
  m = good;
  m[4] = 0xff;
  EXPECT_TRUE(refused(m));
  m = good;
  std::memset(m.data() + 4, 0, 4);
  EXPECT_TRUE(refused(m));
  // The root pointer far past the segment, a list where the struct belongs, a capability.
  m = good;
  m[8] = 0xfc;
  m[9] = 0xff;
  m[10] = 0xff;
  m[11] = 0x0f;
  EXPECT_TRUE(refused(m));
  m = good;
  m[8] |= 1;
  EXPECT_TRUE(refused(m));
  m = good;
  m[8] |= 3;
  EXPECT_TRUE(refused(m));
  // A far root pointer to a segment the message does not have.
  m = good;
  const uint64_t far = 2 | (uint64_t{7} << 32);
  std::memcpy(m.data() + 8, &far, 8);
  EXPECT_TRUE(refused(m));
  // Every single-byte change of every byte: decoded or refused, never read outside.
  std::mt19937_64 rng(4);
  int refusals = 0;
  for (size_t i = 0; i < good.size(); ++i) {
    for (int k = 0; k < 8; ++k) {
      m = good;
      m[i] = static_cast<uint8_t>(rng());
      refusals += refused(m);
    }
  }
  EXPECT_GT(refusals, 0);
  // Text without its NUL: the server name's last byte.
  WelcomeMsg plain;
  plain.server_name = "abcdefg";  // 8 bytes with its NUL: one word
  encode_welcome(plain, &m);
  bool found = false;
  for (size_t i = 0; i + 8 <= m.size(); i += 8) {
    if (std::memcmp(m.data() + i, "abcdefg", 8) == 0) {
      m[i + 7] = 'h';
      found = true;
    }
  }
  ASSERT_TRUE(found);
  EXPECT_TRUE(refused(m));
}

}  // namespace
}  // namespace cuwire
