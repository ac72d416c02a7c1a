// Attacks over the raw protocol (attack_test.cc) on tenants' memory caps (design decision 13):
// every path to device memory, context limits, shared physical memory and contexts' own
// footprint are charged what the device spends.

#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstring>
#include <functional>
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
    server_.config().tenants = {capped, other, small};
    const Status started = server_.start();
    ASSERT_TRUE(started.is_ok()) << started.to_string();
    at_ = server_.address();
  }
  void TearDown() override { server_.stop(); }

  // What the sim's device spends now.
  uint64_t spent() { return server::sim_used_bytes(*server_.backend(), 0); }

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

  TestServer server_{{.memory_bytes = 1ull << 30, .sim_in_test = true, .start = false}};
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
         const CUDA_ARRAY_DESCRIPTOR d = array_descriptor(100, 100, CU_AD_FORMAT_FLOAT);
         ArgBuffer w;
         w.put_bytes(&d, sizeof d);
         return c.call(CallId::k_cuArrayCreate_v2, w).rc;
       }},
      {"cuMipmappedArrayCreate of 100 x 100 floats, 7 levels",
       [](RawClient& c) {
         CUDA_ARRAY3D_DESCRIPTOR d{};
         d.Width = d.Height = 100;
         d.Format = CU_AD_FORMAT_FLOAT;
         d.NumChannels = 1;
         ArgBuffer w;
         w.put_bytes(&d, sizeof d);
         w.put<unsigned>(7);
         return c.call(CallId::k_cuMipmappedArrayCreate, w).rc;
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
  TestServer server({.memory_bytes = 1ull << 30, .start = false});
  server.config().context_memory = 16ull << 20;
  server::TenantSpec t;
  t.name = "capped";
  t.token_sha256 = server::token_digest("token-capped");
  t.memory_bytes = 64ull << 20;
  server.config().tenants = {t};
  ASSERT_TRUE(server.start().is_ok());
  RawClient c(server.address(), "token-capped");
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

}  // namespace
}  // namespace cuwire::testing
