// Attacks over the raw protocol (attack_test.cc) on what a server holds on its sessions' behalf:
// a GPU shared under compute caps, the server's own memory (staging buffers and every range
// its backend handed out), the upstream sessions of a relay, and a reply larger than a frame.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "generated/call_ids.h"
#include "protocol/args.h"
#include "protocol/wire_formats.h"
#include "server/backend/sim/sim_backend.h"
#include "server/tenancy/tenants.h"
#include "tests/server/attack_client.h"
#include "tests/support/test_support.h"

namespace cuwire::testing {
namespace {

// On a GPU shared under compute caps, the tenant whose work is in flight holds the GPU: a client
// that stops sending in the middle of a large copy must not hold it with its copy.
TEST(AttackOnSharedGpu, AClientStalledMidCopyDoesNotHoldTheGpu) {
  TestServer server({.memory_bytes = 1ull << 30, .start = false});
  for (const char* name : {"stalls", "works"}) {
    server::TenantSpec t;
    t.name = name;
    t.token_sha256 = server::token_digest(std::string("token-") + name);
    t.compute = 50;
    server.config().tenants.push_back(t);
  }
  const Status started = server.start();
  ASSERT_TRUE(started.is_ok()) << started.to_string();
  const Address at = server.address();
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
    for (int i = 0; i < 20; ++i)
      ok += works.write(small, std::vector<uint8_t>(4096, 7)) == CUDA_SUCCESS;
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
std::vector<uint8_t> scan_with_kernel(const Address& at, const std::string& token, CUdeviceptr src,
                                      size_t n) {
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

// A kernel of a session at `at` (with `token`; `who` names it in failures) scans memory of its
// own session holding the victim's words and finds them all, so the scan works; then it scans
// every range the sim `backend` has handed out (up to 4 MiB of each) and finds none of them.
void expect_no_range_shows_victim_words(const Address& at, const std::string& token,
                                        server::Backend& backend, const std::string& who) {
  EXPECT_EQ(victim_words_in(scan_with_kernel(at, token, 0, 64 << 10)), (64u << 10) / 8);
  for (const auto& r : server::sim_address_ranges(backend)) {
    const size_t n = std::min<size_t>(r.size, 4 << 20) / 8 * 8;
    if (n == 0) continue;
    EXPECT_EQ(victim_words_in(scan_with_kernel(at, token, r.base, n)), 0u)
        << who << " read the victim's bytes at 0x" << std::hex << r.base
        << (r.host ? " (host memory)" : " (device memory)");
  }
}

// Design decision 13: what the server holds on a session's behalf is that session's alone. A
// compute-capped tenant's large copies go through the server's staging buffers (a chunk at a
// time); afterwards another tenant's kernel scans every range the backend has handed out
// (device and page-locked host memory, the staging buffers among them) and finds none of the
// victim's bytes.
TEST(AttackOnServerMemory, NoRangeTheServerHoldsShowsAnotherSessionsBytes) {
  TestServer server({.memory_bytes = 1ull << 30, .sim_in_test = true, .start = false});
  server::Backend& backend = *server.backend();
  server::TenantSpec victim_spec, attacker_spec;
  victim_spec.name = "victim";
  victim_spec.token_sha256 = server::token_digest("token-victim");
  victim_spec.compute = 50;  // its GPU is shared under compute caps: copies are staged
  attacker_spec.name = "attacker";
  attacker_spec.token_sha256 = server::token_digest("token-attacker");
  server.config().tenants = {victim_spec, attacker_spec};
  const Status started = server.start();
  ASSERT_TRUE(started.is_ok()) << started.to_string();
  const Address at = server.address();

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

  size_t host_ranges = 0;
  for (const auto& r : server::sim_address_ranges(backend)) host_ranges += r.host;
  EXPECT_GE(host_ranges, 1u) << "the capped tenant's copies were not staged";
  expect_no_range_shows_victim_words(at, "token-attacker", backend, "another tenant's kernel");
  // The victim is still served, its memory intact.
  EXPECT_EQ(victim_words_in(victim.read(small, 4096).bulk), 4096u / 8);
  victim.expect_alive();
  server.stop();
}

// A 1 GiB sim behind a relay (gpu-server --backend cuda over cuwire's own libcuda.so.1);
// `start`: as in TestServerOptions.
TestServerOptions relayed_sim(bool start) {
  return {.memory_bytes = 1ull << 30,
          .relay_library = CLIENT_LIBRARY,
          .relay_gpu_server = GPU_SERVER,
          .start = start};
}

// The same through a relay (design decision 12): the relay's large copies go through its
// staging buffers (its backend has no device memory it can address; they are host memory of the
// relay's process, which the upstream never maps) into the upstream server, whose every range
// (the relay's sessions' device memory) another session's kernel, also through the relay, then
// scans.
TEST(AttackOnServerMemory, NoRangeShowsAnotherSessionsBytesThroughARelay) {
  TestServerOptions options = relayed_sim(true);
  options.sim_in_test = true;  // for its ranges
  TestServer upstream(options);
  ASSERT_TRUE(upstream.ok()) << upstream.status().to_string();
  const Address at = upstream.address();  // the relay's
  {
    RawClient victim(at);
    victim.create_context();
    const CUdeviceptr big = victim.alloc(9 << 20);
    ASSERT_EQ(victim.write(big, victim_words(9 << 20, 1)), CUDA_SUCCESS);
    EXPECT_EQ(victim_words_in(victim.read(big, 9 << 20).bulk), size_t{9 << 20} / 8);
    const CUdeviceptr small = victim.alloc(4096);
    ASSERT_EQ(victim.write(small, victim_words(4096, 3)), CUDA_SUCCESS);

    expect_no_range_shows_victim_words(at, "", *upstream.backend(), "a kernel through the relay");
    EXPECT_EQ(victim_words_in(victim.read(small, 4096).bulk), 4096u / 8);
    victim.expect_alive();
  }
  upstream.stop();
}

// A relay gives each of its sessions an upstream session of its own (design decision 13): the
// upstream holds each to its own budgets, so one relay session that uses up a session's
// contexts there leaves another's alone.
TEST(AttackThroughARelay, EachSessionHasAnUpstreamSessionOfItsOwn) {
  TestServer upstream(relayed_sim(false));
  upstream.config().session.handles.max_contexts = 4;
  ASSERT_TRUE(upstream.start().is_ok()) << upstream.status().to_string();
  RelayServer& relay = *upstream.relay();
  const size_t before = upstream->session_count();
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
  EXPECT_GE(upstream->session_count(), before + 2) << "the relay's sessions share one upstream one";
  greedy.expect_alive();
  other.expect_alive();
  upstream.stop();
}

// An upstream that ends one relay session's upstream session alone (here: its idle timeout)
// fails that relay session alone; the relay's other sessions, and new ones, go on.
TEST(AttackThroughARelay, AnUpstreamSessionEndedAloneFailsAlone) {
  TestServer upstream(relayed_sim(false));
  upstream.config().session.idle_timeout = std::chrono::milliseconds(400);
  ASSERT_TRUE(upstream.start().is_ok()) << upstream.status().to_string();
  RelayServer& relay = *upstream.relay();
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

// A streamed reply is still one frame: a copy whose reply would pass the frame bound is refused
// as before copies streamed, and the session goes on.
TEST(AttackStreamedReply, ACopyLargerThanAFrameIsRefused) {
  TestServer server({.memory_bytes = 1ull << 30, .start = false});
  server.config().session.limits.max_bulk_bytes = 4 << 20;
  const Status started = server.start();
  ASSERT_TRUE(started.is_ok()) << started.to_string();
  RawClient c(server.address());
  c.create_context();
  const CUdeviceptr p = c.alloc(8 << 20);
  EXPECT_EQ(c.read(p, 8 << 20).rc, CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(c.read(p, 4 << 20).rc, CUDA_ERROR_INVALID_VALUE);  // its trailer would pass the bound
  const Answer two = c.read(p, 2 << 20);                       // streamed, within the bound
  EXPECT_EQ(two.rc, CUDA_SUCCESS);
  EXPECT_EQ(two.bulk.size(), size_t{2} << 20);
  c.expect_alive();
  server.stop();
}

}  // namespace
}  // namespace cuwire::testing
