// What the attack suites (attack_test.cc, attack_memory_test.cc, attack_caps_test.cc) share: a
// client that speaks the raw protocol to an in-process gpu-server, with no client library in
// between, and the properties of physical device memory.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "generated/call_ids.h"
#include "protocol/args.h"
#include "protocol/handle_kind.h"
#include "protocol/wire_formats.h"
#include "tests/support/test_support.h"

namespace cuwire::testing {

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
    // No launch attributes: put_bytes of none, which is its count alone. (Written so: g++ 12,
    // inlining put_bytes here, warns of the empty vector's null data() it never copies from.)
    w.put<uint64_t>(0);
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

// Physical device memory on device 0, as cuMemCreate and cuMemGetAllocationGranularity take it.
inline CUmemAllocationProp device_memory_prop() {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  return prop;
}

}  // namespace cuwire::testing
