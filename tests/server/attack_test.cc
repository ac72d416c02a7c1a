// Attacks over the raw protocol: a client that does not use cuwire's library, speaking frames
// to an in-process gpu-server on the sim backend. Every attack must get a refusal for the
// attacker alone, while a second session (the victim) keeps its memory intact and keeps being
// served. The classes follow design decision 11: pointers and extents, sizes and counts,
// function pointers, objects that cross sessions or outlive their context, launches.
//
// This file: attacks of one session on another's memory and objects on one server. The
// server's own memory and relays: attack_memory_test.cc; tenants' caps: attack_caps_test.cc.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <future>
#include <string>
#include <vector>

#include "generated/call_ids.h"
#include "protocol/args.h"
#include "protocol/handle_kind.h"
#include "protocol/memory_runs.h"
#include "protocol/wire_formats.h"
#include "server/calls/host_calls.h"
#include "server/session/dispatch.h"
#include "tests/server/attack_client.h"
#include "tests/support/test_support.h"

namespace cuwire::testing {
namespace {

// Two parameters, a pointer and a count; it writes nothing.
constexpr char kPtx[] = R"(
.version 7.0
.target sm_50
.address_size 64
.visible .entry two_params(.param .u64 p, .param .u32 n)
{
  ret;
}
)";

class AttackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server::ServerConfig& cfg = server_.config();
    cfg.session.handles.max_contexts = 4;
    cfg.session.handles.max_streams = 16;
    cfg.session.server_name = "attack-test";
    const Status started = server_.start();
    ASSERT_TRUE(started.is_ok()) << started.to_string();
    address_ = server_.address();
    victim_ = std::make_unique<RawClient>(address_);
    attacker_ = std::make_unique<RawClient>(address_);
    victim_->create_context();
    attacker_->create_context();
    secret_.assign(4096, 0);
    for (size_t i = 0; i < secret_.size(); ++i) secret_[i] = static_cast<uint8_t>(i * 7 + 1);
    victim_buf_ = victim_->alloc(secret_.size());
    ASSERT_EQ(victim_->write(victim_buf_, secret_), CUDA_SUCCESS);
    own_buf_ = attacker_->alloc(4096);
  }

  // After every attack: the victim's bytes are what it wrote, and both sessions are served.
  void TearDown() override {
    Answer a = victim_->read(victim_buf_, secret_.size());
    EXPECT_EQ(a.rc, CUDA_SUCCESS);
    EXPECT_EQ(a.bulk, secret_) << "the victim's memory changed";
    victim_->expect_alive();
    attacker_->expect_alive();
  }

  TestServer server_{{.memory_bytes = 1ull << 30, .start = false}};
  Address address_;
  std::unique_ptr<RawClient> victim_, attacker_;
  std::vector<uint8_t> secret_;
  CUdeviceptr victim_buf_ = 0, own_buf_ = 0;
};

// The arithmetic every generated size check uses.
TEST(CheckedSize, OverflowAndNegativesAreInvalid) {
  using server::CheckedSize;
  EXPECT_EQ((CheckedSize(3) * sizeof(int)).value(), 12u);
  EXPECT_EQ((CheckedSize(7) + 5 - 2).value(), 10u);
  EXPECT_EQ((CheckedSize(size_t{10}) / 3).value(), 3u);
  EXPECT_FALSE((CheckedSize(size_t{1} << 63) * 2).ok());
  EXPECT_FALSE((CheckedSize(~size_t{0}) + 1).ok());
  EXPECT_FALSE((CheckedSize(0) - 1).ok());
  EXPECT_FALSE(CheckedSize(-1).ok());
  EXPECT_FALSE((CheckedSize(4) / 0).ok());
  // Invalid stays invalid through later steps, and in ternaries the value is the condition.
  EXPECT_FALSE(((CheckedSize(0) - 1) * 0 + 5).ok());
  const CheckedSize h = 0;
  EXPECT_EQ((h ? CheckedSize(100) * (h - 1) : CheckedSize(0)).value(), 0u);
  EXPECT_EQ((CheckedSize(size_t{1} << 63) * 2).value_or_max(), SIZE_MAX);
}

TEST_F(AttackTest, CopiesToAndFromAnotherSessionsMemoryAreRefused) {
  EXPECT_EQ(attacker_->read(victim_buf_, 16).rc, CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(attacker_->write(victim_buf_, std::vector<uint8_t>(16, 0xee)),
            CUDA_ERROR_INVALID_VALUE);
  // Device to device, both ways.
  for (auto [dst, src] : {std::pair{own_buf_, victim_buf_}, std::pair{victim_buf_, own_buf_}}) {
    ArgBuffer w;
    w.put(dst);
    w.put(src);
    w.put<size_t>(64);
    EXPECT_EQ(attacker_->call(CallId::k_cuMemcpyDtoD_v2, w).rc, CUDA_ERROR_INVALID_VALUE);
  }
  // Starting inside its own buffer and running into the next allocation.
  EXPECT_EQ(attacker_->read(own_buf_ + 4000, 4096).rc, CUDA_ERROR_INVALID_VALUE);
  // A memset over the victim, fire-and-forget: the error comes back at the next sync.
  {
    ArgBuffer w;
    w.put(victim_buf_);
    w.put<unsigned int>(0);
    w.put<size_t>(16);
    w.put<uint64_t>(0);
    attacker_->call(CallId::k_cuMemsetD32Async, w, {}, /*no_reply=*/true);
    ArgBuffer sync;
    EXPECT_EQ(attacker_->call(CallId::k_cuCtxSynchronize, sync).rc, CUDA_ERROR_INVALID_VALUE);
  }
}

// A tensor map names memory by address: the tensor must lie in the session's memory, its arrays
// hold exactly what the rank calls for, and a rank past 5 is refused before any array is read.
TEST_F(AttackTest, TensorMapsCoverOnlyTheSessionsMemory) {
  auto encode = [&](CUdeviceptr at, uint32_t rank, uint64_t rows, size_t dims_sent) {
    formats::TensorMapArgs a{};
    a.global_address = at;
    a.data_type = CU_TENSOR_MAP_DATA_TYPE_UINT8;
    a.rank = rank;
    const std::vector<uint64_t> dims = {16, rows, 1, 1, 1, 1, 1};
    const std::vector<uint64_t> strides(6, 16);
    const std::vector<uint32_t> box(7, 16), elem(7, 1);
    ArgBuffer w;
    w.put(a);
    w.put_bytes(dims.data(), dims_sent * sizeof(uint64_t));
    const size_t n = std::min<size_t>(rank, 7);  // what the arrays hold for a rank past 5
    w.put_bytes(strides.data(), (n ? n - 1 : 0) * sizeof(uint64_t));
    w.put_bytes(box.data(), n * sizeof(uint32_t));
    w.put_bytes(elem.data(), n * sizeof(uint32_t));
    return attacker_->call(CallId::k_cuTensorMapEncodeTiled, w);
  };
  // Its own buffer of 4096 bytes: 256 rows of 16 bytes fit, 257 do not.
  Answer ok = encode(own_buf_, 2, 256, 2);
  EXPECT_EQ(ok.rc, CUDA_SUCCESS);
  EXPECT_EQ(ok.outs.size(), sizeof(CUtensorMap));
  EXPECT_EQ(encode(own_buf_, 2, 257, 2).rc, CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(encode(victim_buf_, 2, 1, 2).rc, CUDA_ERROR_INVALID_VALUE);
  // A span that wraps 64 bits.
  EXPECT_EQ(encode(own_buf_, 2, uint64_t{1} << 62, 2).rc, CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(encode(own_buf_, 0, 1, 0).rc, CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(encode(own_buf_, 6, 1, 6).rc, CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(encode(own_buf_, 7u << 28, 1, 2).rc, CUDA_ERROR_INVALID_VALUE);
  // Fewer or more dimensions than the rank.
  EXPECT_EQ(encode(own_buf_, 2, 1, 1).rc, CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(encode(own_buf_, 2, 1, 3).rc, CUDA_ERROR_INVALID_VALUE);
  attacker_->expect_alive();
  victim_->expect_alive();
}

TEST_F(AttackTest, TwoDimensionalCopyIsCheckedWhereItCopies) {
  // The 2D call ignores srcZ and srcHeight; a check that used them would look at the
  // attacker's own buffer while the copy reads the victim's.
  const size_t pitch = 256;
  formats::CopyArgs c{};
  c.kind = static_cast<uint32_t>(formats::CopyKind::k2D);
  c.desc.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  c.desc.srcDevice = victim_buf_;
  c.desc.srcPitch = pitch;
  c.desc.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c.desc.dstDevice = own_buf_;
  c.desc.dstPitch = pitch;
  c.desc.WidthInBytes = 64;
  c.desc.Height = 4;
  // The sim hands out ascending, 256-byte aligned addresses: the attacker's buffer lies a
  // whole number of pitches after the victim's.
  ASSERT_GT(own_buf_, victim_buf_);
  ASSERT_EQ((own_buf_ - victim_buf_) % pitch, 0u);
  c.desc.srcZ = 1;
  c.desc.srcHeight = (own_buf_ - victim_buf_) / pitch;
  ArgBuffer w;
  w.put(c);
  EXPECT_EQ(attacker_->call(CallId::k_cuMemcpy2D_v2, w).rc, CUDA_ERROR_INVALID_VALUE);
  // A 3D copy whose offset arithmetic wraps around the address space.
  c.kind = static_cast<uint32_t>(formats::CopyKind::k3D);
  c.desc.srcDevice = own_buf_;
  c.desc.Depth = 1;
  c.desc.srcZ = 0;
  c.desc.srcHeight = 4;
  c.desc.srcY = (~uint64_t{0} - own_buf_ + victim_buf_ + 1) / pitch;
  ArgBuffer w3;
  w3.put(c);
  EXPECT_EQ(attacker_->call(CallId::k_cuMemcpy3D_v2, w3).rc, CUDA_ERROR_INVALID_VALUE);
}

TEST_F(AttackTest, AddressQueriesAnswerOnlyForTheSessionsMemory) {
  ArgBuffer w;
  w.put<uint8_t>(1);
  w.put<uint8_t>(1);
  w.put(victim_buf_ + 8);
  EXPECT_EQ(attacker_->call(CallId::k_cuMemGetAddressRange_v2, w).rc, CUDA_ERROR_INVALID_VALUE);
  ArgBuffer mine;
  mine.put<uint8_t>(1);
  mine.put<uint8_t>(1);
  mine.put(own_buf_ + 8);
  Answer a = attacker_->call(CallId::k_cuMemGetAddressRange_v2, mine);
  EXPECT_EQ(a.rc, CUDA_SUCCESS);
  EXPECT_EQ(a.out<CUdeviceptr>(), own_buf_);
}

TEST_F(AttackTest, SizesThatOverflowAreRefusedBeforeAnythingIsAllocated) {
  // pitch * (Height - 1) + Width * 4 wraps to a few bytes inside the attacker's buffer.
  {
    ArgBuffer w;
    w.put(own_buf_);
    w.put<size_t>(size_t{1} << 63);
    w.put<unsigned int>(0);
    w.put<size_t>(4);
    w.put<size_t>(3);
    EXPECT_EQ(attacker_->call(CallId::k_cuMemsetD2D32_v2, w).rc, CUDA_ERROR_INVALID_VALUE);
  }
  // Element counts far beyond any reply: a name of 2^31 - 1 bytes, a copy of 512 MiB out of a
  // 4 KiB buffer (refused by the range check before the reply buffer exists).
  {
    ArgBuffer w;
    w.put<int>(0x7fffffff);
    w.put<CUdevice>(0);
    EXPECT_EQ(attacker_->call(CallId::k_cuDeviceGetName, w).rc, CUDA_ERROR_INVALID_VALUE);
  }
  EXPECT_EQ(attacker_->read(own_buf_, size_t{512} << 20).rc, CUDA_ERROR_INVALID_VALUE);
  {
    ArgBuffer w;
    w.put<int>(-5);
    w.put<CUdevice>(0);
    EXPECT_EQ(attacker_->call(CallId::k_cuDeviceGetName, w).rc, CUDA_ERROR_INVALID_VALUE);
  }
  // An in-array whose count times its element size wraps to what was sent.
  {
    ArgBuffer w;
    const uint8_t none = 0;
    w.put_bytes(&none, 0);  // an empty array
    w.put<unsigned int>(0x40000000u);
    w.put<CUdevice>(0);
    Answer a = attacker_->call(CallId::k_cuDeviceGetHostAtomicCapabilities, w);
    EXPECT_NE(a.rc, CUDA_SUCCESS);
  }
}

TEST_F(AttackTest, FunctionPointersNeverCrossTheWire) {
  // The client library answers this itself; the server does not dispatch it, so a pointer
  // sent by a hostile client is never called.
  {
    ArgBuffer w;
    w.put<uint64_t>(0);
    w.put<uint64_t>(0xdeadbeef);  // "fn"
    w.put<uint64_t>(0x1234);
    EXPECT_EQ(attacker_->call(CallId::k_cuOccupancyMaxPotentialBlockSize, w).rc,
              CUDA_ERROR_NOT_SUPPORTED);
  }
  // Host functions travel as the client's ids (host_calls.h): a function and its data are
  // more than the call takes, and an id without the session's host-call connection has no one
  // to run it.
  for (CallId id : {CallId::k_cuLaunchHostFunc, CallId::k_cuStreamAddCallback}) {
    ArgBuffer w;
    w.put<uint64_t>(0);
    w.put<uint64_t>(0xdeadbeef);  // "fn"
    w.put<uint64_t>(0x1234);
    EXPECT_NE(attacker_->call(id, w).rc, CUDA_SUCCESS) << call_name(uint32_t(id));
    ArgBuffer id_only;
    id_only.put<uint64_t>(0);
    id_only.put<uint64_t>(7);
    EXPECT_EQ(attacker_->call(id, id_only).rc, CUDA_ERROR_NOT_PERMITTED) << call_name(uint32_t(id));
  }
}

TEST_F(AttackTest, OpenedMemoryGoesWithTheContextThatOpenedIt) {
  ArgBuffer get;
  get.put(victim_buf_);
  Answer handle = victim_->call(CallId::k_cuIpcGetMemHandle, get);
  ASSERT_EQ(handle.rc, CUDA_SUCCESS);
  const uint64_t first = attacker_->context();
  const uint64_t second = attacker_->create_context();
  ArgBuffer open;
  open.put(handle.out<CUipcMemHandle>());
  open.put<uint32_t>(CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
  Answer opened = attacker_->call(CallId::k_cuIpcOpenMemHandle_v2, open);
  ASSERT_EQ(opened.rc, CUDA_SUCCESS);  // one tenant (an open server): it may
  const auto p = opened.out<CUdeviceptr>();
  EXPECT_EQ(attacker_->read(p, 16).rc, CUDA_SUCCESS);
  // The context that opened it goes: the range is no memory of the session any more.
  attacker_->use_context(first);
  ArgBuffer destroy;
  destroy.put(second);
  ASSERT_EQ(attacker_->call(CallId::k_cuCtxDestroy_v2, destroy).rc, CUDA_SUCCESS);
  Answer after = attacker_->read(p, 16);
  EXPECT_NE(after.rc, CUDA_SUCCESS);
  EXPECT_TRUE(after.bulk.empty() ||
              after.bulk != std::vector<uint8_t>(secret_.begin(), secret_.begin() + 16));
}

// A host-call connection's handshake (cuwire.capnp: Hello.hostCalls); *answer: the server's
// Welcome or Error.
std::unique_ptr<ByteStream> host_call_connection(const Address& a, uint64_t session,
                                                 const std::string& key, Frame* answer) {
  std::unique_ptr<ByteStream> s;
  EXPECT_TRUE(connect_stream(a, {}, &s).is_ok());
  HelloMsg hello;
  hello.manifest_hash = kManifestHash;
  hello.host_calls = true;
  hello.host_call_session = session;
  hello.host_call_key = key;
  std::vector<uint8_t> msg;
  encode_hello(hello, &msg);
  FrameHeader h;
  h.type = static_cast<uint16_t>(FrameType::kHello);
  h.sequence = 1;
  EXPECT_TRUE(write_frame(*s, h, msg).is_ok());
  EXPECT_TRUE(read_frame(*s, FrameLimits{}, answer).is_ok());
  return s;
}

// The host-call connection of `c`'s own session, with its key; *answer as above.
std::unique_ptr<ByteStream> own_host_call_connection(const Address& a, const RawClient& c,
                                                     Frame* answer) {
  return host_call_connection(a, c.welcome().session_id, c.welcome().host_call_key, answer);
}

ErrorKind refusal(const Frame& f) {
  ErrorMsg e;
  if (f.type() != FrameType::kError || !decode_error(f, &e).is_ok()) return ErrorKind::kFailed;
  return e.kind;
}

TEST_F(AttackTest, HostCallConnectionsNeedTheSessionsKey) {
  const WelcomeMsg& mine = attacker_->welcome();
  const WelcomeMsg& theirs = victim_->welcome();
  ASSERT_EQ(mine.host_call_key.size(), 16u);
  EXPECT_NE(mine.host_call_key, theirs.host_call_key);
  Frame f;
  // The victim's session with the attacker's key, a key one bit off, no key, no such session.
  std::string flipped = theirs.host_call_key;
  flipped[3] ^= 1;
  for (auto [session, key] :
       std::vector<std::pair<uint64_t, std::string>>{{theirs.session_id, mine.host_call_key},
                                                     {theirs.session_id, flipped},
                                                     {theirs.session_id, ""},
                                                     {999999, mine.host_call_key}}) {
    auto s = host_call_connection(address_, session, key, &f);
    EXPECT_EQ(refusal(f), ErrorKind::kUnauthorized);
  }
  // Its own key opens its own; a second connection for the same session is refused.
  auto own = own_host_call_connection(address_, *attacker_, &f);
  EXPECT_EQ(f.type(), FrameType::kWelcome);
  auto again = own_host_call_connection(address_, *attacker_, &f);
  EXPECT_EQ(refusal(f), ErrorKind::kUnexpected);
}

TEST_F(AttackTest, AHostCallNobodyAnswersHoldsOnlyItsOwnSession) {
  Frame f;
  auto hc = own_host_call_connection(address_, *attacker_, &f);
  ASSERT_EQ(f.type(), FrameType::kWelcome);
  ArgBuffer w;
  w.put<uint64_t>(0);  // the null stream
  w.put<uint64_t>(42);
  ASSERT_EQ(attacker_->call(CallId::k_cuLaunchHostFunc, w).rc, CUDA_SUCCESS);
  // The server asks for id 42 and waits for it; a done for an id it never asked changes nothing.
  ASSERT_TRUE(read_frame(*hc, FrameLimits{}, &f).is_ok());
  HostCallMsg asked;
  ASSERT_TRUE(decode_host_call(f, FrameType::kHostCall, &asked).is_ok());
  EXPECT_EQ(asked.id, 42u);
  EXPECT_EQ(asked.status, 0u);
  std::vector<uint8_t> msg;
  encode_host_call({43, 0}, &msg);
  FrameHeader h;
  h.type = static_cast<uint16_t>(FrameType::kHostCallDone);
  ASSERT_TRUE(write_frame(*hc, h, msg).is_ok());
  // Meanwhile the victim is served, and the attacker's own stream is still held.
  victim_->expect_alive();
  ArgBuffer query;
  query.put<uint64_t>(0);
  EXPECT_EQ(attacker_->call(CallId::k_cuStreamQuery, query).rc, CUDA_ERROR_NOT_READY);
  // Garbage on the host-call connection ends it, and with it the wait: the stream goes on.
  h.type = static_cast<uint16_t>(FrameType::kCall);
  ASSERT_TRUE(write_frame(*hc, h, msg).is_ok());
  ArgBuffer none;
  EXPECT_EQ(attacker_->call(CallId::k_cuCtxSynchronize, none).rc, CUDA_SUCCESS);
  // Without its connection, the session's next host function is refused.
  EXPECT_EQ(attacker_->call(CallId::k_cuLaunchHostFunc, w).rc, CUDA_ERROR_NOT_PERMITTED);
}

TEST_F(AttackTest, HostFunctionsSeeAndWriteOnlyTheSessionsManagedMemory) {
  Frame f;
  auto hc = own_host_call_connection(address_, *attacker_, &f);
  ASSERT_EQ(f.type(), FrameType::kWelcome);
  ArgBuffer am;
  am.put<size_t>(4096);
  am.put<unsigned>(CU_MEM_ATTACH_GLOBAL);
  Answer managed = attacker_->call(CallId::k_cuMemAllocManaged, am);
  ASSERT_EQ(managed.rc, CUDA_SUCCESS);
  const auto m = managed.out<CUdeviceptr>();
  const std::vector<uint8_t> pattern(4096, 0x5a);
  ASSERT_EQ(attacker_->write(m, pattern), CUDA_SUCCESS);
  // Views asked for: its managed memory, its plain device memory, the victim's memory, and a
  // range that wraps around.
  auto enqueue = [&](uint64_t id, std::vector<std::pair<uint64_t, uint64_t>> ranges) {
    ArgBuffer w;
    w.put<uint64_t>(0);  // the null stream
    w.put<uint64_t>(id);
    w.put<uint32_t>(1);  // send the bytes
    w.put<uint32_t>(static_cast<uint32_t>(ranges.size()));
    for (auto [p, n] : ranges) {
      w.put<uint64_t>(p);
      w.put<uint64_t>(n);
    }
    return attacker_->call(CallId::k_cuLaunchHostFunc, w).rc;
  };
  auto done = [&](uint64_t id, std::vector<std::pair<uint64_t, uint8_t>> runs) {
    std::vector<uint8_t> bulk;
    for (auto [p, value] : runs) {
      const MemoryRunHead head{p, 64};
      const auto* b = reinterpret_cast<const uint8_t*>(&head);
      bulk.insert(bulk.end(), b, b + sizeof head);
      bulk.insert(bulk.end(), 64, value);
    }
    std::vector<uint8_t> msg;
    encode_host_call({id, 0}, &msg);
    FrameHeader h;
    h.type = static_cast<uint16_t>(FrameType::kHostCallDone);
    const std::span<const uint8_t> pieces[1] = {bulk};
    ASSERT_TRUE(write_frame(*hc, h, msg, pieces).is_ok());
  };
  ASSERT_EQ(enqueue(1, {{m, 4096}, {own_buf_, 64}, {victim_buf_, 64}, {m + 64, ~uint64_t{0}}}),
            CUDA_ERROR_INVALID_VALUE);  // the wrapping range refuses the call
  ASSERT_EQ(enqueue(1, {{m, 4096}, {own_buf_, 64}, {victim_buf_, 64}}), CUDA_SUCCESS);
  // The HostCall brings the managed bytes alone: not the plain memory, not the victim's.
  ASSERT_TRUE(read_frame(*hc, FrameLimits{}, &f).is_ok());
  ASSERT_EQ(f.type(), FrameType::kHostCall);
  std::vector<std::pair<uint64_t, size_t>> seen;
  EXPECT_TRUE(for_each_memory_run(f.bulk, [&](uint64_t p, std::span<const uint8_t> b) {
    seen.emplace_back(p, b.size());
    EXPECT_EQ(std::vector<uint8_t>(b.begin(), b.end()), pattern);
    return true;
  }));
  EXPECT_EQ(seen, (std::vector<std::pair<uint64_t, size_t>>{{m, 4096}}));
  // A done that also writes the victim's memory: that run is dropped (TearDown checks the
  // victim's bytes), the one inside the views is written.
  done(1, {{m, 0x11}, {victim_buf_, 0x22}});
  ArgBuffer sync;
  EXPECT_EQ(attacker_->call(CallId::k_cuCtxSynchronize, sync).rc, CUDA_SUCCESS);
  std::vector<uint8_t> first = pattern;
  std::fill(first.begin(), first.begin() + 64, 0x11);
  EXPECT_EQ(attacker_->read(m, 4096).bulk, first);
  ASSERT_EQ(attacker_->write(m, pattern), CUDA_SUCCESS);
  // A done inside the views is written before the stream goes on.
  ASSERT_EQ(enqueue(2, {{m, 4096}}), CUDA_SUCCESS);
  ASSERT_TRUE(read_frame(*hc, FrameLimits{}, &f).is_ok());
  done(2, {{m + 128, 0x33}});
  EXPECT_EQ(attacker_->call(CallId::k_cuCtxSynchronize, sync).rc, CUDA_SUCCESS);
  std::vector<uint8_t> want = pattern;
  std::fill(want.begin() + 128, want.begin() + 192, 0x33);
  EXPECT_EQ(attacker_->read(m, 4096).bulk, want);
  // A free of memory a waiting host function views waits for it.
  ASSERT_EQ(enqueue(3, {{m, 4096}}), CUDA_SUCCESS);
  ASSERT_TRUE(read_frame(*hc, FrameLimits{}, &f).is_ok());
  auto freed = std::async(std::launch::async, [&] {
    ArgBuffer w;
    w.put(m);
    return attacker_->call(CallId::k_cuMemFree_v2, w).rc;
  });
  EXPECT_EQ(freed.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout);
  victim_->expect_alive();
  done(3, {{m, 0x44}});
  EXPECT_EQ(freed.get(), CUDA_SUCCESS);
  // Too many views.
  std::vector<std::pair<uint64_t, uint64_t>> many(server::HostCallChannel::kMaxViews + 1,
                                                  {own_buf_, 1});
  EXPECT_EQ(enqueue(4, many), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(AttackTest, LaunchesMustCarryTheKernelsParameters) {
  const uint64_t function = attacker_->load_function(kPtx, sizeof kPtx, "two_params");
  ASSERT_NE(function, 0u);
  auto launch = [&](std::vector<formats::ParamSlot> slots, std::vector<CUlaunchAttribute> attrs,
                    CallId id) {
    formats::LaunchArgs a{};
    a.function = function;
    a.grid[0] = a.grid[1] = a.grid[2] = 1;
    a.block[0] = a.block[1] = a.block[2] = 1;
    a.num_params = static_cast<uint32_t>(slots.size());
    a.num_attrs = static_cast<uint32_t>(attrs.size());
    ArgBuffer w;
    w.put(a);
    w.put_bytes(slots.data(), slots.size() * sizeof(formats::ParamSlot));
    w.put_bytes(attrs.data(), attrs.size() * sizeof(CUlaunchAttribute));
    std::vector<uint8_t> params(16, 0);
    std::memcpy(params.data(), &own_buf_, sizeof own_buf_);
    w.put<uint64_t>(params.size());
    return attacker_->call(id, w, params).rc;
  };
  EXPECT_EQ(launch({{0, 8}, {8, 4}}, {}, CallId::k_cuLaunchKernel), CUDA_SUCCESS);
  EXPECT_EQ(launch({{0, 8}}, {}, CallId::k_cuLaunchKernel), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(launch({}, {}, CallId::k_cuLaunchKernel), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(launch({{0, 8}, {8, 2}}, {}, CallId::k_cuLaunchKernel), CUDA_ERROR_INVALID_VALUE);
  // Launch attributes that carry a handle are refused; plain values pass.
  CUlaunchAttribute event{};
  event.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT;
  event.value.programmaticEvent.event = reinterpret_cast<CUevent>(0x4141414141);
  EXPECT_EQ(launch({{0, 8}, {8, 4}}, {event}, CallId::k_cuLaunchKernelEx),
            CUDA_ERROR_NOT_SUPPORTED);
  CUlaunchAttribute window{};
  window.id = CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW;
  window.value.accessPolicyWindow.base_ptr = reinterpret_cast<void*>(victim_buf_);
  window.value.accessPolicyWindow.num_bytes = 64;
  EXPECT_EQ(launch({{0, 8}, {8, 4}}, {window}, CallId::k_cuLaunchKernelEx),
            CUDA_ERROR_INVALID_VALUE);
  CUlaunchAttribute priority{};
  priority.id = CU_LAUNCH_ATTRIBUTE_PRIORITY;
  EXPECT_EQ(launch({{0, 8}, {8, 4}}, {priority}, CallId::k_cuLaunchKernelEx), CUDA_SUCCESS);
}

// A pool attribute of a session's pool, as 8 bytes (counters) or 4 (flags).
uint64_t pool_attribute(RawClient& c, uint64_t pool_id, CUmemPool_attribute attr) {
  ArgBuffer w;
  w.put(pool_id);
  w.put(attr);
  Answer a = c.call(CallId::k_cuMemPoolGetAttribute, w);
  EXPECT_EQ(a.rc, CUDA_SUCCESS);
  uint64_t v = 0;
  std::memcpy(&v, a.bulk.data(), std::min(a.bulk.size(), sizeof v));
  return v;
}

TEST_F(AttackTest, DefaultMemoryPoolIsEachSessionsOwn) {
  ArgBuffer w;
  w.put<CUdevice>(0);
  Answer pool = attacker_->call(CallId::k_cuDeviceGetDefaultMemPool, w);
  ASSERT_EQ(pool.rc, CUDA_SUCCESS);
  const uint64_t pool_id = pool.out<uint64_t>();
  // Asked again, the same pool; cuDeviceGetMemPool names it while no other is set.
  EXPECT_EQ(attacker_->call(CallId::k_cuDeviceGetDefaultMemPool, w).out<uint64_t>(), pool_id);
  EXPECT_EQ(attacker_->call(CallId::k_cuDeviceGetMemPool, w).out<uint64_t>(), pool_id);
  // A default pool cannot be destroyed, but its owner may trim and configure it.
  ArgBuffer destroy;
  destroy.put(pool_id);
  EXPECT_EQ(attacker_->call(CallId::k_cuMemPoolDestroy, destroy).rc, CUDA_ERROR_INVALID_VALUE);
  ArgBuffer trim;
  trim.put(pool_id);
  trim.put<size_t>(0);
  EXPECT_EQ(attacker_->call(CallId::k_cuMemPoolTrimTo, trim).rc, CUDA_SUCCESS);
  ArgBuffer threshold;
  threshold.put(pool_id);
  threshold.put(CU_MEMPOOL_ATTR_RELEASE_THRESHOLD);
  const uint64_t keep = uint64_t{1} << 30;
  threshold.put<uint64_t>(sizeof keep);  // the bulk piece's length
  std::vector<uint8_t> value(sizeof keep);
  std::memcpy(value.data(), &keep, sizeof keep);
  EXPECT_EQ(attacker_->call(CallId::k_cuMemPoolSetAttribute, threshold, value).rc, CUDA_SUCCESS);
  EXPECT_EQ(pool_attribute(*attacker_, pool_id, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD), keep);
  // The victim's stream-ordered allocations come from its own default pool: the attacker's
  // counters do not show them.
  ArgBuffer alloc;
  alloc.put<size_t>(1 << 20);
  alloc.put<uint64_t>(0);
  Answer a = victim_->call(CallId::k_cuMemAllocAsync, alloc);
  ASSERT_EQ(a.rc, CUDA_SUCCESS);
  EXPECT_NE(a.out<CUdeviceptr>(), 0u);
  Answer theirs = victim_->call(CallId::k_cuDeviceGetDefaultMemPool, w);
  ASSERT_EQ(theirs.rc, CUDA_SUCCESS);
  EXPECT_GE(pool_attribute(*victim_, theirs.out<uint64_t>(), CU_MEMPOOL_ATTR_USED_MEM_CURRENT),
            uint64_t{1} << 20);
  EXPECT_EQ(pool_attribute(*attacker_, pool_id, CU_MEMPOOL_ATTR_USED_MEM_CURRENT), 0u);
  EXPECT_EQ(pool_attribute(*attacker_, pool_id, CU_MEMPOOL_ATTR_USED_MEM_HIGH), 0u);
}

TEST_F(AttackTest, ADevicesCurrentPoolIsEachSessionsOwn) {
  // The attacker makes its own pool the device's current one, so that another session's
  // stream-ordered allocations would come from a pool the attacker can trim and destroy.
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  ArgBuffer create;
  create.put_bytes(&props, sizeof props);
  Answer pool = attacker_->call(CallId::k_cuMemPoolCreate, create);
  ASSERT_EQ(pool.rc, CUDA_SUCCESS);
  ArgBuffer set;
  set.put<CUdevice>(0);
  set.put(pool.out<uint64_t>());
  ASSERT_EQ(attacker_->call(CallId::k_cuDeviceSetMemPool, set).rc, CUDA_SUCCESS);
  ArgBuffer get;
  get.put<CUdevice>(0);
  EXPECT_EQ(attacker_->call(CallId::k_cuDeviceGetMemPool, get).out<uint64_t>(),
            pool.out<uint64_t>());
  // The victim still sees its own default pool, not the attacker's.
  Answer theirs = victim_->call(CallId::k_cuDeviceGetMemPool, get);
  ASSERT_EQ(theirs.rc, CUDA_SUCCESS);
  ArgBuffer trim;
  trim.put(theirs.out<uint64_t>());
  trim.put<size_t>(0);
  EXPECT_EQ(victim_->call(CallId::k_cuMemPoolTrimTo, trim).rc, CUDA_SUCCESS);
  ArgBuffer alloc;
  alloc.put<size_t>(4096);
  alloc.put<uint64_t>(0);
  Answer mine = victim_->call(CallId::k_cuMemAllocAsync, alloc);
  ASSERT_EQ(mine.rc, CUDA_SUCCESS);
  ASSERT_EQ(victim_->write(mine.out<CUdeviceptr>(), secret_), CUDA_SUCCESS);
  EXPECT_GE(pool_attribute(*victim_, theirs.out<uint64_t>(), CU_MEMPOOL_ATTR_USED_MEM_CURRENT),
            4096u);
  // The attacker's pool goes; the victim's allocation stays readable and intact.
  ArgBuffer destroy;
  destroy.put(pool.out<uint64_t>());
  EXPECT_EQ(attacker_->call(CallId::k_cuMemPoolDestroy, destroy).rc, CUDA_SUCCESS);
  Answer back = victim_->read(mine.out<CUdeviceptr>(), secret_.size());
  EXPECT_EQ(back.rc, CUDA_SUCCESS);
  EXPECT_EQ(back.bulk, secret_);
}

TEST_F(AttackTest, HandlesPerSessionAreBounded) {
  // Streams are fire-and-forget: the one over the limit fails at the next synchronising call,
  // and never reaches the backend.
  for (int i = 0; i < 17; ++i) {
    ArgBuffer w;
    w.put(attacker_->mint());
    w.put<unsigned int>(0);
    attacker_->call(CallId::k_cuStreamCreate, w, {}, /*no_reply=*/true);
  }
  ArgBuffer sync;
  EXPECT_EQ(attacker_->call(CallId::k_cuCtxSynchronize, sync).rc, CUDA_ERROR_OUT_OF_MEMORY);
  // The session has one context; three more fit, the fifth does not.
  for (int i = 0; i < 3; ++i) attacker_->create_context();
  formats::ContextArgs c{};
  c.ctx_id = attacker_->mint();
  ArgBuffer w;
  w.put(c);
  EXPECT_EQ(attacker_->call(CallId::k_cuCtxCreate_v4, w).rc, CUDA_ERROR_OUT_OF_MEMORY);
}

TEST_F(AttackTest, ObjectsDieWithTheirContext) {
  // A graph captured in a context that is then destroyed: its exec is an unknown handle,
  // never a replay over freed memory.
  const uint64_t doomed = attacker_->create_context();
  CUdeviceptr buf = attacker_->alloc(1024);
  const uint64_t stream = attacker_->mint();
  {
    ArgBuffer w;
    w.put(stream);
    w.put<unsigned int>(0);
    attacker_->call(CallId::k_cuStreamCreate, w, {}, /*no_reply=*/true);
  }
  {
    ArgBuffer w;
    w.put(stream);
    w.put(CU_STREAM_CAPTURE_MODE_GLOBAL);
    ASSERT_EQ(attacker_->call(CallId::k_cuStreamBeginCapture_v2, w).rc, CUDA_SUCCESS);
  }
  {
    ArgBuffer w;
    w.put(buf);
    w.put<unsigned int>(7);
    w.put<size_t>(256);
    w.put(stream);
    attacker_->call(CallId::k_cuMemsetD32Async, w, {}, /*no_reply=*/true);
  }
  ArgBuffer end;
  end.put(stream);
  Answer graph = attacker_->call(CallId::k_cuStreamEndCapture, end);
  ASSERT_EQ(graph.rc, CUDA_SUCCESS);
  ArgBuffer inst;
  inst.put(graph.out<uint64_t>());
  inst.put<unsigned long long>(0);
  Answer exec = attacker_->call(CallId::k_cuGraphInstantiateWithFlags, inst);
  ASSERT_EQ(exec.rc, CUDA_SUCCESS);
  const uint64_t survivor = attacker_->create_context();
  ArgBuffer destroy;
  destroy.put(doomed);
  ASSERT_EQ(attacker_->call(CallId::k_cuCtxDestroy_v2, destroy).rc, CUDA_SUCCESS);
  attacker_->use_context(survivor);
  ArgBuffer launch;
  launch.put(exec.out<uint64_t>());
  launch.put<uint64_t>(0);
  EXPECT_EQ(attacker_->call(CallId::k_cuGraphLaunch, launch).rc, CUDA_ERROR_INVALID_HANDLE);
  ArgBuffer sync;
  sync.put(stream);
  EXPECT_EQ(attacker_->call(CallId::k_cuStreamSynchronize, sync).rc, CUDA_ERROR_INVALID_HANDLE);
  // The context's memory went with it.
  EXPECT_EQ(attacker_->read(buf, 16).rc, CUDA_ERROR_INVALID_VALUE);
}

// Green contexts over the wire: the server keeps the driver's resource structs and refuses
// copies it did not hand out; a green context's context goes only with it; a stream's answer
// names only contexts the session has; another session cannot touch any of it.
TEST_F(AttackTest, GreenContextsAreTheirSessionsAndEndOnlyAsGreenContexts) {
  RawClient& c = *victim_;
  const uint64_t own = c.create_context();  // the victim's calls run here, and go back here
  ArgBuffer dev;
  dev.put<int32_t>(0);
  dev.put<int32_t>(CU_DEV_RESOURCE_TYPE_SM);
  Answer all = c.call(CallId::k_cuDeviceGetDevResource, dev);
  ASSERT_EQ(all.rc, CUDA_SUCCESS);
  const auto device = all.out<CUdevResource>();
  ASSERT_EQ(device.sm.smCount, 40u);
  // `by` splits `input` into two groups of at least 2 SMs.
  auto split = [](RawClient& by, const CUdevResource& input) {
    ArgBuffer w;
    formats::SplitArgs a{};
    a.groups = 2;
    a.min_count = 2;
    a.want_result = 1;
    w.put(a);
    w.put(input);
    return by.call(CallId::k_cuDevSmResourceSplitByCount, w);
  };
  Answer groups = split(c, device);
  ASSERT_EQ(groups.rc, CUDA_SUCCESS);
  ASSERT_EQ(groups.out<uint32_t>(), 2u);
  const auto group = groups.out<CUdevResource>(sizeof(uint32_t));
  // Copies the server did not hand out, or changed, are refused.
  CUdevResource changed = device;
  changed.sm.smCount = 80;
  EXPECT_EQ(split(c, changed).rc, CUDA_ERROR_INVALID_VALUE);
  CUdevResource forged = device;
  formats::ResourceRef ref{};
  std::memcpy(&ref, forged._internal_padding, sizeof ref);
  ref.id += 1000;
  std::memcpy(forged._internal_padding, &ref, sizeof ref);
  EXPECT_EQ(split(c, forged).rc, CUDA_ERROR_INVALID_VALUE);
  // Another session's copy names nothing of its own.
  EXPECT_EQ(split(*attacker_, device).rc, CUDA_ERROR_INVALID_VALUE);
  ArgBuffer gen;
  gen.put_bytes(&group, sizeof group);
  gen.put<unsigned>(1);
  Answer desc = c.call(CallId::k_cuDevResourceGenerateDesc, gen);
  ASSERT_EQ(desc.rc, CUDA_SUCCESS);
  ArgBuffer create;
  create.put(formats::GreenContextArgs{desc.out<uint64_t>(), 0, CU_GREEN_CTX_DEFAULT_STREAM});
  Answer made = c.call(CallId::k_cuGreenCtxCreate, create);
  ASSERT_EQ(made.rc, CUDA_SUCCESS);
  const auto ids = made.out<formats::GreenContextIds>();
  // Its context is destroyed only with it: not as a context, not by a reset.
  ArgBuffer destroy_ctx;
  destroy_ctx.put(ids.ctx_id);
  EXPECT_EQ(c.call(CallId::k_cuCtxDestroy_v2, destroy_ctx).rc, CUDA_ERROR_INVALID_CONTEXT);
  ArgBuffer reset;
  reset.put(formats::ContextArgs{ids.ctx_id, 0, 0});
  EXPECT_EQ(c.call(CallId::k_cuDevicePrimaryCtxReset_v2, reset).rc, CUDA_ERROR_INVALID_CONTEXT);
  // A stream of it names it and its context; the session's own null stream, no green context.
  ArgBuffer stream_args;
  stream_args.put(ids.green_id);
  stream_args.put<unsigned>(CU_STREAM_NON_BLOCKING);
  stream_args.put<int>(0);
  Answer stream = c.call(CallId::k_cuGreenCtxStreamCreate, stream_args);
  ASSERT_EQ(stream.rc, CUDA_SUCCESS);
  ArgBuffer which;
  which.put(stream.out<uint64_t>());
  which.put<uint8_t>(1);
  Answer owner = c.call(CallId::k_cuStreamGetCtx_v2, which);
  ASSERT_EQ(owner.rc, CUDA_SUCCESS);
  EXPECT_EQ(owner.out<uint64_t>(), ids.ctx_id);
  EXPECT_EQ(owner.out<uint64_t>(8), ids.green_id);
  ArgBuffer null_stream;
  null_stream.put<uint64_t>(0);
  Answer green_of_null = c.call(CallId::k_cuStreamGetGreenCtx, null_stream);
  ASSERT_EQ(green_of_null.rc, CUDA_SUCCESS);
  EXPECT_EQ(green_of_null.out<uint64_t>(), 0u);
  // The other session can neither destroy it nor run in its context.
  ArgBuffer destroy;
  destroy.put(ids.green_id);
  EXPECT_EQ(attacker_->call(CallId::k_cuGreenCtxDestroy, destroy).rc, CUDA_ERROR_INVALID_CONTEXT);
  attacker_->use_context(ids.ctx_id);
  ArgBuffer sync;
  EXPECT_EQ(attacker_->call(CallId::k_cuCtxSynchronize, sync).rc, CUDA_ERROR_INVALID_CONTEXT);
  attacker_->use_context(0);
  // Its own session ends it, once; calls in its context are refused after.
  c.use_context(ids.ctx_id);
  EXPECT_EQ(c.call(CallId::k_cuCtxSynchronize, sync).rc, CUDA_SUCCESS);
  EXPECT_EQ(c.call(CallId::k_cuGreenCtxDestroy, destroy).rc, CUDA_SUCCESS);
  EXPECT_EQ(c.call(CallId::k_cuGreenCtxDestroy, destroy).rc, CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_NE(c.call(CallId::k_cuCtxSynchronize, sync).rc, CUDA_SUCCESS);
  c.use_context(own);
}

}  // namespace
}  // namespace cuwire::testing
