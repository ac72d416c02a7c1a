// How launches run: blocks on a worker pool (same results, printf in block order, one failure
// reported), the device heap across launches, cooperative launches whose blocks wait for each
// other, and the parameter layout of `.ptr .align` parameters.

#include <string>
#include <vector>

#include "tests/ptx/harness.h"

namespace cuwire::ptx::testing {
namespace {

// A module loaded (by LoadPtx or LoadKernelFile) into its own memory, and a launch
// configuration that runs its blocks on a pool of `threads` workers.
struct PooledModule {
  PooledModule(unsigned threads, LoadedModule (*load)(const std::string&, FakeGlobalMemory&),
               const std::string& source)
      : pool(threads), m(load(source, mem)) {
    cfg.pool = &pool;
  }
  WorkerPool pool;
  FakeGlobalMemory mem;
  LoadedModule m;
  LaunchConfig cfg;
};

TEST(Workers, ResultsMatchOneThread) {
  WorkerPool pool(4);
  for (WorkerPool* p : {static_cast<WorkerPool*>(nullptr), &pool}) {
    FakeGlobalMemory mem;
    LoadedModule m = LoadKernelFile("memory", mem);
    ASSERT_NE(m.module, nullptr);
    LaunchConfig cfg;
    cfg.pool = p;
    const int n = 64;
    std::vector<float> a(n * n), b(n * n);
    for (int i = 0; i < n * n; ++i) {
      a[i] = static_cast<float>(i % 7) - 3;
      b[i] = static_cast<float>(i % 5) * 0.5f;
    }
    uint64_t da = mem.Upload(a), db = mem.Upload(b), dc = mem.Alloc(n * n * 4);
    LaunchResult r =
        LaunchWith(cfg, m, mem, "matmul", {n / 16, n / 16, 1}, {16, 16, 1}, 0, da, db, dc, n);
    ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
    std::vector<float> c = mem.Download<float>(dc, n * n);
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < n; ++j) {
        float want = 0;
        for (int k = 0; k < n; ++k) want += a[i * n + k] * b[k * n + j];
        ASSERT_EQ(c[i * n + j], want) << i << "," << j << (p ? " (pool)" : "");
      }
    }
    // Global atomics from blocks on several threads lose nothing.
    std::vector<uint8_t> data(100000);
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 31 % 251);
    uint64_t dd = mem.Upload(data), bins = mem.Alloc(16 * 4);
    r = LaunchWith(cfg, m, mem, "histogram", {40, 1, 1}, {128, 1, 1}, 0, dd,
                   static_cast<int>(data.size()), bins);
    ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
    std::vector<unsigned> got = mem.Download<unsigned>(bins, 16), want(16, 0);
    for (uint8_t v : data) ++want[v % 16];
    EXPECT_EQ(got, want) << (p ? "pool" : "one thread");
  }
}

TEST(Workers, PrintfOutputStaysInBlockOrder) {
  PooledModule pm(4, LoadKernelFile, "printf");
  auto& [pool, mem, m, cfg] = pm;
  ASSERT_NE(m.module, nullptr);
  uint64_t ret = mem.Alloc(16 * 2 * 4);
  LaunchResult r = LaunchWith(cfg, m, mem, "hello", {16, 1, 1}, {2, 1, 1}, 0, ret);
  ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
  std::string want;
  for (int b = 0; b < 16; ++b)
    for (int t = 0; t < 2; ++t)
      want += "hello from block " + std::to_string(b) + " thread " + std::to_string(t) + "\n";
  EXPECT_EQ(r.printf_output, want);
}

TEST(Workers, OneBlocksFaultEndsTheLaunchOnce) {
  // A kernel whose threads count to `iterations` after `prologue`.
  auto spinner = [](const std::string& name, const std::string& prologue, int iterations) {
    return std::string(kHeader) + Entry(name, "", {".pred %p<2>", ".b32 %r<4>"}, prologue + R"(
  mov.u32 %r2, 0;
loop:
  add.u32 %r2, %r2, 1;
  setp.lt.u32 %p1, %r2, )" + std::to_string(iterations) + R"(;
  @%p1 bra loop;
  ret;
)");
  };
  // Block 37 of 64 traps; the others spin a while so several are running when it does.
  std::string ptx = spinner("k", R"(
  mov.u32 %r1, %ctaid.x;
  setp.eq.u32 %p1, %r1, 37;
  @%p1 trap;)",
                            2000);
  PooledModule pm(4, LoadPtx, ptx);
  auto& [pool, mem, m, cfg] = pm;
  ASSERT_NE(m.module, nullptr);
  LaunchResult r = LaunchWith(cfg, m, mem, "k", {64, 1, 1}, {32, 1, 1}, 0);
  EXPECT_EQ(r.error, LaunchError::kTrap);
  // The budget counts every thread's instructions together.
  cfg.max_instructions = 100000;
  cfg.pool = &pool;
  std::string spin = spinner("spin", "", 1000000);
  LoadedModule s = LoadPtx(spin, mem);
  ASSERT_NE(s.module, nullptr);
  r = LaunchWith(cfg, s, mem, "spin", {64, 1, 1}, {32, 1, 1}, 0);
  EXPECT_EQ(r.error, LaunchError::kTimeout) << r.message;
  EXPECT_LT(r.instructions, 100000u + 4 * 4096 * 32 + 64 * 33);
}

// A vector store is one access, as on the GPU: block 0 writes {i, i} pairs (v2.u64, v4.u32,
// v2.u32) while block 1, on another worker thread, reads them back and counts pairs whose
// halves differ. CUB's single-pass scans (Thrust's sort, scan and copy_if) pack a tile's
// status and value this way and read them from other blocks.
TEST(Workers, VectorAccessesAreWholeAcrossBlocks) {
  std::string ptx = std::string(kHeader) + Entry("k", ".param .u64 buf, .param .u32 n",
                                                 {".pred %p<4>", ".b32 %r<16>", ".b64 %rd<16>"}, R"(
  ld.param.u64 %rd1, [buf];
  cvta.to.global.u64 %rd1, %rd1;
  ld.param.u32 %r1, [n];
  mov.u32 %r2, %ctaid.x;
  mov.u32 %r3, 0;
  mov.u32 %r10, 0;
  setp.ne.u32 %p1, %r2, 0;
  @%p1 bra reader;
writer:
  add.u32 %r3, %r3, 1;
  cvt.u64.u32 %rd2, %r3;
  mul.lo.u64 %rd2, %rd2, 0x100000001;
  st.volatile.global.v2.u64 [%rd1], {%rd2, %rd2};
  st.volatile.global.v4.u32 [%rd1+16], {%r3, %r3, %r3, %r3};
  st.volatile.global.v2.u32 [%rd1+32], {%r3, %r3};
  setp.lt.u32 %p2, %r3, %r1;
  @%p2 bra writer;
  ret;
reader:
  add.u32 %r3, %r3, 1;
  ld.volatile.global.v2.u64 {%rd3, %rd4}, [%rd1];
  setp.ne.u64 %p2, %rd3, %rd4;
  selp.u32 %r11, 1, 0, %p2;
  add.u32 %r10, %r10, %r11;
  ld.volatile.global.v4.u32 {%r4, %r5, %r6, %r7}, [%rd1+16];
  setp.ne.u32 %p2, %r4, %r7;
  selp.u32 %r11, 1, 0, %p2;
  add.u32 %r10, %r10, %r11;
  ld.volatile.global.v2.u32 {%r8, %r9}, [%rd1+32];
  setp.ne.u32 %p2, %r8, %r9;
  selp.u32 %r11, 1, 0, %p2;
  add.u32 %r10, %r10, %r11;
  setp.lt.u32 %p2, %r3, %r1;
  @%p2 bra reader;
  st.global.u32 [%rd1+48], %r10;
  ret;
)");
  PooledModule pm(2, LoadPtx, ptx);
  auto& [pool, mem, m, cfg] = pm;
  ASSERT_NE(m.module, nullptr);
  uint64_t buf = mem.Alloc(64);
  const uint32_t n = 300000;
  LaunchResult r = LaunchWith(cfg, m, mem, "k", {2, 1, 1}, {1, 1, 1}, 0, buf, n);
  ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
  std::vector<uint32_t> out = mem.Download<uint32_t>(buf, 16);
  EXPECT_EQ(out[12], 0u) << "reads that saw half of a vector store";
  EXPECT_EQ(out[0], n);  // the writer's last pair
  EXPECT_EQ(out[1], n);
}

// put(p): p = malloc(16); *p = 1234; *out = p.  get(out, res): *res = **out; free(*out).
const std::string kHeapPtx = std::string(kHeader) + R"(
.extern .func (.param .b64 func_retval0) malloc(.param .b64 malloc_param_0);
.extern .func free(.param .b64 free_param_0);
.visible .entry put(.param .u64 out)
{
  .reg .b32 %r<2>;
  .reg .b64 %rd<6>;
  ld.param.u64 %rd1, [out];
  cvta.to.global.u64 %rd1, %rd1;
  { .param .b64 param0;
    st.param.b64 [param0], 16;
    .param .b64 retval0;
    call.uni (retval0), malloc, (param0);
    ld.param.b64 %rd2, [retval0];
  }
  mov.u32 %r1, 1234;
  st.u32 [%rd2], %r1;
  st.global.u64 [%rd1], %rd2;
  ret;
}
.visible .entry get(.param .u64 out, .param .u64 res)
{
  .reg .b32 %r<2>;
  .reg .b64 %rd<6>;
  ld.param.u64 %rd1, [out];
  cvta.to.global.u64 %rd1, %rd1;
  ld.param.u64 %rd3, [res];
  cvta.to.global.u64 %rd3, %rd3;
  ld.global.u64 %rd2, [%rd1];
  ld.u32 %r1, [%rd2];
  st.global.u32 [%rd3], %r1;
  { .param .b64 param0;
    st.param.b64 [param0], %rd2;
    call.uni free, (param0);
  }
  ret;
}
)";

TEST(Heap, MemoryOutlivesTheLaunchThatAllocatedIt) {
  FakeGlobalMemory mem;
  LoadedModule m = LoadPtx(kHeapPtx, mem);
  ASSERT_NE(m.module, nullptr);
  DeviceHeap heap(1 << 20);
  LaunchConfig cfg;
  cfg.heap = &heap;
  uint64_t out = mem.Alloc(8), res = mem.Alloc(4);
  LaunchResult r = LaunchWith(cfg, m, mem, "put", {1, 1, 1}, {1, 1, 1}, 0, out);
  ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
  EXPECT_TRUE(heap.reserved());
  EXPECT_FALSE(heap.set_capacity(2 << 20));  // fixed once in use
  r = LaunchWith(cfg, m, mem, "get", {1, 1, 1}, {1, 1, 1}, 0, out, res);
  ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
  EXPECT_EQ(mem.Download<uint32_t>(res, 1)[0], 1234u);
  // Freed by `get`: a second free of the same pointer fails the launch.
  r = LaunchWith(cfg, m, mem, "get", {1, 1, 1}, {1, 1, 1}, 0, out, res);
  EXPECT_EQ(r.error, LaunchError::kIllegalAddress) << r.message;

  // Without a heap given, each launch has its own: the pointer is gone with the launch.
  LaunchConfig alone;
  r = LaunchWith(alone, m, mem, "put", {1, 1, 1}, {1, 1, 1}, 0, out);
  ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
  r = LaunchWith(alone, m, mem, "get", {1, 1, 1}, {1, 1, 1}, 0, out, res);
  EXPECT_EQ(r.error, LaunchError::kIllegalAddress) << r.message;
}

TEST(Heap, ChargeRefusedMeansMallocReturnsNull) {
  FakeGlobalMemory mem;
  LoadedModule m = LoadPtx(kHeapPtx, mem);
  ASSERT_NE(m.module, nullptr);
  bool charged = false;
  DeviceHeap heap(1 << 20, [&](uint64_t) { return charged; });
  EXPECT_EQ(heap.alloc(16), 0u);  // refused: nothing reserved
  EXPECT_FALSE(heap.reserved());
  charged = true;
  uint64_t p = heap.alloc(16);
  EXPECT_NE(p, 0u);
  EXPECT_NE(heap.translate(p, 16), nullptr);
  EXPECT_EQ(heap.translate(p, (1 << 20) + 1), nullptr);
  EXPECT_TRUE(heap.free(p));
  EXPECT_FALSE(heap.free(p));
}

// Each block's thread 0 adds one to the grid workspace's barrier word (found through
// %envreg1/%envreg2) and spins until every block has; then writes 1 to out[block].
const std::string kGridBarrierPtx = std::string(kHeader) + R"(
.visible .entry wait_all(.param .u64 out)
{
  .reg .pred %p<3>;
  .reg .b32 %r<8>;
  .reg .b64 %rd<8>;
  mov.u32 %r1, %envreg1;
  mov.u32 %r2, %envreg2;
  cvt.u64.u32 %rd5, %r1;
  shl.b64 %rd5, %rd5, 32;
  cvt.u64.u32 %rd6, %r2;
  or.b64 %rd1, %rd5, %rd6;
  setp.eq.u64 %p1, %rd1, 0;
  @%p1 trap;
  mov.u32 %r3, %tid.x;
  setp.ne.u32 %p2, %r3, 0;
  @%p2 bra done;
  atom.global.add.u32 %r4, [%rd1+4], 1;
  mov.u32 %r5, %nctaid.x;
spin:
  ld.volatile.global.u32 %r6, [%rd1+4];
  setp.lt.u32 %p1, %r6, %r5;
  @%p1 bra spin;
  ld.param.u64 %rd2, [out];
  cvta.to.global.u64 %rd2, %rd2;
  mov.u32 %r7, %ctaid.x;
  mul.wide.u32 %rd3, %r7, 4;
  add.s64 %rd4, %rd2, %rd3;
  st.global.u32 [%rd4], 1;
done:
  bar.sync 0;
  ret;
}
)";

TEST(Cooperative, BlocksThatWaitForEachOtherFinish) {
  FakeGlobalMemory mem;
  LoadedModule m = LoadPtx(kGridBarrierPtx, mem);
  ASSERT_NE(m.module, nullptr);
  LaunchConfig cfg;
  cfg.cooperative = true;
  cfg.max_instructions = 50'000'000;
  uint64_t out = mem.Alloc(12 * 4);
  LaunchResult r = LaunchWith(cfg, m, mem, "wait_all", {12, 1, 1}, {64, 1, 1}, 0, out);
  ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
  EXPECT_EQ(mem.Download<uint32_t>(out, 12), std::vector<uint32_t>(12, 1));
  // An ordinary launch has no grid workspace (%envreg1/2 read 0): the kernel traps.
  LaunchConfig plain;
  plain.max_instructions = 50'000'000;
  r = LaunchWith(plain, m, mem, "wait_all", {12, 1, 1}, {64, 1, 1}, 0, out);
  EXPECT_EQ(r.error, LaunchError::kTrap) << r.message;
}

// An ordinary launch: each block's thread 0 adds one to *counter and waits until every block
// has; then writes 1 to out[block]. Only correct where every block is resident.
const std::string kCounterBarrierPtx = std::string(kHeader) + R"(
.visible .entry wait_counter(.param .u64 counter, .param .u64 out)
{
  .reg .pred %p<3>;
  .reg .b32 %r<8>;
  .reg .b64 %rd<8>;
  ld.param.u64 %rd1, [counter];
  cvta.to.global.u64 %rd1, %rd1;
  mov.u32 %r3, %tid.x;
  setp.ne.u32 %p2, %r3, 0;
  @%p2 bra done;
  atom.global.add.u32 %r4, [%rd1], 1;
  mov.u32 %r5, %nctaid.x;
spin:
  ld.relaxed.gpu.global.u32 %r6, [%rd1];
  setp.lt.u32 %p1, %r6, %r5;
  @%p1 bra spin;
  ld.param.u64 %rd2, [out];
  cvta.to.global.u64 %rd2, %rd2;
  mov.u32 %r7, %ctaid.x;
  mul.wide.u32 %rd3, %r7, 4;
  add.s64 %rd4, %rd2, %rd3;
  st.global.u32 [%rd4], 1;
done:
  bar.sync 0;
  ret;
}
)";

TEST(Residency, BlocksResidentTogetherAllAdvance) {
  FakeGlobalMemory mem;
  LoadedModule m = LoadPtx(kCounterBarrierPtx, mem);
  ASSERT_NE(m.module, nullptr);
  WorkerPool pool(3);
  for (WorkerPool* p : {static_cast<WorkerPool*>(nullptr), &pool}) {
    SCOPED_TRACE(p ? "three threads" : "one thread");
    LaunchConfig cfg;
    cfg.pool = p;
    cfg.max_instructions = 200'000'000;
    cfg.resident_blocks = 40;  // the whole grid fits
    uint64_t counter = mem.Alloc(4), out = mem.Alloc(40 * 4);
    LaunchResult r =
        LaunchWith(cfg, m, mem, "wait_counter", {40, 1, 1}, {64, 1, 1}, 0, counter, out);
    ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
    EXPECT_EQ(mem.Download<uint32_t>(out, 40), std::vector<uint32_t>(40, 1));
    // Half the grid resident: the first half waits for blocks that never start.
    cfg.resident_blocks = 20;
    cfg.max_instructions = 5'000'000;
    counter = mem.Alloc(4);
    r = LaunchWith(cfg, m, mem, "wait_counter", {40, 1, 1}, {64, 1, 1}, 0, counter, out);
    EXPECT_EQ(r.error, LaunchError::kTimeout) << r.message;
  }
}

// Warp 0 waits (polling shared memory) for a flag the block's last warp sets after a long
// loop, no barrier between: a polling warp gives up its turn, so it polls little while the
// other warp works.
TEST(Residency, AWarpThatPollsGivesUpItsTurn) {
  const std::string ptx = std::string(kHeader) + R"(
.visible .entry warps(.param .u64 out)
{
  .reg .pred %p<3>;
  .reg .b32 %r<8>;
  .reg .b64 %rd<4>;
  .shared .align 4 .u32 flag;
  mov.u32 %r3, 0;
  mov.u32 %r1, %tid.x;
  setp.eq.u32 %p1, %r1, 0;
  @%p1 bra wait;
  setp.eq.u32 %p2, %r1, 224;
  @!%p2 bra done;
  mov.u32 %r4, 0;
work:
  add.u32 %r4, %r4, 1;
  setp.lt.u32 %p2, %r4, 2000;
  @%p2 bra work;
  st.volatile.shared.u32 [flag], 5;
  bra.uni done;
wait:
  add.u32 %r3, %r3, 1;
  ld.volatile.shared.u32 %r2, [flag];
  setp.eq.u32 %p1, %r2, 0;
  @%p1 bra wait;
  ld.param.u64 %rd1, [out];
  cvta.to.global.u64 %rd1, %rd1;
  st.global.u32 [%rd1], %r2;
  st.global.u32 [%rd1+4], %r3;
done:
  ret;
}
)";
  FakeGlobalMemory mem;
  LoadedModule m = LoadPtx(ptx, mem);
  ASSERT_NE(m.module, nullptr);
  uint64_t out = mem.Alloc(8);
  LaunchConfig cfg;
  cfg.max_instructions = 10'000'000;
  LaunchResult r = LaunchWith(cfg, m, mem, "warps", {1, 1, 1}, {256, 1, 1}, 0, out);
  ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
  const std::vector<uint32_t> got = mem.Download<uint32_t>(out, 2);
  EXPECT_EQ(got[0], 5u);
  // Turns of up to a time slice would let it poll about 1,400 times during the other warp's
  // 6,000 instructions; giving up the turn after 32 polls keeps it to 32 a turn.
  EXPECT_GT(got[1], 0u);
  EXPECT_LT(got[1], 400u) << "polls";
}

// Clusters of two: each block stores its rank in shared memory, waits for its cluster, reads
// its peer's through mapa.shared::cluster and writes (rank, peer's value, getctarank of the
// mapped address) to out[block]. With wait_only set, rank 1 waits without arriving: the
// cluster never completes its barrier, and the launch fails instead of hanging.
const std::string kClusterPtx = std::string(kHeader) + R"(
.visible .entry pair(.param .u64 out, .param .u32 wait_only)
{
  .reg .pred %p<3>;
  .reg .b32 %r<12>;
  .reg .b64 %rd<6>;
  .shared .align 4 .u32 mine;
  mov.u32 %r1, %cluster_ctarank;
  mov.u32 %r2, %ctaid.x;
  mad.lo.u32 %r3, %r2, 10, %r1;
  mov.u32 %r4, %tid.x;
  setp.ne.u32 %p1, %r4, 0;
  @%p1 bra arrive;
  st.shared.u32 [mine], %r3;
arrive:
  ld.param.u32 %r10, [wait_only];
  setp.ne.u32 %p2, %r10, 0;
  setp.eq.u32 %p1, %r1, 1;
  and.pred %p2, %p2, %p1;
  @%p2 bra wait;
  barrier.cluster.arrive.aligned;
wait:
  barrier.cluster.wait.aligned;
  @%p1 bra skip;
skip:
  xor.b32 %r5, %r1, 1;
  mov.u32 %r6, mine;
  mapa.shared::cluster.u32 %r7, %r6, %r5;
  ld.shared::cluster.u32 %r8, [%r7];
  getctarank.shared::cluster.u32 %r9, %r7;
  ld.param.u64 %rd1, [out];
  cvta.to.global.u64 %rd1, %rd1;
  mul.wide.u32 %rd2, %r2, 12;
  add.s64 %rd3, %rd1, %rd2;
  setp.ne.u32 %p1, %r4, 0;
  @%p1 bra done;
  st.global.u32 [%rd3], %r1;
  st.global.u32 [%rd3+4], %r8;
  st.global.u32 [%rd3+8], %r9;
done:
  barrier.cluster.arrive.aligned;
  barrier.cluster.wait.aligned;
  ret;
}
)";

TEST(Clusters, BlocksReadTheirPeersSharedMemory) {
  FakeGlobalMemory mem;
  LoadedModule m = LoadPtx(kClusterPtx, mem);
  ASSERT_NE(m.module, nullptr);
  WorkerPool pool(2);
  LaunchConfig cfg;
  cfg.pool = &pool;
  cfg.cluster = Dim3{2, 1, 1};
  cfg.resident_blocks = 4;
  cfg.max_instructions = 10'000'000;
  uint64_t out = mem.Alloc(8 * 12);
  LaunchResult r = LaunchWith(cfg, m, mem, "pair", {8, 1, 1}, {64, 1, 1}, 0, out, 0u);
  ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
  const std::vector<uint32_t> got = mem.Download<uint32_t>(out, 24);
  for (uint32_t b = 0; b < 8; ++b) {
    const uint32_t rank = b % 2, peer = b ^ 1;
    EXPECT_EQ(got[3 * b], rank) << b;
    EXPECT_EQ(got[3 * b + 1], peer * 10 + (rank ^ 1)) << b;
    EXPECT_EQ(got[3 * b + 2], rank ^ 1) << b;
  }
  // Grids the cluster does not tile are refused.
  r = LaunchWith(cfg, m, mem, "pair", {7, 1, 1}, {64, 1, 1}, 0, out, 0u);
  EXPECT_EQ(r.error, LaunchError::kInvalidLaunch) << r.message;
  // A barrier that can never complete fails the launch.
  r = LaunchWith(cfg, m, mem, "pair", {8, 1, 1}, {64, 1, 1}, 0, out, 1u);
  EXPECT_EQ(r.error, LaunchError::kTrap) << r.message;
}

// A launch without clusters is one of 1x1x1 clusters: a thread that waits at the cluster
// barrier without arriving fails the launch rather than holding its thread forever.
TEST(Clusters, AWaitNothingCompletesFailsWithoutClustersToo) {
  const std::string ptx = std::string(kHeader) + R"(
.visible .entry stuck()
{
  barrier.cluster.wait.aligned;
  ret;
}
)";
  FakeGlobalMemory mem;
  LoadedModule m = LoadPtx(ptx, mem);
  ASSERT_NE(m.module, nullptr);
  LaunchConfig cfg;
  cfg.max_instructions = 1'000'000;
  LaunchResult r = LaunchWith(cfg, m, mem, "stuck", {4, 1, 1}, {32, 1, 1}, 0);
  EXPECT_EQ(r.error, LaunchError::kTrap) << r.message;
}

TEST(Params, PointerAlignmentIsThePointeesNotTheParameters) {
  std::string ptx = std::string(kHeader) + R"(
.visible .entry k(
  .param .u32 a,
  .param .u64 .ptr .global .align 4 p,
  .param .u8 c,
  .param .u64 .ptr .align 1 q,
  .param .align 16 .b8 s[32]
)
{
  ret;
}
)";
  FakeGlobalMemory mem;
  LoadedModule m = LoadPtx(ptx, mem);
  ASSERT_NE(m.module, nullptr);
  const KernelInfo* k = m.module->find_kernel("k");
  ASSERT_NE(k, nullptr);
  ASSERT_EQ(k->params.size(), 5u);
  EXPECT_EQ(k->params[0].offset, 0u);
  EXPECT_EQ(k->params[1].offset, 8u);
  EXPECT_EQ(k->params[2].offset, 16u);
  EXPECT_EQ(k->params[3].offset, 24u);
  EXPECT_EQ(k->params[4].offset, 32u);  // .align before .b8 still aligns the parameter
  EXPECT_EQ(k->param_bytes, 64u);
}

}  // namespace
}  // namespace cuwire::ptx::testing
