// Attacks over the raw protocol: a client that does not use cuwire's library, speaking frames
// to an in-process gpu-server on the sim backend. Every attack must get a refusal for the
// attacker alone, while a second session (the victim) keeps its memory intact and keeps being
// served. The classes follow design decision 11: pointers and extents, sizes and counts,
// function pointers, objects that cross sessions or outlive their context, launches.

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "protocol/args.h"
#include "generated/call_ids.h"
#include "protocol/wire_formats.h"
#include "server/session/dispatch.h"
#include "protocol/handle_kind.h"
#include "server/calls/host_calls.h"
#include "protocol/memory_runs.h"
#include "server/backend/sim/sim_backend.h"
#include "server/tenancy/tenants.h"
#include "tests/support/test_support.h"

namespace cuwire::testing {
namespace {

using server::Server;
using server::ServerConfig;

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

struct Answer {
  CUresult rc = CUDA_ERROR_UNKNOWN;
  std::vector<uint8_t> outs;
  std::vector<uint8_t> bulk;
  template <typename T>
  T out(size_t at = 0) const {
    T v{};
    if (outs.size() >= at + sizeof v) std::memcpy(&v, outs.data() + at, sizeof v);
    return v;
  }
};

// One session over the wire protocol, with no client library in between.
class RawClient {
 public:
  explicit RawClient(const Address& a, const std::string& token = "") {
    EXPECT_TRUE(connect_stream(a, {}, &s_).is_ok());
    Frame f;
    EXPECT_TRUE(handshake(*s_, &f, kProtocolVersion, 0, token).is_ok());
    EXPECT_EQ(f.type(), FrameType::kWelcome);
    EXPECT_TRUE(decode_welcome(f, &welcome_).is_ok());
  }
  const WelcomeMsg& welcome() const { return welcome_; }

  // Sends a call; for a fire-and-forget one (no_reply) answers CUDA_SUCCESS without waiting.
  Answer call(CallId id, const ArgBuffer& args, const std::vector<uint8_t>& bulk = {},
              bool no_reply = false) {
    Answer a;
    std::vector<uint8_t> msg;
    encode_call(static_cast<uint32_t>(id), ctx_, args.data(), &msg);
    FrameHeader h;
    h.type = static_cast<uint16_t>(FrameType::kCall);
    h.sequence = seq_++;
    h.flags = no_reply ? kFlagNoReply : 0;
    std::span<const uint8_t> pieces[1] = {bulk};
    if (!write_frame(*s_, h, msg, pieces).is_ok()) {
      ADD_FAILURE() << "the server closed the connection before " << call_name(uint32_t(id));
      return a;
    }
    if (no_reply) return {CUDA_SUCCESS, {}, {}};
    Frame f;
    Status st = read_frame(*s_, FrameLimits{}, &f);
    if (!st.is_ok() || f.type() != FrameType::kReply) {
      ADD_FAILURE() << "no reply to " << call_name(uint32_t(id)) << ": " << st.to_string();
      return a;
    }
    ReplyView r;
    std::span<const uint8_t> bulk_in;
    EXPECT_TRUE(decode_whole_reply(f, &r, &bulk_in).is_ok());
    a.rc = static_cast<CUresult>(r.result);
    a.outs.assign(r.outs.begin(), r.outs.end());
    a.bulk.assign(bulk_in.begin(), bulk_in.end());
    return a;
  }

  // A context of this session on device 0, made current for the calls that follow.
  uint64_t create_context() {
    formats::ContextArgs c{};
    c.ctx_id = kClientIdBase + next_id_++;
    c.device = 0;
    ArgBuffer w;
    w.put(c);
    EXPECT_EQ(call(CallId::k_cuCtxCreate_v4, w).rc, CUDA_SUCCESS);
    ctx_ = c.ctx_id;
    return c.ctx_id;
  }
  void use_context(uint64_t id) { ctx_ = id; }
  uint64_t context() const { return ctx_; }
  uint64_t mint() { return kClientIdBase + next_id_++; }

  CUdeviceptr alloc(size_t n) {
    ArgBuffer w;
    w.put(n);
    Answer a = call(CallId::k_cuMemAlloc_v2, w);
    EXPECT_EQ(a.rc, CUDA_SUCCESS);
    return a.out<CUdeviceptr>();
  }
  CUresult write(CUdeviceptr p, const std::vector<uint8_t>& bytes) {
    ArgBuffer w;
    w.put(p);
    w.put<uint64_t>(bytes.size());
    w.put<size_t>(bytes.size());
    return call(CallId::k_cuMemcpyHtoD_v2, w, bytes).rc;
  }
  Answer read(CUdeviceptr p, size_t n) {
    ArgBuffer w;
    w.put(p);
    w.put(n);
    return call(CallId::k_cuMemcpyDtoH_v2, w);
  }
  // The start of a host-to-device copy of n bytes whose frame says so but carries only the
  // first `sent` of them: a client that stalls mid-copy.
  void start_copy_and_stall(CUdeviceptr p, size_t n, size_t sent) {
    ArgBuffer w;
    w.put(p);
    w.put<uint64_t>(n);
    w.put<size_t>(n);
    std::vector<uint8_t> msg;
    encode_call(static_cast<uint32_t>(CallId::k_cuMemcpyHtoD_v2), ctx_, w.data(), &msg);
    FrameHeader h;
    h.type = static_cast<uint16_t>(FrameType::kCall);
    h.sequence = seq_++;
    h.message_bytes = static_cast<uint32_t>(msg.size());
    h.bulk_bytes = n;
    const std::vector<uint8_t> part(sent, 0x42);
    const std::span<const uint8_t> pieces[3] = {
        {reinterpret_cast<const uint8_t*>(&h), sizeof h}, msg, part};
    EXPECT_TRUE(s_->write_all(pieces).is_ok());
  }
  // The function `name` of a module loaded from `ptx` (n bytes, its NUL included).
  uint64_t load_function(const char* ptx, size_t n, const char* name) {
    ArgBuffer load;
    load.put<uint64_t>(n);
    Answer m = call(CallId::k_cuModuleLoadData, load, std::vector<uint8_t>(ptx, ptx + n));
    EXPECT_EQ(m.rc, CUDA_SUCCESS);
    ArgBuffer get;
    get.put(m.out<uint64_t>());
    get.put_string(name);
    Answer f = call(CallId::k_cuModuleGetFunction, get);
    EXPECT_EQ(f.rc, CUDA_SUCCESS);
    return f.out<uint64_t>();
  }
  // cuLaunchKernel of `function`, whose parameters are the 8-byte `args`, on `blocks` blocks of
  // `threads` threads; then cuCtxSynchronize, whose result it returns.
  CUresult launch_and_sync(uint64_t function, uint32_t blocks, uint32_t threads,
                           const std::vector<uint64_t>& args) {
    formats::LaunchArgs a{};
    a.function = function;
    a.grid[0] = blocks;
    a.block[0] = threads;
    a.grid[1] = a.grid[2] = a.block[1] = a.block[2] = 1;
    a.num_params = static_cast<uint32_t>(args.size());
    std::vector<formats::ParamSlot> slots;
    for (uint32_t i = 0; i < args.size(); ++i) slots.push_back({8 * i, 8});
    ArgBuffer w;
    w.put(a);
    w.put_bytes(slots.data(), slots.size() * sizeof(formats::ParamSlot));
    const std::vector<CUlaunchAttribute> no_attrs;
    w.put_bytes(no_attrs.data(), 0);
    std::vector<uint8_t> params(8 * args.size());
    std::memcpy(params.data(), args.data(), params.size());
    w.put<uint64_t>(params.size());
    EXPECT_EQ(call(CallId::k_cuLaunchKernel, w, params).rc, CUDA_SUCCESS);
    ArgBuffer sync;
    return call(CallId::k_cuCtxSynchronize, sync).rc;
  }
  // A round trip that must succeed: the session is still served.
  void expect_alive() {
    ArgBuffer w;
    Answer a = call(CallId::k_cuDeviceGetCount, w);
    EXPECT_EQ(a.rc, CUDA_SUCCESS);
    EXPECT_EQ(a.out<int>(), 1);
  }

 private:
  std::unique_ptr<ByteStream> s_;
  WelcomeMsg welcome_;
  uint64_t seq_ = 1;
  uint64_t ctx_ = 0;
  uint64_t next_id_ = 1;
};

class AttackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerConfig cfg;
    Address a;
    ASSERT_TRUE(parse_address("unix:" + dir_.file("s.sock"), &a).is_ok());
    cfg.listen = {a};
    cfg.backend = "sim";
    cfg.sim.memory_bytes = 1ull << 30;
    cfg.session.handles.max_contexts = 4;
    cfg.session.handles.max_streams = 16;
    cfg.session.server_name = "attack-test";
    server_ = std::make_unique<Server>(cfg);
    const Status started = server_->start();
    ASSERT_TRUE(started.is_ok()) << started.to_string();
    address_ = server_->addresses().at(0);
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

  TempDir dir_;
  std::unique_ptr<Server> server_;
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
  EXPECT_EQ(attacker_->write(victim_buf_, std::vector<uint8_t>(16, 0xee)), CUDA_ERROR_INVALID_VALUE);
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
  EXPECT_TRUE(after.bulk.empty() || after.bulk != std::vector<uint8_t>(secret_.begin(),
                                                                        secret_.begin() + 16));
}

namespace {

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

ErrorKind refusal(const Frame& f) {
  ErrorMsg e;
  if (f.type() != FrameType::kError || !decode_error(f, &e).is_ok()) return ErrorKind::kFailed;
  return e.kind;
}

}  // namespace

TEST_F(AttackTest, HostCallConnectionsNeedTheSessionsKey) {
  const WelcomeMsg& mine = attacker_->welcome();
  const WelcomeMsg& theirs = victim_->welcome();
  ASSERT_EQ(mine.host_call_key.size(), 16u);
  EXPECT_NE(mine.host_call_key, theirs.host_call_key);
  Frame f;
  // The victim's session with the attacker's key, a key one bit off, no key, no such session.
  std::string flipped = theirs.host_call_key;
  flipped[3] ^= 1;
  for (auto [session, key] : std::vector<std::pair<uint64_t, std::string>>{
           {theirs.session_id, mine.host_call_key},
           {theirs.session_id, flipped},
           {theirs.session_id, ""},
           {999999, mine.host_call_key}}) {
    auto s = host_call_connection(address_, session, key, &f);
    EXPECT_EQ(refusal(f), ErrorKind::kUnauthorized);
  }
  // Its own key opens its own; a second connection for the same session is refused.
  auto own = host_call_connection(address_, mine.session_id, mine.host_call_key, &f);
  EXPECT_EQ(f.type(), FrameType::kWelcome);
  auto again = host_call_connection(address_, mine.session_id, mine.host_call_key, &f);
  EXPECT_EQ(refusal(f), ErrorKind::kUnexpected);
}

TEST_F(AttackTest, AHostCallNobodyAnswersHoldsOnlyItsOwnSession) {
  const WelcomeMsg& mine = attacker_->welcome();
  Frame f;
  auto hc = host_call_connection(address_, mine.session_id, mine.host_call_key, &f);
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
  const WelcomeMsg& mine = attacker_->welcome();
  Frame f;
  auto hc = host_call_connection(address_, mine.session_id, mine.host_call_key, &f);
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

}  // namespace
}  // namespace cuwire::testing

namespace cuwire::testing {
namespace {

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
  auto split = [&](const CUdevResource& input) {
    ArgBuffer w;
    formats::SplitArgs a{};
    a.groups = 2;
    a.min_count = 2;
    a.want_result = 1;
    w.put(a);
    w.put(input);
    return c.call(CallId::k_cuDevSmResourceSplitByCount, w);
  };
  Answer groups = split(device);
  ASSERT_EQ(groups.rc, CUDA_SUCCESS);
  ASSERT_EQ(groups.out<uint32_t>(), 2u);
  const auto group = groups.out<CUdevResource>(sizeof(uint32_t));
  // Copies the server did not hand out, or changed, are refused.
  CUdevResource changed = device;
  changed.sm.smCount = 80;
  EXPECT_EQ(split(changed).rc, CUDA_ERROR_INVALID_VALUE);
  CUdevResource forged = device;
  formats::ResourceRef ref{};
  std::memcpy(&ref, forged._internal_padding, sizeof ref);
  ref.id += 1000;
  std::memcpy(forged._internal_padding, &ref, sizeof ref);
  EXPECT_EQ(split(forged).rc, CUDA_ERROR_INVALID_VALUE);
  // Another session's copy names nothing of its own.
  {
    ArgBuffer w;
    formats::SplitArgs a{};
    a.groups = 2;
    a.min_count = 2;
    a.want_result = 1;
    w.put(a);
    w.put(device);
    EXPECT_EQ(attacker_->call(CallId::k_cuDevSmResourceSplitByCount, w).rc,
              CUDA_ERROR_INVALID_VALUE);
  }
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

// On a GPU shared under compute caps, the tenant whose work is in flight holds the GPU: a client
// that stops sending in the middle of a large copy must not hold it with its copy.
TEST(AttackOnSharedGpu, AClientStalledMidCopyDoesNotHoldTheGpu) {
  TempDir dir;
  ServerConfig cfg;
  Address a;
  ASSERT_TRUE(parse_address("unix:" + dir.file("s.sock"), &a).is_ok());
  cfg.listen = {a};
  cfg.backend = "sim";
  cfg.sim.memory_bytes = 1ull << 30;
  for (const char* name : {"stalls", "works"}) {
    server::TenantSpec t;
    t.name = name;
    t.token_sha256 = server::token_digest(std::string("token-") + name);
    t.compute = 50;
    cfg.tenants.push_back(t);
  }
  Server server(cfg);
  const Status started = server.start();
  ASSERT_TRUE(started.is_ok()) << started.to_string();
  const Address at = server.addresses().at(0);
  RawClient stalls(at, "token-stalls"), works(at, "token-works");
  stalls.create_context();
  works.create_context();
  const CUdeviceptr big = stalls.alloc(8 << 20);
  const CUdeviceptr small = works.alloc(4096);
  // 8 MiB announced, 1 MiB sent, then silence (the connection stays open).
  stalls.start_copy_and_stall(big, 8 << 20, 1 << 20);
  // The other tenant's copies are GPU work too: admitted, and done. (Run on a thread so that a
  // server that held the GPU fails the test instead of hanging it.)
  auto done = std::async(std::launch::async, [&] {
    int ok = 0;
    for (int i = 0; i < 20; ++i) ok += works.write(small, std::vector<uint8_t>(4096, 7)) == CUDA_SUCCESS;
    return ok;
  });
  ASSERT_EQ(done.wait_for(std::chrono::seconds(60)), std::future_status::ready)
      << "the stalled copy held the GPU";
  EXPECT_EQ(done.get(), 20);
  server.stop();
}

// Copies each 8-byte word of [src, src + 8n) to dst: a kernel that reads whatever it is given.
constexpr char kCopyPtx[] = R"(
.version 7.0
.target sm_50
.address_size 64
.visible .entry copy_words(.param .u64 src, .param .u64 dst, .param .u64 n)
{
  .reg .u64 %rd<8>;
  .reg .u32 %r<4>;
  .reg .pred %p;
  ld.param.u64 %rd1, [src];
  ld.param.u64 %rd2, [dst];
  ld.param.u64 %rd3, [n];
  mov.u32 %r1, %ctaid.x;
  mov.u32 %r2, %ntid.x;
  mov.u32 %r3, %tid.x;
  mul.wide.u32 %rd4, %r1, %r2;
  cvt.u64.u32 %rd5, %r3;
  add.u64 %rd4, %rd4, %rd5;
  setp.ge.u64 %p, %rd4, %rd3;
  @%p ret;
  shl.b64 %rd4, %rd4, 3;
  add.u64 %rd6, %rd1, %rd4;
  ld.global.u64 %rd7, [%rd6];
  add.u64 %rd6, %rd2, %rd4;
  st.global.u64 [%rd6], %rd7;
  ret;
}
)";

// Physical device memory on device 0, as cuMemCreate and cuMemGetAllocationGranularity take it.
CUmemAllocationProp device_memory_prop() {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  return prop;
}

// The victim's words: a tag in the top 24 bits that nothing else writes.
constexpr uint64_t kVictimTag = 0x5EC2E7;
std::vector<uint8_t> victim_words(size_t bytes, uint64_t salt) {
  std::vector<uint8_t> out(bytes);
  for (size_t i = 0; i + 8 <= bytes; i += 8) {
    const uint64_t w = (kVictimTag << 40) | ((salt << 32) & 0xFF00000000ull) | (i / 8);
    std::memcpy(out.data() + i, &w, 8);
  }
  return out;
}
size_t victim_words_in(const std::vector<uint8_t>& bytes) {
  size_t found = 0;
  for (size_t i = 0; i + 8 <= bytes.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, bytes.data() + i, 8);
    found += (w >> 40) == kVictimTag;
  }
  return found;
}

// A fresh session of `token` that runs copy_words from `src` over `n` bytes into memory of its
// own: the bytes its kernel saw, or empty when the launch (or its synchronisation) failed, in
// which case it must have failed for the address (nothing else may hide a read).
// src 0: from memory of its own that holds tagged words (the scan's own check).
std::vector<uint8_t> scan_with_kernel(const Address& at, const std::string& token,
                                      CUdeviceptr src, size_t n) {
  RawClient c(at, token);
  c.create_context();
  if (src == 0) {
    src = c.alloc(n);
    EXPECT_EQ(c.write(src, victim_words(n, 4)), CUDA_SUCCESS);
  }
  const uint64_t f = c.load_function(kCopyPtx, sizeof kCopyPtx, "copy_words");
  const CUdeviceptr dst = c.alloc(n);
  const uint64_t words = n / 8;
  const CUresult ran =
      c.launch_and_sync(f, static_cast<uint32_t>((words + 255) / 256), 256, {src, dst, words});
  if (ran != CUDA_SUCCESS) {
    EXPECT_EQ(ran, CUDA_ERROR_ILLEGAL_ADDRESS) << "the scan failed for another reason";
    return {};
  }
  Answer back = c.read(dst, n);
  EXPECT_EQ(back.rc, CUDA_SUCCESS);
  return back.bulk;
}

// Design decision 13: what the server holds on a session's behalf is that session's alone. A
// compute-capped tenant's large copies go through the server's staging buffers (a chunk at a
// time); afterwards another tenant's kernel scans every range the backend has handed out
// (device and page-locked host memory, the staging buffers among them) and finds none of the
// victim's bytes.
TEST(AttackOnServerMemory, NoRangeTheServerHoldsShowsAnotherSessionsBytes) {
  TempDir dir;
  server::SimOptions sim;
  sim.memory_bytes = 1ull << 30;
  std::unique_ptr<server::Backend> backend = server::make_sim_backend(sim);
  ServerConfig cfg;
  Address a;
  ASSERT_TRUE(parse_address("unix:" + dir.file("s.sock"), &a).is_ok());
  cfg.listen = {a};
  cfg.backend_override = backend.get();
  server::TenantSpec victim_spec, attacker_spec;
  victim_spec.name = "victim";
  victim_spec.token_sha256 = server::token_digest("token-victim");
  victim_spec.compute = 50;  // its GPU is shared under compute caps: copies are staged
  attacker_spec.name = "attacker";
  attacker_spec.token_sha256 = server::token_digest("token-attacker");
  cfg.tenants = {victim_spec, attacker_spec};
  Server server(cfg);
  const Status started = server.start();
  ASSERT_TRUE(started.is_ok()) << started.to_string();
  const Address at = server.addresses().at(0);

  RawClient victim(at, "token-victim");
  victim.create_context();
  // Large copies each way (streamed, staged), one that leaves a partial last chunk, and small
  // ones (frame bulk).
  const CUdeviceptr big = victim.alloc(9 << 20);
  ASSERT_EQ(victim.write(big, victim_words(9 << 20, 1)), CUDA_SUCCESS);
  EXPECT_EQ(victim_words_in(victim.read(big, 9 << 20).bulk), size_t{9 << 20} / 8);
  const CUdeviceptr odd = victim.alloc((3 << 20) + 4096);
  ASSERT_EQ(victim.write(odd, victim_words((3 << 20) + 4096, 2)), CUDA_SUCCESS);
  EXPECT_EQ(victim.read(odd, (3 << 20) + 4096).rc, CUDA_SUCCESS);
  const CUdeviceptr small = victim.alloc(4096);
  ASSERT_EQ(victim.write(small, victim_words(4096, 3)), CUDA_SUCCESS);
  EXPECT_EQ(victim.read(small, 4096).rc, CUDA_SUCCESS);
  // 2D and 3D copies each way (rows of 512 bytes, 1024 apart; two planes of 64 rows).
  const CUdeviceptr pitched = victim.alloc(128 << 10);
  for (const auto kind : {formats::CopyKind::k2D, formats::CopyKind::k3D}) {
    const bool three = kind == formats::CopyKind::k3D;
    const size_t rows = 64, planes = three ? 2 : 1;
    for (const bool up : {true, false}) {
      formats::CopyArgs a{};
      a.kind = static_cast<uint32_t>(kind);
      a.desc.WidthInBytes = 512;
      a.desc.Height = rows;
      a.desc.Depth = planes;
      CUmemorytype& host_side = up ? a.desc.srcMemoryType : a.desc.dstMemoryType;
      CUmemorytype& dev_side = up ? a.desc.dstMemoryType : a.desc.srcMemoryType;
      host_side = CU_MEMORYTYPE_HOST;
      dev_side = CU_MEMORYTYPE_DEVICE;
      (up ? a.desc.srcPitch : a.desc.dstPitch) = 512;
      (up ? a.desc.srcHeight : a.desc.dstHeight) = rows;
      (up ? a.desc.dstDevice : a.desc.srcDevice) = pitched;
      (up ? a.desc.dstPitch : a.desc.srcPitch) = 1024;
      (up ? a.desc.dstHeight : a.desc.srcHeight) = rows;
      const std::vector<uint8_t> rows_up =
          up ? victim_words(512 * rows * planes, 5) : std::vector<uint8_t>{};
      ArgBuffer w;
      w.put(a);
      if (up) w.put<uint64_t>(rows_up.size());
      const CallId id = three ? CallId::k_cuMemcpy3D_v2 : CallId::k_cuMemcpy2D_v2;
      const Answer done = victim.call(id, w, rows_up);
      EXPECT_EQ(done.rc, CUDA_SUCCESS) << (three ? "3D" : "2D") << (up ? " up" : " down");
      if (!up) {
        EXPECT_EQ(victim_words_in(done.bulk), 512 * rows * planes / 8);
      }
    }
  }
  // A copy across two adjacent virtual-memory mappings (PyTorch's expandable segments): staged.
  {
    ArgBuffer g;
    const CUmemAllocationProp prop = device_memory_prop();
    g.put(prop);
    g.put<uint32_t>(CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    const Answer gran = victim.call(CallId::k_cuMemGetAllocationGranularity, g);
    ASSERT_EQ(gran.rc, CUDA_SUCCESS);
    const uint64_t piece = std::max<uint64_t>(gran.out<uint64_t>(), 2 << 20);
    ArgBuffer r;
    r.put<uint64_t>(2 * piece);
    r.put<uint64_t>(0);
    r.put<uint64_t>(0);
    r.put<uint64_t>(0);
    const Answer reserved = victim.call(CallId::k_cuMemAddressReserve, r);
    ASSERT_EQ(reserved.rc, CUDA_SUCCESS);
    const CUdeviceptr base = reserved.out<uint64_t>();
    for (int i = 0; i < 2; ++i) {
      ArgBuffer c;
      c.put<uint64_t>(piece);
      c.put(prop);
      c.put<uint64_t>(0);
      const Answer made = victim.call(CallId::k_cuMemCreate, c);
      ASSERT_EQ(made.rc, CUDA_SUCCESS);
      ArgBuffer m;
      m.put<uint64_t>(base + i * piece);
      m.put<uint64_t>(piece);
      m.put<uint64_t>(0);
      m.put(made.out<uint64_t>());
      m.put<uint64_t>(0);
      ASSERT_EQ(victim.call(CallId::k_cuMemMap, m).rc, CUDA_SUCCESS);
    }
    CUmemAccessDesc rw{};
    rw.location = prop.location;
    rw.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    ArgBuffer acc;
    acc.put<uint64_t>(base);
    acc.put<uint64_t>(2 * piece);
    acc.put<uint64_t>(1);
    acc.put(rw);
    ASSERT_EQ(victim.call(CallId::k_cuMemSetAccess, acc).rc, CUDA_SUCCESS);
    const uint64_t across = piece + (1 << 20);  // from the middle of one into the other
    ASSERT_EQ(victim.write(base + piece / 2, victim_words(across, 6)), CUDA_SUCCESS);
    EXPECT_EQ(victim_words_in(victim.read(base + piece / 2, across).bulk), across / 8);
  }

  // The scan works: over memory of its own session holding such words, it finds them all.
  EXPECT_EQ(victim_words_in(scan_with_kernel(at, "token-attacker", 0, 64 << 10)), (64u << 10) / 8);
  const std::vector<server::SimAddressRange> ranges = server::sim_address_ranges(*backend);
  size_t host_ranges = 0;
  for (const auto& r : ranges) host_ranges += r.host;
  EXPECT_GE(host_ranges, 1u) << "the capped tenant's copies were not staged";
  for (const auto& r : ranges) {
    const size_t n = std::min<size_t>(r.size, 4 << 20) / 8 * 8;
    if (n == 0) continue;
    const std::vector<uint8_t> seen = scan_with_kernel(at, "token-attacker", r.base, n);
    EXPECT_EQ(victim_words_in(seen), 0u)
        << "another tenant's kernel read the victim's bytes at 0x" << std::hex << r.base
        << (r.host ? " (host memory)" : " (device memory)");
  }
  // The victim is still served, its memory intact.
  EXPECT_EQ(victim_words_in(victim.read(small, 4096).bulk), 4096u / 8);
  victim.expect_alive();
  server.stop();
}

// The same through a relay (design decision 12): the relay's large copies go through its
// staging buffers (its backend has no device memory it can address; they are host memory of the
// relay's process, which the upstream never maps) into the upstream server, whose every range
// (the relay's sessions' device memory) another session's kernel, also through the relay, then
// scans.
TEST(AttackOnServerMemory, NoRangeShowsAnotherSessionsBytesThroughARelay) {
  TempDir dir;
  server::SimOptions sim;
  sim.memory_bytes = 1ull << 30;
  std::unique_ptr<server::Backend> backend = server::make_sim_backend(sim);
  ServerConfig cfg;
  Address up;
  ASSERT_TRUE(parse_address("unix:" + dir.file("upstream.sock"), &up).is_ok());
  cfg.listen = {up};
  cfg.backend_override = backend.get();
  Server upstream(cfg);
  ASSERT_TRUE(upstream.start().is_ok());
  RelayServer relay(GPU_SERVER, CLIENT_LIBRARY, up, dir);
  ASSERT_TRUE(relay.ok()) << relay.log();
  const Address at = relay.address();
  {
    RawClient victim(at);
    victim.create_context();
    const CUdeviceptr big = victim.alloc(9 << 20);
    ASSERT_EQ(victim.write(big, victim_words(9 << 20, 1)), CUDA_SUCCESS);
    EXPECT_EQ(victim_words_in(victim.read(big, 9 << 20).bulk), size_t{9 << 20} / 8);
    const CUdeviceptr small = victim.alloc(4096);
    ASSERT_EQ(victim.write(small, victim_words(4096, 3)), CUDA_SUCCESS);

    EXPECT_EQ(victim_words_in(scan_with_kernel(at, "", 0, 64 << 10)), (64u << 10) / 8);
    for (const auto& r : server::sim_address_ranges(*backend)) {
      const size_t n = std::min<size_t>(r.size, 4 << 20) / 8 * 8;
      if (n == 0) continue;
      EXPECT_EQ(victim_words_in(scan_with_kernel(at, "", r.base, n)), 0u)
          << "a kernel through the relay read another session's bytes at 0x" << std::hex
          << r.base << (r.host ? " (host memory)" : " (device memory)");
    }
    EXPECT_EQ(victim_words_in(victim.read(small, 4096).bulk), 4096u / 8);
    victim.expect_alive();
  }
  upstream.stop();
}

// A relay gives each of its sessions an upstream session of its own (design decision 13): the
// upstream holds each to its own budgets, so one relay session that uses up a session's
// contexts there leaves another's alone.
TEST(AttackThroughARelay, EachSessionHasAnUpstreamSessionOfItsOwn) {
  TempDir dir;
  ServerConfig cfg;
  Address up;
  ASSERT_TRUE(parse_address("unix:" + dir.file("upstream.sock"), &up).is_ok());
  cfg.listen = {up};
  cfg.backend = "sim";
  cfg.sim.memory_bytes = 1ull << 30;
  cfg.session.handles.max_contexts = 4;
  Server upstream(cfg);
  ASSERT_TRUE(upstream.start().is_ok());
  RelayServer relay(GPU_SERVER, CLIENT_LIBRARY, up, dir);
  ASSERT_TRUE(relay.ok()) << relay.log();
  const size_t before = upstream.session_count();
  RawClient greedy(relay.address()), other(relay.address());
  for (int i = 0; i < 4; ++i) greedy.create_context();
  formats::ContextArgs fifth{};
  fifth.ctx_id = greedy.mint();
  ArgBuffer w;
  w.put(fifth);
  EXPECT_NE(greedy.call(CallId::k_cuCtxCreate_v4, w).rc, CUDA_SUCCESS)
      << "the upstream's bound on a session's contexts did not hold";
  other.create_context();  // its own upstream session still has room (EXPECTs success)
  const CUdeviceptr p = other.alloc(4096);
  EXPECT_EQ(other.write(p, std::vector<uint8_t>(4096, 9)), CUDA_SUCCESS);
  EXPECT_GE(upstream.session_count(), before + 2) << "the relay's sessions share one upstream one";
  greedy.expect_alive();
  other.expect_alive();
  upstream.stop();
}

// An upstream that ends one relay session's upstream session alone (here: its idle timeout)
// fails that relay session alone; the relay's other sessions, and new ones, go on.
TEST(AttackThroughARelay, AnUpstreamSessionEndedAloneFailsAlone) {
  TempDir dir;
  ServerConfig cfg;
  Address up;
  ASSERT_TRUE(parse_address("unix:" + dir.file("upstream.sock"), &up).is_ok());
  cfg.listen = {up};
  cfg.backend = "sim";
  cfg.sim.memory_bytes = 1ull << 30;
  cfg.session.idle_timeout = std::chrono::milliseconds(400);
  Server upstream(cfg);
  ASSERT_TRUE(upstream.start().is_ok());
  RelayServer relay(GPU_SERVER, CLIENT_LIBRARY, up, dir);
  ASSERT_TRUE(relay.ok()) << relay.log();
  RawClient idle(relay.address()), busy(relay.address());
  idle.create_context();
  busy.create_context();
  const CUdeviceptr p = busy.alloc(4096);
  // The busy session calls all along; the idle one says nothing for three idle timeouts.
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1200);
  int served = 0, calls = 0;
  while (std::chrono::steady_clock::now() < until) {
    ++calls;
    served += busy.write(p, std::vector<uint8_t>(4096, 3)) == CUDA_SUCCESS;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(served, calls);
  ArgBuffer sync;
  EXPECT_EQ(idle.call(CallId::k_cuCtxSynchronize, sync).rc, CUDA_ERROR_DEVICE_UNAVAILABLE)
      << "the upstream ended this session; its calls cannot go on";
  EXPECT_EQ(busy.write(p, std::vector<uint8_t>(4096, 4)), CUDA_SUCCESS);
  RawClient fresh(relay.address());
  fresh.create_context();
  EXPECT_NE(fresh.alloc(4096), 0u);
  EXPECT_EQ(relay.log().find("lost the upstream gpu-server"), std::string::npos) << relay.log();
  upstream.stop();
}

// Device-side malloc of `bytes` by one thread; the pointer it got (0: refused) goes to *out.
constexpr char kMallocPtx[] = R"(
.version 7.0
.target sm_50
.address_size 64
.extern .func (.param .b64 func_retval0) malloc (.param .b64 malloc_param_0);
.visible .entry grab(.param .u64 out, .param .u64 bytes)
{
  .reg .u64 %rd<4>;
  ld.param.u64 %rd1, [out];
  ld.param.u64 %rd2, [bytes];
  {
    .param .b64 param0;
    st.param.b64 [param0+0], %rd2;
    .param .b64 retval0;
    call.uni (retval0), malloc, (param0);
    ld.param.b64 %rd3, [retval0+0];
  }
  st.global.u64 [%rd1], %rd3;
  ret;
}
)";

// Design decision 13: a tenant is charged what the device spends for it. Each test gives a
// capped tenant a path to device memory and checks the sim's own figure of what its device
// spends (not the server's ledger) against the cap.
class AttackOnCaps : public ::testing::Test {
 protected:
  static constexpr uint64_t kCap = 64ull << 20;
  static constexpr uint64_t kSmallCap = 8ull << 20;

  void SetUp() override {
    server::SimOptions sim;
    sim.memory_bytes = 1ull << 30;
    backend_ = server::make_sim_backend(sim);
    ServerConfig cfg;
    Address a;
    ASSERT_TRUE(parse_address("unix:" + dir_.file("s.sock"), &a).is_ok());
    cfg.listen = {a};
    cfg.backend_override = backend_.get();
    server::TenantSpec capped, other;
    capped.name = "capped";
    capped.token_sha256 = server::token_digest("token-capped");
    capped.memory_bytes = kCap;
    other.name = "other";
    other.token_sha256 = server::token_digest("token-other");
    server::TenantSpec small = capped;
    small.name = "small";
    small.token_sha256 = server::token_digest("token-small");
    small.memory_bytes = kSmallCap;
    cfg.tenants = {capped, other, small};
    server_ = std::make_unique<Server>(cfg);
    const Status started = server_->start();
    ASSERT_TRUE(started.is_ok()) << started.to_string();
    at_ = server_->addresses().at(0);
  }
  void TearDown() override {
    if (server_) server_->stop();
  }

  // What the sim's device spends now.
  uint64_t spent() { return server::sim_used_bytes(*backend_, 0); }

  Answer set_limit(RawClient& c, CUlimit limit, size_t value) {
    ArgBuffer w;
    w.put(limit);
    w.put(value);
    return c.call(CallId::k_cuCtxSetLimit, w);
  }
  // cuMemCreate of `size` bytes on device 0, exportable as a POSIX descriptor.
  Answer create_physical(RawClient& c, uint64_t size) {
    CUmemAllocationProp prop = device_memory_prop();
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    ArgBuffer w;
    w.put(size);
    w.put(prop);
    w.put<uint64_t>(0);
    return c.call(CallId::k_cuMemCreate, w);
  }

  TempDir dir_;
  std::unique_ptr<server::Backend> backend_;
  std::unique_ptr<Server> server_;
  Address at_;
};

// One-byte allocations spend the device's allocation step each: an 8 MiB tenant filling its
// cap with them spends no more than its cap.
TEST_F(AttackOnCaps, SmallAllocationsAreChargedWhatTheDeviceSpends) {
  constexpr uint64_t kCap = kSmallCap;
  RawClient c(at_, "token-small");
  c.create_context();
  const uint64_t before = spent();
  // 1024 more than the cap holds at the sim's 256 bytes each (all would pass, charged a byte).
  size_t made = 0;
  CUresult last = CUDA_SUCCESS;
  for (size_t i = 0; i < (kCap / 256) + 1024 && last == CUDA_SUCCESS; ++i) {
    ArgBuffer w;
    w.put<size_t>(1);
    last = c.call(CallId::k_cuMemAlloc_v2, w).rc;
    made += last == CUDA_SUCCESS;
  }
  EXPECT_EQ(last, CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_LE(spent() - before, kCap) << made << " one-byte allocations";
  EXPECT_GE(spent() - before, kCap - 4096) << "the cap is all the tenant's to use";
  c.expect_alive();
}

// Every path to device memory, each in a session of its own filled until refused: what the
// device spends for the tenant (the sim's own figure) never passes its cap, and all of it
// comes back when the session ends.
TEST_F(AttackOnCaps, EveryAllocationPathIsHeldToTheCapAsTheDeviceSpends) {
  struct Path {
    const char* name;
    std::function<CUresult(RawClient&)> one;  // one more allocation
  };
  auto alloc = [](size_t n) {
    return [n](RawClient& c) {
      ArgBuffer w;
      w.put<size_t>(n);
      return c.call(CallId::k_cuMemAlloc_v2, w).rc;
    };
  };
  const CUmemAllocationProp prop = device_memory_prop();
  const std::vector<Path> paths = {
      {"cuMemAlloc of 1000 bytes", alloc(1000)},
      {"cuMemAlloc of 1 MiB + 1", alloc((1 << 20) + 1)},
      {"cuMemAllocPitch of 1000 x 7",
       [](RawClient& c) {
         ArgBuffer w;
         w.put<size_t>(1000);
         w.put<size_t>(7);
         w.put<unsigned>(4);
         return c.call(CallId::k_cuMemAllocPitch_v2, w).rc;
       }},
      {"cuMemAllocManaged of 100000 bytes",
       [](RawClient& c) {
         ArgBuffer w;
         w.put<size_t>(100000);
         w.put<unsigned>(CU_MEM_ATTACH_GLOBAL);
         return c.call(CallId::k_cuMemAllocManaged, w).rc;
       }},
      {"cuMemAllocAsync of 5000 bytes",
       [](RawClient& c) {
         ArgBuffer w;
         w.put<uint64_t>(5000);
         w.put<uint64_t>(0);
         return c.call(CallId::k_cuMemAllocAsync, w).rc;
       }},
      {"cuMemCreate of 2 MiB",
       [prop](RawClient& c) {
         ArgBuffer w;
         w.put<uint64_t>(2 << 20);
         w.put(prop);
         w.put<uint64_t>(0);
         return c.call(CallId::k_cuMemCreate, w).rc;
       }},
      {"cuArrayCreate of 100 x 100 floats",
       [](RawClient& c) {
         CUDA_ARRAY_DESCRIPTOR d{};
         d.Width = 100;
         d.Height = 100;
         d.Format = CU_AD_FORMAT_FLOAT;
         d.NumChannels = 1;
         ArgBuffer w;
         w.put_bytes(&d, sizeof d);
         return c.call(CallId::k_cuArrayCreate_v2, w).rc;
       }},
  };
  const uint64_t baseline = spent();
  for (const Path& p : paths) {
    {
      RawClient c(at_, "token-small");
      c.create_context();
      CUresult last = CUDA_SUCCESS;
      int made = 0;
      for (int i = 0; i < 20000 && last == CUDA_SUCCESS; ++i) {
        last = p.one(c);
        made += last == CUDA_SUCCESS;
      }
      EXPECT_EQ(last, CUDA_ERROR_OUT_OF_MEMORY) << p.name;
      EXPECT_GT(made, 0) << p.name;
      EXPECT_LE(spent() - baseline, kSmallCap) << p.name << ": " << made << " made";
    }
    // The session's end gives it all back.
    for (int i = 0; i < 200 && spent() != baseline; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_EQ(spent(), baseline) << p.name;
  }
}

// Limits that reserve device memory: the printf FIFO and the stack are charged when set; the
// device heap when the sim reserves it (the first device malloc). Over the cap, refused; and
// another tenant's allocation within its own room still succeeds.
TEST_F(AttackOnCaps, ContextLimitsAreChargedToTheTenant) {
  RawClient c(at_, "token-capped");
  c.create_context();
  EXPECT_EQ(set_limit(c, CU_LIMIT_PRINTF_FIFO_SIZE, 768ull << 20).rc, CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(set_limit(c, CU_LIMIT_STACK_SIZE, 64 << 10).rc, CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(set_limit(c, CU_LIMIT_PRINTF_FIFO_SIZE, 16ull << 20).rc, CUDA_SUCCESS);
  // Charged: what is left of the cap is smaller by the FIFO's growth (15 MiB past its first 1 MiB).
  {
    ArgBuffer w;
    w.put<size_t>(kCap - (8ull << 20));
    EXPECT_EQ(c.call(CallId::k_cuMemAlloc_v2, w).rc, CUDA_ERROR_OUT_OF_MEMORY);
  }
  // Lowered again, the room comes back.
  EXPECT_EQ(set_limit(c, CU_LIMIT_PRINTF_FIFO_SIZE, 1ull << 20).rc, CUDA_SUCCESS);
  {
    ArgBuffer w;
    w.put<size_t>(kCap - (8ull << 20));
    Answer room = c.call(CallId::k_cuMemAlloc_v2, w);
    EXPECT_EQ(room.rc, CUDA_SUCCESS);
    ArgBuffer f;
    f.put(room.out<CUdeviceptr>());
    EXPECT_EQ(c.call(CallId::k_cuMemFree_v2, f).rc, CUDA_SUCCESS);
  }
  // The heap: set far past the cap, then reserved by device code (one thread's malloc).
  const uint64_t f = c.load_function(kMallocPtx, sizeof kMallocPtx, "grab");
  ASSERT_NE(f, 0u);
  const CUdeviceptr out = c.alloc(8);
  // What device malloc of 1 KiB returned (0: nothing).
  auto grab = [&] {
    EXPECT_EQ(c.write(out, std::vector<uint8_t>(8, 0xFF)), CUDA_SUCCESS);
    EXPECT_EQ(c.launch_and_sync(f, 1, 1, {out, 1024}), CUDA_SUCCESS);
    uint64_t got = 1;
    const Answer back = c.read(out, 8);
    EXPECT_EQ(back.bulk.size(), 8u);
    if (back.bulk.size() == 8) std::memcpy(&got, back.bulk.data(), 8);
    return got;
  };
  const uint64_t before = spent();
  // A heap size no device has (past 2^63): refused when reserved, and the tenant's ledger
  // keeps what it holds (an allocation of the whole cap still fails).
  EXPECT_EQ(set_limit(c, CU_LIMIT_MALLOC_HEAP_SIZE, ~size_t{0} - (1u << 30)).rc, CUDA_SUCCESS);
  EXPECT_EQ(grab(), 0u);
  {
    ArgBuffer w;
    w.put<size_t>(kCap);
    EXPECT_EQ(c.call(CallId::k_cuMemAlloc_v2, w).rc, CUDA_ERROR_OUT_OF_MEMORY);
  }
  EXPECT_EQ(set_limit(c, CU_LIMIT_MALLOC_HEAP_SIZE, 768ull << 20).rc, CUDA_SUCCESS);
  EXPECT_EQ(grab(), 0u) << "device malloc got memory from a heap past the tenant's cap";
  EXPECT_LE(spent() - before, kCap);
  // Within the cap, the heap is reserved and charged.
  EXPECT_EQ(set_limit(c, CU_LIMIT_MALLOC_HEAP_SIZE, 8ull << 20).rc, CUDA_SUCCESS);
  EXPECT_NE(grab(), 0u);
  EXPECT_EQ(spent() - before, 8ull << 20);
  {
    ArgBuffer w;
    w.put<size_t>(kCap - (4ull << 20));
    EXPECT_EQ(c.call(CallId::k_cuMemAlloc_v2, w).rc, CUDA_ERROR_OUT_OF_MEMORY);
  }

  // Another tenant's allocation that fits the device is not refused for it.
  RawClient other(at_, "token-other");
  other.create_context();
  ArgBuffer big;
  big.put<size_t>(512ull << 20);
  EXPECT_EQ(other.call(CallId::k_cuMemAlloc_v2, big).rc, CUDA_SUCCESS);
  c.expect_alive();
}

// Physical memory exported to another session of the tenant and then released by its exporter
// stays the tenant's while the importer holds it; the importer's handle is not charged twice.
TEST_F(AttackOnCaps, SharedPhysicalMemoryStaysChargedWhileAnyoneHoldsIt) {
  RawClient exporter(at_, "token-capped"), importer(at_, "token-capped");
  exporter.create_context();
  importer.create_context();
  const uint64_t before = spent();
  const Answer made = create_physical(exporter, 32ull << 20);
  ASSERT_EQ(made.rc, CUDA_SUCCESS);
  ArgBuffer ex;
  ex.put(made.out<uint64_t>());
  ex.put<uint64_t>(0);
  const Answer shared = exporter.call(CallId::k_cuMemExportToShareableHandle, ex);
  ASSERT_EQ(shared.rc, CUDA_SUCCESS);
  ArgBuffer im;
  im.put(shared.out<uint64_t>());
  std::array<uint8_t, 32> secret{};
  ASSERT_GE(shared.outs.size(), 8 + secret.size());
  std::memcpy(secret.data(), shared.outs.data() + 8, secret.size());
  im.put(secret);
  const Answer imported = importer.call(CallId::k_cuMemImportFromShareableHandle, im);
  ASSERT_EQ(imported.rc, CUDA_SUCCESS);
  // Imported within the tenant: charged once, so 32 MiB more still fit.
  const Answer second = create_physical(importer, 16ull << 20);
  ASSERT_EQ(second.rc, CUDA_SUCCESS);
  ArgBuffer rel;
  rel.put(made.out<uint64_t>());
  ASSERT_EQ(exporter.call(CallId::k_cuMemRelease, rel).rc, CUDA_SUCCESS);
  // The exporter let go; the importer still holds the 32 MiB: 48 MiB held, 16 MiB left.
  EXPECT_EQ(create_physical(exporter, 32ull << 20).rc, CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_LE(spent() - before, kCap);
  // Once the importer lets go too, the memory is the tenant's again.
  ArgBuffer rel2;
  rel2.put(imported.out<uint64_t>());
  ASSERT_EQ(importer.call(CallId::k_cuMemRelease, rel2).rc, CUDA_SUCCESS);
  EXPECT_EQ(create_physical(exporter, 32ull << 20).rc, CUDA_SUCCESS);
  EXPECT_LE(spent() - before, kCap);
  exporter.expect_alive();
  importer.expect_alive();
}

// What a context spends of its own (ServerConfig::context_memory, on the cuda backend by
// default) is its tenant's: contexts past the cap are refused, and a destroyed one gives its
// room back.
TEST(AttackOnContexts, EachContextIsChargedItsFootprint) {
  TempDir dir;
  ServerConfig cfg;
  Address a;
  ASSERT_TRUE(parse_address("unix:" + dir.file("s.sock"), &a).is_ok());
  cfg.listen = {a};
  cfg.backend = "sim";
  cfg.sim.memory_bytes = 1ull << 30;
  cfg.context_memory = 16ull << 20;
  server::TenantSpec t;
  t.name = "capped";
  t.token_sha256 = server::token_digest("token-capped");
  t.memory_bytes = 64ull << 20;
  cfg.tenants = {t};
  Server server(cfg);
  ASSERT_TRUE(server.start().is_ok());
  RawClient c(server.addresses().at(0), "token-capped");
  std::vector<uint64_t> contexts;
  for (int i = 0; i < 4; ++i) contexts.push_back(c.create_context());
  // Four contexts hold the cap: a fifth, or any allocation, is refused.
  formats::ContextArgs fifth{};
  fifth.ctx_id = c.mint();
  ArgBuffer w;
  w.put(fifth);
  EXPECT_EQ(c.call(CallId::k_cuCtxCreate_v4, w).rc, CUDA_ERROR_OUT_OF_MEMORY);
  ArgBuffer one;
  one.put<size_t>(1 << 20);
  EXPECT_EQ(c.call(CallId::k_cuMemAlloc_v2, one).rc, CUDA_ERROR_OUT_OF_MEMORY);
  // One destroyed, its 16 MiB are the tenant's again.
  ArgBuffer destroy;
  destroy.put(contexts.back());
  ASSERT_EQ(c.call(CallId::k_cuCtxDestroy_v2, destroy).rc, CUDA_SUCCESS);
  c.use_context(contexts.front());
  ArgBuffer fits;
  fits.put<size_t>(15 << 20);
  EXPECT_EQ(c.call(CallId::k_cuMemAlloc_v2, fits).rc, CUDA_SUCCESS);
  c.expect_alive();
  server.stop();
}

// A streamed reply is still one frame: a copy whose reply would pass the frame bound is refused
// as before copies streamed, and the session goes on.
TEST(AttackStreamedReply, ACopyLargerThanAFrameIsRefused) {
  TempDir dir;
  ServerConfig cfg;
  Address a;
  ASSERT_TRUE(parse_address("unix:" + dir.file("s.sock"), &a).is_ok());
  cfg.listen = {a};
  cfg.backend = "sim";
  cfg.sim.memory_bytes = 1ull << 30;
  cfg.session.limits.max_bulk_bytes = 4 << 20;
  Server server(cfg);
  const Status started = server.start();
  ASSERT_TRUE(started.is_ok()) << started.to_string();
  RawClient c(server.addresses().at(0));
  c.create_context();
  const CUdeviceptr p = c.alloc(8 << 20);
  EXPECT_EQ(c.read(p, 8 << 20).rc, CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(c.read(p, 4 << 20).rc, CUDA_ERROR_INVALID_VALUE);  // its trailer would pass the bound
  const Answer two = c.read(p, 2 << 20);  // streamed, within the bound
  EXPECT_EQ(two.rc, CUDA_SUCCESS);
  EXPECT_EQ(two.bulk.size(), size_t{2} << 20);
  c.expect_alive();
  server.stop();
}

}  // namespace
}  // namespace cuwire::testing
