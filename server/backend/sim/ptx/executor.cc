// Grid/block/warp scheduling, memory access, control flow and warp-level instructions.
// Register-only instructions are in alu.cc.

#include "server/backend/sim/ptx/executor.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <new>
#include <stdexcept>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "server/backend/sim/ptx/alu.h"
#include "server/backend/sim/ptx/device_printf.h"
#include "server/backend/sim/ptx/float16.h"
#include "server/backend/sim/ptx/texture.h"

namespace cuwire::ptx {
namespace {

constexpr uint32_t kNoMerge = 0xffffffffu;
// Warp-instructions a warp runs before the block scheduler moves to the next warp. Small enough
// that a warp spinning on shared memory lets the others run, large enough to be cheap.
constexpr int kTimeSlice = 4096;
// A block's warps take turns of one instruction after each barrier, then kSliceGrowth times longer
// each round up to kTimeSlice: warps leaving a barrier together each issue their first instruction
// (typically the read of what the barrier published) before any issues its second, as a GPU's
// round-robin issue has them do, and long stretches still run in long turns.
constexpr int kFirstSlice = 1;
constexpr int kSliceGrowth = 8;
// A warp that reads with this many polling loads or atomics in one turn (Inst::polls) gives up
// the rest of its turn, as does one that executes nanosleep: it is likely waiting for another
// warp or block, which then runs sooner.
constexpr int kPollsPerTurn = 32;
// Cycles each read of %clock/%clock64 adds to the clock (see ReadClock).
constexpr uint64_t kClockReadCycles = 4096;
// Shared memory the driver reserves for the CUDA libraries (%reserved_smem_offset_*: cooperative
// groups needs at least 288 bytes from %reserved_smem_offset_1). It sits far above the kernel's
// own shared memory, so overrunning that still fails the launch.
constexpr uint32_t kReservedSharedOffset = 0x8000'0000u;
constexpr uint32_t kReservedSharedBytes = 1024;
// Shared-space addresses are 32 bits wide (a generic address of shared memory is not).
constexpr uint64_t kSharedWrap = 0xffff'ffffull;
// Thread-block clusters: the shared memory of the cluster's block of rank r is at
// kClusterSharedBase + r * kClusterRankStride in the shared::cluster space (what mapa gives);
// a block's own shared::cta addresses are valid there too. Blocks of a cluster launch have at
// most kClusterRankStride bytes of shared memory (real ones at most 228 KiB).
constexpr uint64_t kClusterSharedBase = 0x9000'0000ull;
constexpr uint64_t kClusterRankStride = 0x0100'0000ull;
constexpr uint32_t kMaxClusterSize = 16;  // the non-portable limit
// alloca: each thread's dynamic stack lives in its .local window from this offset, up to
// kStackAllocLimit bytes (CUDA's cudaLimitStackSize is far smaller by default).
constexpr uint64_t kStackAllocOffset = 0x8000'0000ull;

struct Warp {
  std::vector<uint64_t> regs;   // num_slots * 32
  std::vector<uint8_t> tparam;  // 32 * thread_param_bytes
  std::vector<uint32_t> stack;  // 32 * max_call_depth call-site pcs
  uint32_t lane_pc[32] = {};    // valid for lanes outside `active`
  uint8_t depth[32] = {};
  uint32_t pc = 0;       // pc of the active group
  uint32_t active = 0;   // lanes executing now (share pc and call stack)
  uint32_t running = 0;  // lanes neither exited nor waiting at a barrier
  uint32_t at_barrier = 0;
  uint32_t exited = 0;
  uint32_t at_cluster = 0;        // lanes waiting at barrier.cluster.wait
  uint64_t cluster_phase = 0;     // the cluster barrier phase the warp last arrived in
  uint32_t valid = 0;             // lanes that exist (the last warp may be partial)
  uint32_t merge_pc = kNoMerge;   // reschedule when the active group's pc reaches this
  uint32_t index = 0;             // warp index in the block
  uint32_t red_lanes = 0;         // lanes waiting at a bar.red, to receive its result
  uint32_t red_dest = kSlotSink;  // their destination register
  // alloca (only for programs that use it): per-lane stack bytes, top, and the top saved at
  // each call depth so ret releases what the callee allocated.
  std::vector<uint8_t> alloc_stack[32];
  uint32_t alloc_top[32] = {};
  std::vector<uint32_t> saved_top;  // 32 * max_call_depth
};

// What every block of one launch shares: the checked configuration, parameters, the first
// failure, the instruction count, printf output by block, the heap and the grid workspace.
struct LaunchShared {
  LaunchShared(const Program& program, const KernelInfo& kernel, const LaunchConfig& config,
               const std::unordered_map<std::string, uint64_t>& variables, GlobalMemory& memory)
      : p(program), k(kernel), cfg(config), vars(variables), mem(memory), heap(config.heap) {
    if (!heap) {
      own_heap = std::make_unique<DeviceHeap>(config.malloc_heap_bytes);
      heap = own_heap.get();
    }
  }

  const Program& p;
  const KernelInfo& k;
  const LaunchConfig& cfg;
  const std::unordered_map<std::string, uint64_t>& vars;
  GlobalMemory& mem;
  // Set by GridRun::Prepare, read-only afterwards.
  uint32_t threads = 0;
  uint32_t shared_size = 0;
  uint64_t total_blocks = 0;
  std::vector<uint8_t> params;
  std::vector<std::pair<uint32_t, uint64_t>> uniform;  // slots equal in every lane and block

  std::atomic<uint64_t> next_block{0};  // the next block a runner takes
  uint64_t resident = 1;                // blocks held at once, all runners together
  Dim3 cluster{1, 1, 1};                // the cluster tiling the grid (1x1x1: none)
  uint32_t cluster_size = 1;
  bool explicit_cluster = false;  // launched with a cluster (%is_explicit_cluster)
  std::atomic<uint64_t> held{0};  // blocks held now (at most `resident`)
  std::atomic<bool> failed{false};
  std::atomic<uint64_t> instructions{0};
  std::atomic<uint64_t> printf_bytes{0};
  std::mutex mu;
  LaunchResult result;                              // error and message; guarded by mu
  std::map<uint64_t, std::string> printf_by_block;  // guarded by mu
  DeviceHeap* heap;
  std::unique_ptr<DeviceHeap> own_heap;
  // The grid workspace of a cooperative launch: {size, barrier} at kGridWorkspaceBase.
  alignas(8) uint32_t workspace[2] = {8, 0};
};

class GridRun;

// What the blocks of one cluster share (a launch without clusters: each block alone): each
// rank's block, for shared::cluster accesses, and the cluster barrier's progress. The runner
// holding the cluster is the only thread that touches it.
struct ClusterState {
  std::vector<GridRun*> ranks;
  uint64_t phase = 0;    // completed barrier.cluster phases
  uint64_t arrived = 0;  // threads arrived in the phase in progress
};

// Runs one resident block of a launch at a time (StartBlock ... Step until false).
class GridRun {
 public:
  explicit GridRun(LaunchShared& s)
      : s_(s), p_(s.p), k_(s.k), cfg_(s.cfg), vars_(s.vars), mem_(s.mem) {}
  // A runner left when the launch failed still counts what it ran.
  ~GridRun() { s_.instructions.fetch_add(unflushed_, std::memory_order_relaxed); }
  GridRun(const GridRun&) = delete;
  GridRun& operator=(const GridRun&) = delete;

  // Checks the launch and fills the shared state; false when the launch fails.
  bool Prepare() {
    if (!Validate()) return false;
    s_.params.assign(k_.param_bytes, 0);
    if (k_.param_bytes) std::memcpy(s_.params.data(), cfg_.params, k_.param_bytes);
    const Dim3& g = cfg_.grid;
    s_.total_blocks = uint64_t{g.x} * g.y * g.z;
    return Cluster() && Uniform();
  }

  // Sizes the block state (registers, shared and local memory) once; StartBlock reuses it.
  void Setup() {
    shared_.assign(s_.shared_size, 0);
    local_.assign(static_cast<size_t>(s_.threads) * p_.local_bytes, 0);
    uint32_t nwarps = (s_.threads + 31) / 32;
    warps_.resize(nwarps);
    const Dim3& b = cfg_.block;
    for (uint32_t wi = 0; wi < nwarps; ++wi) {
      Warp& w = warps_[wi];
      w.index = wi;
      w.regs.assign(static_cast<size_t>(p_.num_slots) * 32, 0);
      w.tparam.assign(static_cast<size_t>(p_.thread_param_bytes) * 32, 0);
      w.stack.assign(static_cast<size_t>(p_.max_call_depth) * 32, 0);
      if (p_.uses_stack_alloc) w.saved_top.assign(static_cast<size_t>(p_.max_call_depth) * 32, 0);
      uint64_t* R = w.regs.data();
      for (auto [slot, value] : s_.uniform)
        for (int l = 0; l < 32; ++l) R[static_cast<size_t>(slot) * 32 + l] = value;
      for (uint32_t l = 0; l < 32; ++l) {
        uint32_t t = wi * 32 + l;
        if (t < s_.threads) w.valid |= 1u << l;
        R[kSlotTidX * 32 + l] = t % b.x;
        R[kSlotTidY * 32 + l] = (t / b.x) % b.y;
        R[kSlotTidZ * 32 + l] = t / (b.x * b.y);
        R[kSlotLaneId * 32 + l] = l;
        R[kSlotWarpId * 32 + l] = wi;
        R[kSlotLanemaskEq * 32 + l] = 1u << l;
        R[kSlotLanemaskLt * 32 + l] = (1u << l) - 1;
        R[kSlotLanemaskLe * 32 + l] = l == 31 ? 0xffffffffu : (2u << l) - 1;
        R[kSlotLanemaskGt * 32 + l] = l == 31 ? 0 : ~((2u << l) - 1) & 0xffffffffu;
        R[kSlotLanemaskGe * 32 + l] = ~((1u << l) - 1) & 0xffffffffu;
      }
    }
  }

  // Thread-instructions this runner has run, over every block it ran.
  uint64_t ran() const { return instructions_; }
  // Whether a warp gave up its turn in the last Step because it was polling.
  bool polled() const { return polled_; }

  // Gives the printf output of the block just run to the launch.
  void FlushPrintf() {
    if (printf_.empty()) return;
    s_.printf_bytes.fetch_add(printf_.size(), std::memory_order_relaxed);
    std::lock_guard lock(s_.mu);
    s_.printf_by_block[block_] = std::move(printf_);
    printf_.clear();
  }

  // After a block's last step: its instruction count and printf output join the launch's.
  // False where the launch failed.
  bool FinishBlock() {
    FlushCount();
    FlushPrintf();
    return !failed_;
  }

  // ---- block scheduling --------------------------------------------------------------------

  // Makes the block `linear` this runner's block, its threads at their first instruction:
  // cluster linear / cluster_size (x fastest), rank linear % cluster_size in it (x fastest);
  // without clusters, block `linear` of the grid.
  void StartBlock(uint64_t linear, ClusterState* cluster) {
    const Dim3& g = cfg_.grid;
    const Dim3& c = s_.cluster;
    uint32_t rank = 0, rx = 0, ry = 0, rz = 0, cx, cy, cz;
    if (s_.cluster_size == 1) {
      cx = static_cast<uint32_t>(linear % g.x);
      cy = static_cast<uint32_t>(linear / g.x % g.y);
      cz = static_cast<uint32_t>(linear / (uint64_t{g.x} * g.y));
    } else {
      const uint64_t ci = linear / s_.cluster_size;
      rank = static_cast<uint32_t>(linear % s_.cluster_size);
      const uint32_t ncx = g.x / c.x, ncy = g.y / c.y;
      cx = static_cast<uint32_t>(ci % ncx);
      cy = static_cast<uint32_t>(ci / ncx % ncy);
      cz = static_cast<uint32_t>(ci / (uint64_t{ncx} * ncy));
      rx = rank % c.x;
      ry = rank / c.x % c.y;
      rz = rank / (c.x * c.y);
    }
    const uint32_t bx = cx * c.x + rx, by = cy * c.y + ry, bz = cz * c.z + rz;
    block_ = bx + uint64_t{g.x} * (by + uint64_t{g.y} * bz);  // printf's order
    cluster_ = cluster;
    rank_ = rank;
    // Starting a block costs about a warp-instruction per warp and clearing its shared memory
    // (~32 bytes per instruction's time); charged so a huge grid of empty blocks stays within
    // the instruction budget too.
    Count(uint64_t{static_cast<uint32_t>(warps_.size())} * 32 + s_.shared_size / 32);
    if (failed_) return;
    bx_ = bx;
    by_ = by;
    bz_ = bz;
    slice_ = kTimeSlice;
    polled_ = false;
    std::fill(shared_.begin(), shared_.end(), 0);
    // The reserved region is reached only through %reserved_smem_offset_* (any other address
    // there fails): a kernel that never reads those finds nothing to clear.
    if (p_.uses_reserved_smem)
      std::fill(std::begin(reserved_shared_), std::end(reserved_shared_), 0);
    for (Warp& w : warps_) {
      uint64_t* R = w.regs.data();
      for (int l = 0; l < 32; ++l) {
        R[kSlotCtaidX * 32 + l] = bx;
        R[kSlotCtaidY * 32 + l] = by;
        R[kSlotCtaidZ * 32 + l] = bz;
      }
      if (p_.uses_cluster_slots) {
        for (int l = 0; l < 32; ++l) {
          R[kSlotClusterCtaRank * 32 + l] = rank;
          R[kSlotClusterCtaidX * 32 + l] = rx;
          R[kSlotClusterCtaidY * 32 + l] = ry;
          R[kSlotClusterCtaidZ * 32 + l] = rz;
          R[kSlotClusterIdX * 32 + l] = cx;
          R[kSlotClusterIdY * 32 + l] = cy;
          R[kSlotClusterIdZ * 32 + l] = cz;
        }
      }
      w.pc = 0;
      w.active = w.running = w.valid;
      w.at_barrier = w.exited = w.at_cluster = 0;
      w.cluster_phase = 0;
      w.merge_pc = kNoMerge;
      w.red_lanes = 0;
      std::fill(std::begin(w.alloc_top), std::end(w.alloc_top), 0);
      std::fill(std::begin(w.depth), std::end(w.depth), 0);
      std::fill(std::begin(w.lane_pc), std::end(w.lane_pc), 0);
    }
  }

  // Runs each running warp of the block for a time slice, or releases a barrier every live
  // thread waits at. False once the block is done (or the launch failed).
  bool Step() {
    polled_ = false;
    if (failed_) return false;
    if (s_.failed.load(std::memory_order_relaxed)) {
      failed_ = true;
      return false;
    }
    bool any_running = false;
    for (Warp& w : warps_) {
      if (!w.running) continue;
      any_running = true;
      RunWarp(w);
      if (failed_) return false;
    }
    if (any_running) {
      slice_ = std::min(slice_ * kSliceGrowth, kTimeSlice);
      return true;
    }
    // Nothing can run: either everyone exited, or every live thread waits at a barrier.
    bool any_waiting = false;
    uint64_t red = red_mode_ == 0 ? red_count_ : red_mode_ == 1 ? red_all_ : red_any_;
    red_count_ = 0;
    red_all_ = true;
    red_any_ = false;
    for (Warp& w : warps_) {
      if (w.red_lanes) {
        uint64_t* d = w.regs.data() + static_cast<size_t>(w.red_dest) * 32;
        ForLanes(w.red_lanes, [&](int l) { d[l] = red; });
        w.red_lanes = 0;
      }
      any_waiting = any_waiting || w.at_cluster;  // released by its cluster (ReleaseCluster)
      if (!w.at_barrier) continue;
      any_waiting = true;
      slice_ = kFirstSlice;
      w.running |= w.at_barrier;
      w.at_barrier = 0;
      w.active = 0;
      Pick(w);
    }
    return any_waiting;
  }

  // Ends the cluster barrier's phase once every thread of the cluster that has not exited
  // arrived (a cluster's barrier counts exited threads as arrived), releasing its waiters.
  void CompleteClusterPhase() {
    ClusterState& c = *cluster_;
    if (c.arrived == 0) return;
    uint64_t live = 0;
    for (GridRun* b : c.ranks)
      for (const Warp& w : b->warps_)
        live += static_cast<uint32_t>(__builtin_popcount(w.valid & ~w.exited));
    if (c.arrived < live) return;
    ++c.phase;
    c.arrived = 0;
    for (GridRun* b : c.ranks) {
      for (Warp& w : b->warps_) {
        if (!w.at_cluster) continue;
        w.running |= w.at_cluster;
        w.at_cluster = 0;
        w.active = 0;
        b->Pick(w);
      }
      b->slice_ = kFirstSlice;
    }
  }

  // Fails the launch: the blocks of a cluster wait at barrier.cluster for threads that are
  // waiting elsewhere (a block barrier) and will never arrive.
  void ClusterDeadlock() {
    Fail(LaunchError::kTrap, "kernel " + k_.name +
                                 ": the blocks of a cluster wait at barrier.cluster for threads "
                                 "that never arrive");
  }

 private:
  // ---- setup -------------------------------------------------------------------------------

  bool Fail(LaunchError e, std::string msg) {
    if (!failed_) {
      failed_ = true;
      std::lock_guard lock(s_.mu);
      if (!s_.failed.load(std::memory_order_relaxed)) {
        s_.result.error = e;
        s_.result.message = std::move(msg);
        s_.failed.store(true, std::memory_order_relaxed);
      }
    }
    return false;
  }

  bool Validate() {
    const Dim3& b = cfg_.block;
    const Dim3& g = cfg_.grid;
    if (b.x == 0 || b.y == 0 || b.z == 0 || g.x == 0 || g.y == 0 || g.z == 0)
      return Fail(LaunchError::kInvalidLaunch, "grid and block dimensions must be non-zero");
    uint64_t threads = uint64_t{b.x} * b.y * b.z;
    if (threads > 1024 || b.z > 64)
      return Fail(LaunchError::kInvalidLaunch,
                  "block of " + std::to_string(threads) + " threads exceeds the limit of 1024");
    if (k_.max_threads && threads > k_.max_threads)
      return Fail(LaunchError::kInvalidLaunch, "block exceeds the kernel's .maxntid");
    if (g.y > 65535 || g.z > 65535 || g.x > 0x7fffffffu)
      return Fail(LaunchError::kInvalidLaunch, "grid dimensions exceed the limits");
    if (cfg_.params_size < k_.param_bytes || (k_.param_bytes && !cfg_.params))
      return Fail(LaunchError::kInvalidLaunch,
                  "kernel " + k_.name + " expects " + std::to_string(k_.param_bytes) +
                      " bytes of parameters, got " + std::to_string(cfg_.params_size));
    uint64_t shared = uint64_t{p_.dynamic_shared_offset} + cfg_.dynamic_shared_bytes;
    if (cfg_.dynamic_shared_bytes == 0) shared = p_.static_shared_bytes;
    // Generous compared to real GPUs (<= 228 KiB), bounded so a launch cannot exhaust memory.
    if (shared > (64u << 20))
      return Fail(LaunchError::kInvalidLaunch, "shared memory request too large");
    s_.shared_size = static_cast<uint32_t>(shared);
    s_.threads = static_cast<uint32_t>(threads);
    return true;
  }

  // The launch's cluster (the launch's, else the kernel's .reqnctapercluster): its dimensions
  // must tile the grid.
  bool Cluster() {
    Dim3 c = cfg_.cluster.x ? cfg_.cluster : k_.cluster;
    if (!c.x) {
      if (k_.explicit_cluster)
        return Fail(LaunchError::kInvalidLaunch,
                    "kernel " + k_.name + " must be launched with a cluster (.explicitcluster)");
      return true;
    }
    const Dim3& g = cfg_.grid;
    if (c.y == 0 || c.z == 0 || g.x % c.x || g.y % c.y || g.z % c.z)
      return Fail(LaunchError::kInvalidLaunch,
                  "grid dimensions are not a multiple of the cluster's");
    const uint64_t size = uint64_t{c.x} * c.y * c.z;
    if (size > kMaxClusterSize)
      return Fail(LaunchError::kInvalidLaunch,
                  "cluster of " + std::to_string(size) + " blocks exceeds the limit of 16");
    if (s_.shared_size > kClusterRankStride)
      return Fail(LaunchError::kInvalidLaunch, "shared memory request too large for a cluster");
    s_.cluster = c;
    s_.cluster_size = static_cast<uint32_t>(size);
    s_.explicit_cluster = true;
    return true;
  }

  // The slots that hold the same value in every lane and every block.
  bool Uniform() {
    std::vector<std::pair<uint32_t, uint64_t>>& uniform = s_.uniform;
    uniform = p_.constants;
    for (const SymbolSlot& s : p_.symbol_slots) {
      auto it = vars_.find(s.variable);
      if (it == vars_.end())
        return Fail(LaunchError::kInvalidLaunch,
                    "no device address given for variable " + s.variable);
      uniform.push_back({s.slot, it->second + static_cast<uint64_t>(s.offset)});
    }
    const Dim3& b = cfg_.block;
    const Dim3& g = cfg_.grid;
    uniform.push_back({kSlotZero, 0});
    uniform.push_back({kSlotNtidX, b.x});
    uniform.push_back({kSlotNtidY, b.y});
    uniform.push_back({kSlotNtidZ, b.z});
    uniform.push_back({kSlotNctaidX, g.x});
    uniform.push_back({kSlotNctaidY, g.y});
    uniform.push_back({kSlotNctaidZ, g.z});
    uniform.push_back({kSlotNWarpId, 64});
    uniform.push_back({kSlotSmId, 0});
    uniform.push_back({kSlotNSmId, 1});
    uniform.push_back({kSlotGridId, 1});
    uniform.push_back({kSlotDynSmemSize, cfg_.dynamic_shared_bytes});
    uniform.push_back({kSlotTotalSmemSize, s_.shared_size});
    uniform.push_back({kSlotReservedSmemBegin, kReservedSharedOffset});
    uniform.push_back({kSlotReservedSmemEnd, kReservedSharedOffset + kReservedSharedBytes});
    uniform.push_back({kSlotReservedSmemCap, kReservedSharedBytes});
    uniform.push_back({kSlotReservedSmem0, kReservedSharedOffset});
    uniform.push_back({kSlotReservedSmem1, kReservedSharedOffset + kReservedSharedBytes / 2});
    uniform.push_back({kSlotClusterNCtaRank, s_.cluster_size});
    uniform.push_back({kSlotClusterNCtaidX, s_.cluster.x});
    uniform.push_back({kSlotClusterNCtaidY, s_.cluster.y});
    uniform.push_back({kSlotClusterNCtaidZ, s_.cluster.z});
    uniform.push_back({kSlotNClusterIdX, g.x / s_.cluster.x});
    uniform.push_back({kSlotNClusterIdY, g.y / s_.cluster.y});
    uniform.push_back({kSlotNClusterIdZ, g.z / s_.cluster.z});
    uniform.push_back({kSlotIsExplicitCluster, s_.explicit_cluster ? 1u : 0u});
    for (uint32_t i = 0; i < 32; ++i) uniform.push_back({kSlotEnvReg0 + i, 0});
    if (cfg_.cooperative) {
      uniform.push_back({kSlotEnvReg0 + 1, kGridWorkspaceBase >> 32});
      uniform.push_back({kSlotEnvReg0 + 2, kGridWorkspaceBase & 0xffffffffu});
    }
    return true;
  }

  // ---- block scheduling --------------------------------------------------------------------

  // ---- warp scheduling ---------------------------------------------------------------------

  uint32_t KeyAt(const Warp& w, int lane, int i) const {
    return i < w.depth[lane] ? w.stack[static_cast<size_t>(lane) * p_.max_call_depth + i]
                             : w.lane_pc[lane];
  }
  // Orders lanes by (call-site pcs..., pc); a caller at the call site sorts before its callees.
  int CompareLanes(const Warp& w, int a, int b) const {
    int da = w.depth[a], db = w.depth[b];
    int n = std::min(da, db);
    for (int i = 0; i <= n; ++i) {
      uint32_t ka = KeyAt(w, a, i), kb = KeyAt(w, b, i);
      if (ka != kb) return ka < kb ? -1 : 1;
    }
    return da == db ? 0 : (da < db ? -1 : 1);
  }

  // Chooses the next group of lanes to run. Lanes in w.active must have lane_pc up to date.
  void Pick(Warp& w) {
    uint32_t r = w.running;
    if (!r) {
      w.active = 0;
      return;
    }
    // Without calls in flight (the usual case) a lane's key is its pc alone: the lowest pc
    // runs, and the next lowest is where it waits for the others.
    uint8_t depths = 0;
    uint32_t lowest = kNoMerge;
    for (uint32_t m = r; m; m &= m - 1) {
      const int l = __builtin_ctz(m);
      depths |= w.depth[l];
      lowest = std::min(lowest, w.lane_pc[l]);
    }
    if (depths == 0) {
      uint32_t lanes = 0, next_pc = kNoMerge;
      for (uint32_t m = r; m; m &= m - 1) {
        const int l = __builtin_ctz(m);
        const uint32_t pc = w.lane_pc[l];
        if (pc == lowest) {
          lanes |= 1u << l;
        } else {
          next_pc = std::min(next_pc, pc);
        }
      }
      w.active = lanes;
      w.pc = lowest;
      w.merge_pc = next_pc;
      return;
    }
    int best = __builtin_ctz(r);
    for (uint32_t m = r & (r - 1); m; m &= m - 1) {
      int l = __builtin_ctz(m);
      if (CompareLanes(w, l, best) < 0) best = l;
    }
    uint32_t active = 0, others = 0;
    int next = -1;
    for (uint32_t m = r; m; m &= m - 1) {
      int l = __builtin_ctz(m);
      if (CompareLanes(w, l, best) == 0) {
        active |= 1u << l;
      } else {
        others |= 1u << l;
        if (next < 0 || CompareLanes(w, l, next) < 0) next = l;
      }
    }
    w.active = active;
    w.pc = w.lane_pc[best];
    w.merge_pc = kNoMerge;
    if (next >= 0) {
      int d = w.depth[best];
      bool same_prefix = w.depth[next] >= d;
      for (int i = 0; same_prefix && i < d; ++i)
        same_prefix = KeyAt(w, next, i) == KeyAt(w, best, i);
      if (same_prefix) w.merge_pc = KeyAt(w, next, d);
    }
  }

  void SyncActive(Warp& w, uint32_t pc) {
    for (uint32_t m = w.active; m; m &= m - 1) w.lane_pc[__builtin_ctz(m)] = pc;
  }

  uint32_t GuardMask(const Warp& w, const Inst& in) const {
    const uint64_t* g = w.regs.data() + static_cast<size_t>(in.guard) * 32;
    uint32_t m = 0;
    bool neg = in.guard_negated;
    ForLanes(w.active, [&](int l) { m |= static_cast<uint32_t>((g[l] != 0) != neg) << l; });
    return m;
  }

  std::string Where(const Warp& w, int lane, const Inst& in) const {
    uint32_t t = w.index * 32 + static_cast<uint32_t>(lane);
    const Dim3& b = cfg_.block;
    return " (kernel " + k_.name + ", line " + std::to_string(in.line) + ", block (" +
           std::to_string(bx_) + "," + std::to_string(by_) + "," + std::to_string(bz_) +
           "), thread (" + std::to_string(t % b.x) + "," + std::to_string((t / b.x) % b.y) + "," +
           std::to_string(t / (b.x * b.y)) + "))";
  }

  void RunWarp(Warp& w) {
    const Inst* code = p_.code.data();
    uint64_t* R = w.regs.data();
    uint64_t count = 0;
    int limit = slice_;  // set to 0 to end the turn after this instruction (polling)
    int polls = 0;
    for (int slice = 0; slice < limit && w.active; ++slice) {
      const Inst& in = code[w.pc];
      uint32_t active = w.active;
      // A whole warp is the usual case: no popcount call (a library call on baseline x86-64).
      count += active == ~0u ? 32 : static_cast<uint32_t>(__builtin_popcount(active));
      uint32_t mask = in.guard == kNoSlot ? active : GuardMask(w, in);
      switch (in.op) {
        case Op::kBra: {
          uint32_t target = in.aux;
          if (mask == active) {
            w.pc = target;
            if (target >= w.merge_pc) Reschedule(w);
          } else if (mask == 0) {
            if (++w.pc >= w.merge_pc) Reschedule(w);
          } else {
            uint32_t next = w.pc + 1;
            ForLanes(active, [&](int l) { w.lane_pc[l] = (mask >> l) & 1 ? target : next; });
            Pick(w);
          }
          continue;
        }
        case Op::kExit: {
          w.exited |= mask;
          w.running &= ~mask;
          w.active &= ~mask;
          if (w.active) {
            if (++w.pc >= w.merge_pc) Reschedule(w);
          } else {
            Pick(w);
          }
          continue;
        }
        case Op::kRet: {
          uint32_t next = w.pc + 1;
          bool ok = true;
          ForLanes(active, [&](int l) {
            if (!((mask >> l) & 1)) {
              w.lane_pc[l] = next;
              return;
            }
            if (w.depth[l] == 0) {  // cannot happen: ret at depth 0 decodes as exit
              ok = false;
              return;
            }
            uint32_t call_pc = w.stack[static_cast<size_t>(l) * p_.max_call_depth + --w.depth[l]];
            if (p_.uses_stack_alloc)
              w.alloc_top[l] = w.saved_top[static_cast<size_t>(l) * p_.max_call_depth + w.depth[l]];
            const CallSite& cs = p_.calls[code[call_pc].aux];
            uint8_t* tp = w.tparam.data() + static_cast<size_t>(l) * p_.thread_param_bytes;
            if (cs.target == kNoSlot) {
              for (const ByteCopy& c : cs.results) std::memmove(tp + c.to, tp + c.from, c.size);
            } else {
              // The callee cannot change the caller's registers: the target is still there.
              const FunctionEntry& f = *Callee(R[static_cast<size_t>(cs.target) * 32 + l]);
              for (size_t k = 0; k < cs.results.size(); ++k)
                std::memmove(tp + cs.results[k].to, tp + f.returns[k].first,
                             std::min(cs.results[k].size, f.returns[k].second));
            }
            w.lane_pc[l] = call_pc + 1;
          });
          if (!ok) {
            Fail(LaunchError::kTrap, "ret without a caller" + Where(w, 0, in));
            break;
          }
          Pick(w);
          continue;
        }
        case Op::kCall: {
          const CallSite& cs = p_.calls[in.aux];
          uint32_t next = w.pc + 1;
          bool ok = true;
          int bad_target = -1;
          ForLanes(active, [&](int l) {
            if (!((mask >> l) & 1)) {
              w.lane_pc[l] = next;
              return;
            }
            if (w.depth[l] + 1u >= p_.max_call_depth) {
              ok = false;
              return;
            }
            if (cs.target != kNoSlot) {
              const FunctionEntry* f = Callee(R[static_cast<size_t>(cs.target) * 32 + l]);
              if (!f || f->params.size() != cs.args.size() ||
                  f->returns.size() != cs.results.size()) {
                if (bad_target < 0) bad_target = l;
                return;
              }
              w.stack[static_cast<size_t>(l) * p_.max_call_depth + w.depth[l]++] = w.pc;
              if (p_.uses_stack_alloc)
                w.saved_top[static_cast<size_t>(l) * p_.max_call_depth + w.depth[l] - 1] =
                    w.alloc_top[l];
              uint8_t* tp = w.tparam.data() + static_cast<size_t>(l) * p_.thread_param_bytes;
              for (size_t k = 0; k < cs.args.size(); ++k)
                std::memmove(tp + f->params[k].first, tp + cs.args[k].from,
                             std::min(cs.args[k].size, f->params[k].second));
              w.lane_pc[l] = f->entry_pc;
              return;
            }
            if (p_.uses_stack_alloc)
              w.saved_top[static_cast<size_t>(l) * p_.max_call_depth + w.depth[l]] = w.alloc_top[l];
            w.stack[static_cast<size_t>(l) * p_.max_call_depth + w.depth[l]++] = w.pc;
            uint8_t* tp = w.tparam.data() + static_cast<size_t>(l) * p_.thread_param_bytes;
            for (const ByteCopy& c : cs.args) std::memmove(tp + c.to, tp + c.from, c.size);
            w.lane_pc[l] = cs.entry_pc;
          });
          if (!ok) {
            Fail(LaunchError::kTrap, "call stack overflow" + Where(w, 0, in));
            break;
          }
          if (bad_target >= 0) {
            uint64_t v = R[static_cast<size_t>(cs.target) * 32 + bad_target];
            char buf[32];
            std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
            Fail(LaunchError::kIllegalAddress,
                 std::string("indirect call to ") + buf +
                     ", which is not a function with this call's parameters" +
                     Where(w, bad_target, in));
            break;
          }
          Pick(w);
          continue;
        }
        case Op::kBarSync: {
          if (in.has_result) {
            const uint64_t* pv = R + static_cast<size_t>(in.s[2]) * 32;
            bool neg = in.vec != 0;
            ForLanes(mask, [&](int l) {
              bool v = (pv[l] != 0) != neg;
              red_count_ += v;
              red_all_ = red_all_ && v;
              red_any_ = red_any_ || v;
            });
            red_mode_ = in.mod;
            w.red_lanes |= mask;
            w.red_dest = in.d[0];
          }
          SyncActive(w, w.pc + 1);
          w.at_barrier |= mask;
          w.running &= ~mask;
          Pick(w);
          // Return so other warps run up to the barrier (and so a released warp restarts).
          Count(count);
          return;
        }
        case Op::kClusterArrive:
          cluster_->arrived += static_cast<uint32_t>(__builtin_popcount(mask));
          w.cluster_phase = cluster_->phase;
          CompleteClusterPhase();
          break;
        case Op::kClusterWait: {
          if (!mask || cluster_->phase > w.cluster_phase) break;  // its phase is complete
          SyncActive(w, w.pc + 1);
          w.at_cluster |= mask;
          w.running &= ~mask;
          Pick(w);
          Count(count);
          return;
        }
        case Op::kMapa:
        case Op::kGetCtaRank:
          ClusterAddress(w, in, mask);
          break;
        case Op::kTrap:
          if (mask) Fail(LaunchError::kTrap, p_.messages[in.aux]);  // `@p trap` traps where p holds
          break;
        case Op::kAssert:
          Fail(LaunchError::kAssert, p_.messages[in.aux]);
          break;
        case Op::kUnsupported:
          Fail(LaunchError::kUnsupportedOpcode, p_.messages[in.aux]);
          break;
        case Op::kNop:
          if (in.polls) limit = GiveUpTurn();  // nanosleep
          break;
        case Op::kLd:
          if (mask) Load(w, in, mask);
          if (in.polls && ++polls >= kPollsPerTurn) limit = GiveUpTurn();
          break;
        case Op::kSt:
          if (mask) Store(w, in, mask);
          break;
        case Op::kAtom:
          if (mask) Atomic(w, in, mask);
          if (++polls >= kPollsPerTurn) limit = GiveUpTurn();
          break;
        case Op::kCvta:
        case Op::kCvtaTo:
        case Op::kIsspacep:
          Cvta(w, in, mask);
          break;
        case Op::kReadClock:
          ReadClock(w, in, mask, count);
          break;
        case Op::kShfl:
          Shfl(w, in, mask);
          break;
        case Op::kVote:
          Vote(w, in, mask);
          break;
        case Op::kActivemask: {
          uint64_t* d = R + static_cast<size_t>(in.d[0]) * 32;
          ForLanes(mask, [&](int l) { d[l] = active; });
          break;
        }
        case Op::kMatchAny:
        case Op::kMatchAll:
          Match(w, in, mask);
          break;
        case Op::kVprintf:
          Vprintf(w, in, mask);
          break;
        case Op::kRedux:
          Redux(w, in, mask);
          break;
        case Op::kMma:
          if (mask) Mma(w, in, mask);
          break;
        case Op::kLdmatrix:
          if (mask) Ldmatrix(w, in, mask);
          break;
        case Op::kCvtTf32: {
          const uint64_t* a = R + static_cast<size_t>(in.s[0]) * 32;
          uint64_t* d = R + static_cast<size_t>(in.d[0]) * 32;
          ForLanes(mask, [&](int l) { d[l] = ToTf32(static_cast<uint32_t>(a[l]), in.rnd); });
          break;
        }
        case Op::kCpAsync:
          if (mask) CpAsync(w, in, mask);
          break;
        case Op::kMalloc:
        case Op::kFree:
          if (mask) HeapCall(w, in, mask);
          break;
        case Op::kSetConditional:
          if (mask) SetConditional(w, in, mask);
          break;
        case Op::kStackAlloc:
        case Op::kStackSave:
        case Op::kStackRestore:
          if (mask) StackAlloc(w, in, mask);
          break;
        case Op::kTex:
        case Op::kTld4:
        case Op::kTxq:
        case Op::kSuq:
        case Op::kSuld:
        case Op::kSust:
          if (mask) TextureAccess(w, in, mask);
          break;
        default:
          if (!mask) break;
          if (reference_) {
            ExecAluReference(in, R, mask);
          } else {
            ExecAlu(in, R, mask);
          }
          break;
      }
      if (failed_) break;
      if (++w.pc >= w.merge_pc) Reschedule(w);
    }
    Count(count);
  }

  // mapa: the address in the block of rank s[1] of the shared memory s[0] is at (in its own
  // block or another's of the cluster); getctarank: the rank of the block s[0] is in. In the
  // shared::cluster space (mod 1) or the generic one; anything else maps to itself / rank 0.
  void ClusterAddress(Warp& w, const Inst& in, uint32_t mask) {
    uint64_t* R = w.regs.data();
    const uint64_t* a = R + static_cast<size_t>(in.s[0]) * 32;
    const uint64_t* b = in.op == Op::kMapa ? R + static_cast<size_t>(in.s[1]) * 32 : nullptr;
    uint64_t* d = R + static_cast<size_t>(in.d[0]) * 32;
    const bool generic = in.mod == 0;
    const uint64_t ranks = cluster_->ranks.size();
    ForLanes(mask, [&](int l) {
      uint64_t x = a[l];
      if (generic && (x < kGenericSharedBase || x - kGenericSharedBase >= kGenericWindowSize)) {
        d[l] = in.op == Op::kMapa ? x : 0;
        return;
      }
      if (generic) x -= kGenericSharedBase;
      x &= kSharedWrap;
      uint64_t rank = rank_, offset = x;
      if (x >= kClusterSharedBase && (x - kClusterSharedBase) / kClusterRankStride < ranks) {
        rank = (x - kClusterSharedBase) / kClusterRankStride;
        offset = (x - kClusterSharedBase) % kClusterRankStride;
      }
      if (in.op == Op::kGetCtaRank) {
        d[l] = rank;
        return;
      }
      uint64_t m = kClusterSharedBase + (b[l] & 0xffffffffu) * kClusterRankStride + offset;
      if (generic) m += kGenericSharedBase;
      d[l] = in.type == Type::kU32 || in.type == Type::kB32 || in.type == Type::kS32
                 ? (m & 0xffffffffu)
                 : m;
    });
  }

  // A polling warp's turn ends after the instruction; the runner learns the block polled.
  int GiveUpTurn() {
    polled_ = true;
    return 0;
  }

  // Adds a warp's thread-instructions. The launch's count, which every runner shares, takes
  // them in batches (FlushCount), so runners on several threads do not contend for it at each
  // time slice; a runaway launch overruns its budget by at most a batch per runner.
  void Count(uint64_t count) {
    instructions_ += count;
    unflushed_ += count;
    if (unflushed_ >= CountBatch()) FlushCount();
  }
  // Every resident block counts on its own (up to thousands): their batches are smaller.
  uint64_t CountBatch() const {
    if (!cfg_.max_instructions) return kCountBatch;
    return std::clamp<uint64_t>(cfg_.max_instructions / 64 / s_.resident, 1, kCountBatch);
  }

  // Past the budget the launch fails.
  void FlushCount() {
    if (unflushed_ == 0) return;
    const uint64_t total =
        s_.instructions.fetch_add(unflushed_, std::memory_order_relaxed) + unflushed_;
    unflushed_ = 0;
    if (cfg_.max_instructions && total > cfg_.max_instructions)
      Fail(LaunchError::kTimeout, "kernel " + k_.name + " exceeded the budget of " +
                                      std::to_string(cfg_.max_instructions) +
                                      " thread-instructions per launch");
  }

  // The function an indirect call's target value names, or nullptr.
  const FunctionEntry* Callee(uint64_t v) const {
    if (v < kFunctionAddressBase || (v - kFunctionAddressBase) % kFunctionAddressStep)
      return nullptr;
    uint64_t id = (v - kFunctionAddressBase) / kFunctionAddressStep;
    if (id >= p_.function_by_id.size() || p_.function_by_id[id] < 0) return nullptr;
    return &p_.functions[static_cast<size_t>(p_.function_by_id[id])];
  }

  void Reschedule(Warp& w) {
    SyncActive(w, w.pc);
    Pick(w);
  }

  // ---- memory ------------------------------------------------------------------------------

  // Device memory through GlobalMemory, with a few cached translations: one translate() per
  // 4 KiB page (or 256 B block, or the exact range) instead of one per access.
  // LaunchConfig::reference: every translation is GlobalMemory::translate's, uncached.
  uint8_t* Global(uint64_t a, uint32_t size) {
    if (!reference_) {
      if (uint8_t* h = Cached(a, size)) return h;
    }
    if (a >= kDeviceAddressLimit) {
      // The grid workspace of a cooperative launch, or the device heap (not cached: its
      // buffer is created by the first malloc).
      if (cfg_.cooperative && a >= kGridWorkspaceBase && a - kGridWorkspaceBase <= 8 &&
          size <= 8 - (a - kGridWorkspaceBase))
        return reinterpret_cast<uint8_t*>(s_.workspace) + (a - kGridWorkspaceBase);
      return s_.heap->translate(a, size);
    }
    if (reference_) return mem_.translate(a, size);
    for (uint64_t block : {uint64_t{4096}, uint64_t{256}}) {
      uint64_t lo = a & ~(block - 1);
      if (a + size > lo + block) continue;
      if (uint8_t* h = mem_.translate(lo, block)) {
        Remember(lo, lo + block, h);
        return h + (a - lo);
      }
    }
    uint8_t* h = mem_.translate(a, size);
    if (h) Remember(a, a + size, h);
    return h;
  }
  // [a, a + size) through a cached translation, or nullptr.
  uint8_t* Cached(uint64_t a, uint32_t size) const {
    for (const CacheEntry& e : cache_)
      if (a >= e.lo && a - e.lo <= e.hi - e.lo && size <= e.hi - a) return e.host + (a - e.lo);
    return nullptr;
  }
  void Remember(uint64_t lo, uint64_t hi, uint8_t* host) {
    cache_[cache_next_] = CacheEntry{lo, hi, host};
    cache_next_ = (cache_next_ + 1) % kCacheEntries;
  }

  static const char* SpaceName(Space s) {
    switch (s) {
      case Space::kGeneric:
        return "generic";
      case Space::kGlobal:
        return "global";
      case Space::kConst:
        return "const";
      case Space::kShared:
        return "shared";
      case Space::kLocal:
        return "local";
      case Space::kKernelParam:
        return "param";
      case Space::kThreadParam:
        return "param";
    }
    return "?";
  }

  // Host pointer for [a, a+size) of `space` as seen by `lane`, or nullptr after failing the
  // launch with kIllegalAddress / kMisalignedAddress.
  uint8_t* Resolve(Warp& w, int lane, const Inst& in, Space space, uint64_t a, uint32_t size,
                   bool write) {
    if (space == Space::kShared) a &= kSharedWrap;  // 32-bit addresses: base + imm wraps
    // Accesses are naturally aligned on the GPU (vectors to their total size); sizes here are
    // always powers of two.
    if ((a & (size - 1)) != 0) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(a));
      Fail(LaunchError::kMisalignedAddress, std::string("misaligned ") + SpaceName(space) +
                                                " access of " + std::to_string(size) +
                                                " bytes at " + buf + Where(w, lane, in));
      return nullptr;
    }
    Space sp = space;
    uint64_t off = a;
    if (sp == Space::kGeneric) {
      if (a >= kGenericSharedBase && a - kGenericSharedBase < kGenericWindowSize) {
        sp = Space::kShared;
        off = a - kGenericSharedBase;
      } else if (a >= kGenericLocalBase && a - kGenericLocalBase < kGenericWindowSize) {
        sp = Space::kLocal;
        off = a - kGenericLocalBase;
      } else if (a >= kGenericParamBase && a - kGenericParamBase < kGenericWindowSize) {
        sp = Space::kKernelParam;
        off = a - kGenericParamBase;
      } else {
        sp = Space::kGlobal;
      }
    }
    uint8_t* p = nullptr;
    switch (sp) {
      case Space::kGlobal:
      case Space::kConst:
        p = Global(off, size);
        break;
      case Space::kShared:
        if (off <= shared_.size() && size <= shared_.size() - off)
          p = shared_.data() + off;
        else if (p_.uses_reserved_smem && off >= kReservedSharedOffset &&
                 off - kReservedSharedOffset <= kReservedSharedBytes &&
                 size <= kReservedSharedBytes - (off - kReservedSharedOffset))
          p = reserved_shared_ + (off - kReservedSharedOffset);
        else if (off >= kClusterSharedBase &&
                 (off - kClusterSharedBase) / kClusterRankStride < cluster_->ranks.size()) {
          std::vector<uint8_t>& peer =
              cluster_->ranks[(off - kClusterSharedBase) / kClusterRankStride]->shared_;
          const uint64_t o = (off - kClusterSharedBase) % kClusterRankStride;
          if (o <= peer.size() && size <= peer.size() - o) p = peer.data() + o;
        }
        break;
      case Space::kLocal:
        if (off <= p_.local_bytes && size <= p_.local_bytes - off)
          p = local_.data() + (static_cast<size_t>(w.index) * 32 + lane) * p_.local_bytes + off;
        else if (off >= kStackAllocOffset)
          p = StackBytes(w, lane, off - kStackAllocOffset, size);
        break;
      case Space::kKernelParam:
        if (!write && off <= s_.params.size() && size <= s_.params.size() - off)
          p = s_.params.data() + off;
        break;
      case Space::kThreadParam:
        if (off <= p_.thread_param_bytes && size <= p_.thread_param_bytes - off)
          p = w.tparam.data() + static_cast<size_t>(lane) * p_.thread_param_bytes + off;
        break;
      case Space::kGeneric:
        break;
    }
    if (!p) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(a));
      Fail(LaunchError::kIllegalAddress,
           std::string("illegal ") + SpaceName(space) + (write ? " write" : " read") + " of " +
               std::to_string(size) + " bytes at address " + buf + Where(w, lane, in));
    }
    return p;
  }

  // ---- device printf -----------------------------------------------------------------------

  // Host pointer for [a, a+n) of the generic space as `lane` sees it, or nullptr; never fails
  // the launch (printf reads strings byte ranges of any size and alignment).
  uint8_t* Peek(Warp& w, int lane, uint64_t a, size_t n) {
    auto in_window = [&](uint64_t base, size_t size, uint64_t* off) {
      if (a < base || a - base >= kGenericWindowSize) return false;
      *off = a - base;
      if (*off > size || n > size - *off) *off = ~uint64_t{0};
      return true;
    };
    uint64_t off = 0;
    if (in_window(kGenericSharedBase, shared_.size(), &off))
      return off == ~uint64_t{0} ? nullptr : shared_.data() + off;
    if (a >= kGenericLocalBase + kStackAllocOffset && a - kGenericLocalBase < kGenericWindowSize)
      return n > 0xffffffffu ? nullptr
                             : StackBytes(w, lane, a - kGenericLocalBase - kStackAllocOffset,
                                          static_cast<uint32_t>(n));
    if (in_window(kGenericLocalBase, p_.local_bytes, &off))
      return off == ~uint64_t{0}
                 ? nullptr
                 : local_.data() + (static_cast<size_t>(w.index) * 32 + lane) * p_.local_bytes +
                       off;
    if (in_window(kGenericParamBase, s_.params.size(), &off))
      return off == ~uint64_t{0} ? nullptr : s_.params.data() + off;
    if (n > 0xffffffffu || a + n < a) return nullptr;
    return Global(a, static_cast<uint32_t>(n));
  }

  // One vprintf per lane, in lane order, appended to the launch's printf output.
  void Vprintf(Warp& w, const Inst& in, uint32_t mask) {
    const CallSite& cs = p_.calls[in.aux];
    for (uint32_t m = mask; m; m &= m - 1) {
      int l = __builtin_ctz(m);
      uint8_t* tp = w.tparam.data() + static_cast<size_t>(l) * p_.thread_param_bytes;
      uint64_t fmt = 0, args = 0;
      std::memcpy(&fmt, tp + cs.args[0].from, cs.args[0].size);
      std::memcpy(&args, tp + cs.args[1].from, cs.args[1].size);
      DeviceReader read = [&](uint64_t a, void* dst, size_t n) {
        const uint8_t* p = Peek(w, l, a, n);
        if (p) std::memcpy(dst, p, n);
        return p != nullptr;
      };
      std::string& out = printf_;
      const size_t used = s_.printf_bytes.load(std::memory_order_relaxed) + out.size();
      size_t room = used < kPrintfBufferBytes ? kPrintfBufferBytes - used : 0;
      PrintfResult r = FormatDevicePrintf(read, fmt, args, room, &out);
      if (r.fault) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(r.fault_addr));
        Fail(LaunchError::kIllegalAddress,
             std::string("illegal read by printf at address ") + buf + Where(w, l, in));
        return;
      }
      if (!cs.results.empty()) {
        int32_t value = r.value;
        std::memcpy(tp + cs.results[0].to, &value, cs.results[0].size);
      }
    }
  }

  // Fixed-size loads and stores (a memcpy of a variable size is a library call).
  static uint64_t ReadN(const uint8_t* p, uint32_t size) {
    switch (size) {
      case 1:
        return *p;
      case 2: {
        uint16_t v;
        std::memcpy(&v, p, 2);
        return v;
      }
      case 4: {
        uint32_t v;
        std::memcpy(&v, p, 4);
        return v;
      }
      default: {
        uint64_t v;
        std::memcpy(&v, p, 8);
        return v;
      }
    }
  }
  static void WriteN(uint8_t* p, uint64_t v, uint32_t size) {
    switch (size) {
      case 1:
        *p = static_cast<uint8_t>(v);
        break;
      case 2: {
        auto x = static_cast<uint16_t>(v);
        std::memcpy(p, &x, 2);
        break;
      }
      case 4: {
        auto x = static_cast<uint32_t>(v);
        std::memcpy(p, &x, 4);
        break;
      }
      default:
        std::memcpy(p, &v, 8);
        break;
    }
  }

  // A vector access moves as one access, as on the GPU: blocks on other worker threads never
  // see half of one (CUB's single-pass scans pack a tile's status and value into one uint2 or
  // ulonglong2 and spin on it). 8 bytes and less: one move; 16: an aligned SSE move, which x86
  // processors with AVX make single-copy atomic. One side is device memory, the other a
  // 16-byte aligned buffer holding the elements as they lie in memory.
  static void MoveVector(uint8_t* to, const uint8_t* from, uint32_t total) {
    switch (total) {
      case 2:
        std::memcpy(to, from, 2);
        return;
      case 4:
        std::memcpy(to, from, 4);
        return;
      case 8:
        std::memcpy(to, from, 8);
        return;
#if defined(__SSE2__)
      case 16:
        if (((reinterpret_cast<uintptr_t>(to) | reinterpret_cast<uintptr_t>(from)) & 15) == 0) {
          _mm_store_si128(reinterpret_cast<__m128i*>(to),
                          _mm_load_si128(reinterpret_cast<const __m128i*>(from)));
          return;
        }
        break;
#endif
      default:
        break;
    }
    std::memcpy(to, from, total);
  }
  static constexpr uint32_t kMaxVectorBytes = 32;  // v4 of 64-bit elements

  // Resolve() for the common cases, inline: aligned shared memory in range, and global
  // memory in the translation cache.
  uint8_t* ResolveFast(Warp& w, int lane, const Inst& in, uint64_t a, uint32_t size, bool write) {
    if ((a & (size - 1)) == 0) {
      if (in.space == Space::kShared) {
        a &= kSharedWrap;
        if (a <= shared_.size() && size <= shared_.size() - a) return shared_.data() + a;
      } else if (in.space == Space::kGlobal ||
                 (in.space == Space::kGeneric && a < kDeviceAddressLimit)) {
        if (uint8_t* h = Cached(a, size)) return h;
      }
    }
    return Resolve(w, lane, in, in.space, a, size, write);
  }

  // Memory a whole warp's access may land in, checked once per instruction: lane l's `total`
  // bytes at a = base[l] + imm are at host + (a - lo) when a - lo <= limit and a is aligned.
  struct Window {
    uint8_t* host = nullptr;
    uint64_t lo = 0;
    uint64_t limit = 0;
    // The address's width: shared-space addresses are 32 bits, and base + imm wraps there
    // (a register holding the window's start less 8, then [r+8], is the start).
    uint64_t wrap = ~uint64_t{0};
  };

  // The window of the common cases, from the first lane's address: shared memory, or the cached
  // range of global memory holding that address (the inner loops of tiled kernels). False where
  // the access needs more; the caller then resolves lane by lane, which also reports a fault.
  bool WarpWindow(const Inst& in, uint64_t first, uint32_t total, bool write, Window* out) {
    if (in.space == Space::kShared) {
      if (shared_.size() < total) return false;
      *out = Window{shared_.data(), 0, shared_.size() - total, kSharedWrap};
      return true;
    }
    if (in.space == Space::kKernelParam) {  // read-only
      if (write || s_.params.size() < total) return false;
      *out = Window{s_.params.data(), 0, s_.params.size() - total};
      return true;
    }
    if (in.space != Space::kGlobal &&
        !(in.space == Space::kGeneric && first < kDeviceAddressLimit)) {
      return false;
    }
    for (const CacheEntry& e : cache_) {
      if (first >= e.lo && first - e.lo <= e.hi - e.lo && total <= e.hi - first) {
        // Every address of the window is below e.hi <= kDeviceAddressLimit: global memory in
        // the generic space too.
        *out = Window{e.host, e.lo, e.hi - e.lo - total};
        return true;
      }
    }
    return false;
  }

  // Whether every lane's access lies in the window, aligned.
  static bool InWindow(const Window& win, const uint64_t* base, uint64_t imm, uint32_t total,
                       uint32_t mask) {
    uint64_t bad = 0;
    for (uint32_t m = mask; m; m &= m - 1) {
      const uint64_t a = (base[__builtin_ctz(m)] + imm) & win.wrap;
      bad |= (a & (total - 1)) | static_cast<uint64_t>(a - win.lo > win.limit);
    }
    return bad == 0;
  }

  // A load (of in.vec elements) of every lane in one pass: each lane reads its (clamped, so
  // always readable) place in the window, and the pass counts as done only if no lane needed
  // the clamp or was misaligned. No destination may be the address register (a failed pass
  // writes them).
  template <class T>
  static bool LoadLanes(uint64_t* R, const Inst& in, const uint64_t* base, const Window& win,
                        uint32_t mask) {
    const uint64_t imm = static_cast<uint64_t>(in.imm);
    const uint64_t total = sizeof(T) * in.vec;
    uint64_t bad = 0;
    if (in.vec == 1) {  // the usual case, with its one destination row at hand
      uint64_t* d = R + static_cast<size_t>(in.d[0]) * 32;
      for (uint32_t m = mask; m; m &= m - 1) {
        const int l = __builtin_ctz(m);
        const uint64_t a = (base[l] + imm) & win.wrap;
        const uint64_t o = a - win.lo;
        bad |= (a & (sizeof(T) - 1)) | static_cast<uint64_t>(o > win.limit);
        T v;
        std::memcpy(&v, win.host + std::min(o, win.limit), sizeof v);
        d[l] = v;
      }
      return bad == 0;
    }
    for (uint32_t m = mask; m; m &= m - 1) {
      const int l = __builtin_ctz(m);
      const uint64_t a = (base[l] + imm) & win.wrap;
      uint64_t o = a - win.lo;
      bad |= (a & (total - 1)) | static_cast<uint64_t>(o > win.limit);
      o = std::min(o, win.limit);
      alignas(16) uint8_t buf[kMaxVectorBytes];
      MoveVector(buf, win.host + o, static_cast<uint32_t>(total));
      for (int i = 0; i < in.vec; ++i) {
        T v;
        std::memcpy(&v, buf + i * sizeof(T), sizeof v);
        R[static_cast<size_t>(in.d[i]) * 32 + l] = v;
      }
    }
    return bad == 0;
  }

  // Lane by lane, in lane order: where lanes store to one address, the highest lane's value
  // stays, as the per-lane path leaves it. Every lane was checked (InWindow).
  template <class T>
  static void StoreLanes(const uint64_t* R, const Inst& in, const uint64_t* base, const Window& win,
                         uint32_t mask) {
    const uint64_t imm = static_cast<uint64_t>(in.imm);
    if (in.vec == 1) {
      const uint64_t* v = R + static_cast<size_t>(in.d[0]) * 32;
      for (uint32_t m = mask; m; m &= m - 1) {
        const int l = __builtin_ctz(m);
        const T x = static_cast<T>(v[l]);
        std::memcpy(win.host + (((base[l] + imm) & win.wrap) - win.lo), &x, sizeof x);
      }
      return;
    }
    for (uint32_t m = mask; m; m &= m - 1) {
      const int l = __builtin_ctz(m);
      alignas(16) uint8_t buf[kMaxVectorBytes];
      for (int i = 0; i < in.vec; ++i) {
        const T x = static_cast<T>(R[static_cast<size_t>(in.d[i]) * 32 + l]);
        std::memcpy(buf + i * sizeof(T), &x, sizeof x);
      }
      MoveVector(win.host + (((base[l] + imm) & win.wrap) - win.lo), buf,
                 static_cast<uint32_t>(sizeof(T) * in.vec));
    }
  }

  template <class F>
  static bool BySize(uint32_t size, F&& f) {
    switch (size) {
      case 1:
        return f(uint8_t{});
      case 2:
        return f(uint16_t{});
      case 4:
        return f(uint32_t{});
      default:
        return f(uint64_t{});
    }
  }

  void Load(Warp& w, const Inst& in, uint32_t mask) {
    if (reference_) return LoadReference(w, in, mask);
    uint64_t* R = w.regs.data();
    const uint64_t* base = R + static_cast<size_t>(in.s[0]) * 32;
    uint32_t size = static_cast<uint32_t>(std::max(8, TypeBits(in.type)) / 8);
    uint32_t total = size * in.vec;
    bool sign = IsSigned(in.type) && size < 8;
    int bits = static_cast<int>(size) * 8;
    Window win;
    bool apart = !sign;  // no destination is the address register
    for (int i = 0; i < in.vec; ++i) apart &= in.d[i] != in.s[0];
    if (apart &&
        WarpWindow(in, base[__builtin_ctz(mask)] + static_cast<uint64_t>(in.imm), total, false,
                   &win) &&
        BySize(size, [&](auto t) { return LoadLanes<decltype(t)>(R, in, base, win, mask); })) {
      return;
    }
    for (uint32_t m = mask; m; m &= m - 1) {
      int l = __builtin_ctz(m);
      uint64_t a = base[l] + static_cast<uint64_t>(in.imm);
      const uint8_t* p = ResolveFast(w, l, in, a, total, false);
      if (!p) return;
      alignas(16) uint8_t buf[kMaxVectorBytes];
      if (in.vec > 1) {
        MoveVector(buf, p, total);
        p = buf;
      }
      for (int i = 0; i < in.vec; ++i) {
        uint64_t v = ReadN(p + i * size, size);
        if (sign) v = Trunc(static_cast<uint64_t>(Sext(v, bits)), in.dst_bits);
        R[static_cast<size_t>(in.d[i]) * 32 + l] = v;
      }
    }
  }

  void Store(Warp& w, const Inst& in, uint32_t mask) {
    if (reference_) return StoreReference(w, in, mask);
    uint64_t* R = w.regs.data();
    const uint64_t* base = R + static_cast<size_t>(in.s[0]) * 32;
    uint32_t size = static_cast<uint32_t>(std::max(8, TypeBits(in.type)) / 8);
    uint32_t total = size * in.vec;
    const uint64_t imm = static_cast<uint64_t>(in.imm);
    Window win;
    if (WarpWindow(in, base[__builtin_ctz(mask)] + imm, total, true, &win) &&
        InWindow(win, base, imm, total, mask)) {
      BySize(size, [&](auto t) {
        StoreLanes<decltype(t)>(R, in, base, win, mask);
        return true;
      });
      return;
    }
    for (uint32_t m = mask; m; m &= m - 1) {
      int l = __builtin_ctz(m);
      uint64_t a = base[l] + static_cast<uint64_t>(in.imm);
      uint8_t* p = ResolveFast(w, l, in, a, total, true);
      if (!p) return;
      if (in.vec == 1) {
        WriteN(p, R[static_cast<size_t>(in.d[0]) * 32 + l], size);
        continue;
      }
      alignas(16) uint8_t buf[kMaxVectorBytes];
      for (int i = 0; i < in.vec; ++i)
        WriteN(buf + i * size, R[static_cast<size_t>(in.d[i]) * 32 + l], size);
      MoveVector(p, buf, total);
    }
  }

  // The reference Load and Store check the fast paths above against (LaunchConfig::reference,
  // tests/ptx/fastpath_test.cc): lane by lane in lane order, each address through Resolve,
  // each element read or written on its own. A new fast path for ld/st must give the same
  // registers, bytes and fault (the first faulting lane's) as these. Out of line and cold, so
  // the fast paths compile as they would without them.
  [[gnu::noinline, gnu::cold]] void LoadReference(Warp& w, const Inst& in, uint32_t mask) {
    uint64_t* R = w.regs.data();
    const uint32_t size = static_cast<uint32_t>(std::max(8, TypeBits(in.type)) / 8);
    const bool sign = IsSigned(in.type) && size < 8;
    for (uint32_t m = mask; m; m &= m - 1) {
      const int l = __builtin_ctz(m);
      // Read before this lane's destinations, one of which may be the address register.
      const uint64_t a = R[static_cast<size_t>(in.s[0]) * 32 + l] + static_cast<uint64_t>(in.imm);
      const uint8_t* p = Resolve(w, l, in, in.space, a, size * in.vec, false);
      if (!p) return;
      uint64_t v[4];
      for (int i = 0; i < in.vec; ++i) {
        v[i] = ReadN(p + i * size, size);
        if (sign)
          v[i] = Trunc(static_cast<uint64_t>(Sext(v[i], static_cast<int>(size) * 8)), in.dst_bits);
      }
      for (int i = 0; i < in.vec; ++i) R[static_cast<size_t>(in.d[i]) * 32 + l] = v[i];
    }
  }

  [[gnu::noinline, gnu::cold]] void StoreReference(Warp& w, const Inst& in, uint32_t mask) {
    const uint64_t* R = w.regs.data();
    const uint32_t size = static_cast<uint32_t>(std::max(8, TypeBits(in.type)) / 8);
    for (uint32_t m = mask; m; m &= m - 1) {
      const int l = __builtin_ctz(m);
      const uint64_t a = R[static_cast<size_t>(in.s[0]) * 32 + l] + static_cast<uint64_t>(in.imm);
      uint8_t* p = Resolve(w, l, in, in.space, a, size * in.vec, true);
      if (!p) return;
      for (int i = 0; i < in.vec; ++i)
        WriteN(p + i * size, R[static_cast<size_t>(in.d[i]) * 32 + l], size);
    }
  }

  template <class T>
  static T ApplyAtom(AtomOp op, Type t, T old, T b, T c) {
    using S = std::make_signed_t<T>;
    switch (op) {
      case AtomOp::kAdd:
        if (t == Type::kF16 || t == Type::kBF16 || t == Type::kF16x2 || t == Type::kBF16x2) {
          // Per 16-bit half; the sum of two halves is exact in double, so rounding it to the
          // half format once gives the correctly rounded sum.
          uint64_t r = 0;
          int n = TypeBits(t) / 16;
          bool bf = t == Type::kBF16 || t == Type::kBF16x2;
          for (int i = 0; i < n; ++i) {
            uint16_t x = static_cast<uint16_t>(old >> (16 * i)),
                     y = static_cast<uint16_t>(b >> (16 * i));
            double sum = bf ? double{Bf16ToFloat(x)} + Bf16ToFloat(y)
                            : double{HalfToFloat(x)} + HalfToFloat(y);
            r |= uint64_t{ToHalfBits(t, sum, Rounding::kRn)} << (16 * i);
          }
          return static_cast<T>(r);
        }
        if (t == Type::kF32) {
          float x = BitsFloatT(static_cast<uint32_t>(old)) + BitsFloatT(static_cast<uint32_t>(b));
          uint32_t r;
          std::memcpy(&r, &x, 4);
          return static_cast<T>(r);
        }
        if (t == Type::kF64) {
          double x, y;
          uint64_t o64 = old, b64 = b;
          std::memcpy(&x, &o64, 8);
          std::memcpy(&y, &b64, 8);
          x += y;
          uint64_t r;
          std::memcpy(&r, &x, 8);
          return static_cast<T>(r);
        }
        return old + b;
      case AtomOp::kMin:
        if (IsSigned(t)) return static_cast<T>(std::min(static_cast<S>(old), static_cast<S>(b)));
        return std::min(old, b);
      case AtomOp::kMax:
        if (IsSigned(t)) return static_cast<T>(std::max(static_cast<S>(old), static_cast<S>(b)));
        return std::max(old, b);
      case AtomOp::kExch:
        return b;
      case AtomOp::kCas:
        return old == b ? c : old;
      case AtomOp::kAnd:
        return old & b;
      case AtomOp::kOr:
        return old | b;
      case AtomOp::kXor:
        return old ^ b;
      case AtomOp::kInc:
        return old >= b ? 0 : old + 1;
      case AtomOp::kDec:
        return (old == 0 || old > b) ? b : old - 1;
    }
    return old;
  }
  static float BitsFloatT(uint32_t b) {
    float f;
    std::memcpy(&f, &b, 4);
    return f;
  }

  // Read-modify-write with a host atomic, so results stay right if blocks ever run on several
  // host threads. Resolve() has checked alignment.
  template <class T>
  static T AtomicRmw(uint8_t* p, AtomOp op, Type t, T b, T c) {
    if (reinterpret_cast<uintptr_t>(p) % sizeof(T) != 0) {
      // The backend's host buffer is less aligned than the device address; no host atomic.
      T old;
      std::memcpy(&old, p, sizeof(T));
      T desired = ApplyAtom<T>(op, t, old, b, c);
      std::memcpy(p, &desired, sizeof(T));
      return old;
    }
    T* ptr = reinterpret_cast<T*>(p);
    T old = __atomic_load_n(ptr, __ATOMIC_RELAXED);
    for (;;) {
      T desired = ApplyAtom<T>(op, t, old, b, c);
      if (__atomic_compare_exchange_n(ptr, &old, desired, false, __ATOMIC_SEQ_CST,
                                      __ATOMIC_RELAXED))
        return old;
    }
  }

  void Atomic(Warp& w, const Inst& in, uint32_t mask) {
    uint64_t* R = w.regs.data();
    const uint64_t* base = R + static_cast<size_t>(in.s[0]) * 32;
    const uint64_t* b = R + static_cast<size_t>(in.s[1]) * 32;
    const uint64_t* c = in.s[2] != kNoSlot ? R + static_cast<size_t>(in.s[2]) * 32 : nullptr;
    uint64_t* d = R + static_cast<size_t>(in.has_result ? in.d[0] : kSlotSink) * 32;
    AtomOp op = static_cast<AtomOp>(in.mod);
    uint32_t size = static_cast<uint32_t>(TypeBits(in.type) / 8);
    if (in.vec > 1) {
      // atom.add.vN: element k reads value_slots[aux + k] and writes value_slots[aux + vec + k].
      const uint32_t* slots = p_.value_slots.data() + in.aux;
      for (uint32_t m = mask; m; m &= m - 1) {
        int l = __builtin_ctz(m);
        uint64_t a = base[l] + static_cast<uint64_t>(in.imm);
        uint8_t* p = Resolve(w, l, in, in.space, a, size * in.vec, true);
        if (!p) return;
        for (int k = 0; k < in.vec; ++k) {
          uint64_t v = R[static_cast<size_t>(slots[k]) * 32 + l];
          uint64_t old =
              size == 4 ? AtomicRmw<uint32_t>(p + k * 4, op, in.type, static_cast<uint32_t>(v), 0)
                        : AtomicRmw<uint16_t>(p + k * 2, op, in.type, static_cast<uint16_t>(v), 0);
          R[static_cast<size_t>(slots[in.vec + k]) * 32 + l] = old;
        }
      }
      return;
    }
    for (uint32_t m = mask; m; m &= m - 1) {
      int l = __builtin_ctz(m);
      uint64_t a = base[l] + static_cast<uint64_t>(in.imm);
      uint8_t* p = Resolve(w, l, in, in.space, a, size, true);
      if (!p) return;
      uint64_t cv = c ? c[l] : 0;
      if (size == 4)
        d[l] = AtomicRmw<uint32_t>(p, op, in.type, static_cast<uint32_t>(b[l]),
                                   static_cast<uint32_t>(cv));
      else if (size == 8)
        d[l] = AtomicRmw<uint64_t>(p, op, in.type, b[l], cv);
      else
        d[l] = AtomicRmw<uint16_t>(p, op, in.type, static_cast<uint16_t>(b[l]),
                                   static_cast<uint16_t>(cv));
    }
  }

  // ---- sm_80 additions ---------------------------------------------------------------------

  // redux.sync: each lane receives the reduction over the lanes of its membermask that execute
  // it (cooperative groups' tiles run one redux per tile with different masks at once).
  // mma.sync.aligned (MmaKind): the warp multiplies an MxK A by a KxN B and adds an MxN C,
  // each spread over the lanes in the PTX ISA's fragment layouts, with g = lane / 4 and
  // t = lane % 4. Products are exact in double precision (f16, bf16 and tf32 inputs; f64 by
  // fused multiply-adds in k order) and each result is rounded once to the accumulator type.
  // The instruction needs the whole warp; inactive lanes' registers are read as they are.
  void Mma(Warp& w, const Inst& in, uint32_t mask) {
    uint64_t* R = w.regs.data();
    auto lanes = [&](uint32_t slot) { return R + static_cast<size_t>(slot) * 32; };
    const uint32_t* v = p_.value_slots.data() + in.aux;
    const MmaKind kind = static_cast<MmaKind>(in.mod);
    if (kind == MmaKind::kM8n8k4F64) {
      // A[g][t] and B[t][g] in lane 4g+t; C/D[g][2t+i] in lane 4g+t, register i.
      const uint64_t *a = lanes(v[0]), *b = lanes(v[1]);
      const uint64_t* c[2] = {lanes(v[2]), lanes(v[3])};
      uint64_t out[2][32];
      for (int l = 0; l < 32; ++l) {
        const int g = l >> 2, t = l & 3;
        for (int i = 0; i < 2; ++i) {
          const int n = 2 * t + i;
          double acc = BitsDouble(c[i][l]);
          for (int k = 0; k < 4; ++k)
            acc = std::fma(BitsDouble(a[g * 4 + k]), BitsDouble(b[n * 4 + k]), acc);
          out[i][l] = DoubleBits(acc);
        }
      }
      for (int i = 0; i < 2; ++i) {
        uint64_t* d = lanes(in.d[i]);
        ForLanes(mask, [&](int l) { d[l] = out[i][l]; });
      }
      return;
    }
    // m16n8kK with f32 C/D: C/D[g + 8*(i/2)][2t + i%2] in lane 4g+t, register i.
    const bool k16 = kind == MmaKind::kM16n8k16F16 || kind == MmaKind::kM16n8k16Bf16;
    const bool tf32 = kind == MmaKind::kM16n8k8Tf32;
    const bool bf16 = kind == MmaKind::kM16n8k16Bf16 || kind == MmaKind::kM16n8k8Bf16;
    const int K = k16 ? 16 : 8;
    const size_t na = k16 || tf32 ? 4 : 2, nb = k16 || tf32 ? 2 : 1;
    double A[16][16], B[16][8];
    auto half = [&](uint64_t reg, int which) {
      const uint16_t h = static_cast<uint16_t>(reg >> (16 * which));
      return static_cast<double>(bf16 ? Bf16ToFloat(h) : HalfToFloat(h));
    };
    auto tf = [](uint64_t reg) {  // the low 13 mantissa bits are not part of a tf32
      return static_cast<double>(BitsFloat(static_cast<uint32_t>(reg) & 0xffffe000u));
    };
    for (int l = 0; l < 32; ++l) {
      const int g = l >> 2, t = l & 3;
      if (tf32) {
        // a0: [g][t], a1: [g+8][t], a2: [g][t+4], a3: [g+8][t+4]; b0: [t][g], b1: [t+4][g].
        for (size_t r = 0; r < na; ++r) A[g + 8 * (r & 1)][t + 4 * (r >> 1)] = tf(lanes(v[r])[l]);
        for (size_t r = 0; r < nb; ++r) B[t + 4 * r][g] = tf(lanes(v[na + r])[l]);
      } else {
        // Register r holds elements 2r (low half) and 2r+1: A element i sits at row
        // g + 8*((i/2)%2), column 2t + i%2 + 8*(i/4); B element i at row 2t + i%2 + 8*(i/2),
        // column g.
        for (size_t r = 0; r < na; ++r)
          for (int h = 0; h < 2; ++h) {
            const int i = static_cast<int>(2 * r) + h;
            A[g + 8 * ((i >> 1) & 1)][2 * t + (i & 1) + 8 * (i >> 2)] = half(lanes(v[r])[l], h);
          }
        for (size_t r = 0; r < nb; ++r)
          for (int h = 0; h < 2; ++h) {
            const int i = static_cast<int>(2 * r) + h;
            B[2 * t + (i & 1) + 8 * (i >> 1)][g] = half(lanes(v[na + r])[l], h);
          }
      }
    }
    uint64_t out[4][32];
    for (int l = 0; l < 32; ++l) {
      const int g = l >> 2, t = l & 3;
      for (int i = 0; i < 4; ++i) {
        const int row = g + 8 * (i >> 1), n = 2 * t + (i & 1);
        double acc = BitsFloat(static_cast<uint32_t>(lanes(v[na + nb + i])[l]));
        for (int k = 0; k < K; ++k) acc += A[row][k] * B[k][n];
        out[i][l] = FloatBits(static_cast<float>(acc));
      }
    }
    for (int i = 0; i < 4; ++i) {
      uint64_t* d = lanes(in.d[i]);
      ForLanes(mask, [&](int l) { d[l] = out[i][l]; });
    }
  }

  // ldmatrix.sync.aligned.m8n8.xN[.trans].b16: lanes 8j..8j+7 give the addresses of matrix j's
  // eight 16-byte rows; lane 4g+t receives row g, columns 2t and 2t+1 of each matrix (with
  // .trans, column g, rows 2t and 2t+1), the lower column or row in the low half.
  void Ldmatrix(Warp& w, const Inst& in, uint32_t mask) {
    uint64_t* R = w.regs.data();
    const uint64_t* addr = R + static_cast<size_t>(in.s[0]) * 32;
    uint16_t m[4][8][8];
    for (int j = 0; j < in.vec; ++j) {
      for (int r = 0; r < 8; ++r) {
        const int l = j * 8 + r;
        const uint8_t* p =
            Resolve(w, l, in, in.space, addr[l] + static_cast<uint64_t>(in.imm), 16, false);
        if (!p) return;
        std::memcpy(m[j][r], p, 16);
      }
    }
    for (int j = 0; j < in.vec; ++j) {
      uint64_t* d = R + static_cast<size_t>(in.d[j]) * 32;
      ForLanes(mask, [&](int l) {
        const int g = l >> 2, t = l & 3;
        const uint16_t lo = in.mod ? m[j][2 * t][g] : m[j][g][2 * t];
        const uint16_t hi = in.mod ? m[j][2 * t + 1][g] : m[j][g][2 * t + 1];
        d[l] = static_cast<uint32_t>(lo) | static_cast<uint32_t>(hi) << 16;
      });
    }
  }

  // cvt.{rna,rn,rz}.tf32.f32: keep 10 mantissa bits (rna: ties away from zero, rn: to even,
  // rz: truncate); NaN and infinity pass through.
  static uint32_t ToTf32(uint32_t f, Rounding rnd) {
    if ((f & 0x7f800000u) == 0x7f800000u) return (f & 0x007fffffu) ? 0x7fffffffu : f;
    const uint32_t low = f & 0x1fffu;
    uint32_t kept = f & ~0x1fffu;
    const bool up = rnd == Rounding::kRna  ? low >= 0x1000u
                    : rnd == Rounding::kRn ? (low > 0x1000u || (low == 0x1000u && (kept & 0x2000u)))
                                           : false;
    if (up) kept += 0x2000u;  // may carry into the exponent, rounding up to infinity
    return kept;
  }

  void Redux(Warp& w, const Inst& in, uint32_t mask) {
    if (!mask) return;
    uint64_t* R = w.regs.data();
    const uint64_t* a = R + static_cast<size_t>(in.s[0]) * 32;
    const uint64_t* members = R + static_cast<size_t>(in.s[1]) * 32;
    uint64_t* d = R + static_cast<size_t>(in.d[0]) * 32;
    uint32_t group[32];
    uint32_t result[32];
    ForLanes(mask, [&](int l) { group[l] = static_cast<uint32_t>(members[l]) & mask; });
    ForLanes(mask, [&](int l) {
      // Lanes sharing a membermask share the result; compute it once per group.
      int first = __builtin_ctz(group[l] | (1u << l));
      if (first < l && group[first] == group[l] && ((mask >> first) & 1)) {
        result[l] = result[first];
        return;
      }
      result[l] = ReduceLanes(in, a, group[l] ? group[l] : (1u << l));
    });
    ForLanes(mask, [&](int l) { d[l] = result[l]; });
  }

  static uint32_t ReduceLanes(const Inst& in, const uint64_t* a, uint32_t lanes) {
    AtomOp op = static_cast<AtomOp>(in.mod);
    bool sign = in.type == Type::kS32;
    bool first = true;
    uint32_t acc = 0;
    ForLanes(lanes, [&](int l) {
      uint32_t v = static_cast<uint32_t>(a[l]);
      if (first) {
        acc = v;
        first = false;
        return;
      }
      switch (op) {
        case AtomOp::kAdd:
          acc += v;
          break;
        case AtomOp::kMin:
          acc = sign ? static_cast<uint32_t>(
                           std::min(static_cast<int32_t>(acc), static_cast<int32_t>(v)))
                     : std::min(acc, v);
          break;
        case AtomOp::kMax:
          acc = sign ? static_cast<uint32_t>(
                           std::max(static_cast<int32_t>(acc), static_cast<int32_t>(v)))
                     : std::max(acc, v);
          break;
        case AtomOp::kAnd:
          acc &= v;
          break;
        case AtomOp::kOr:
          acc |= v;
          break;
        default:
          acc ^= v;
          break;
      }
    });
    return acc;
  }

  void CpAsync(Warp& w, const Inst& in, uint32_t mask) {
    uint64_t* R = w.regs.data();
    const uint64_t* dst = R + static_cast<size_t>(in.s[0]) * 32;
    const uint64_t* src = R + static_cast<size_t>(in.s[1]) * 32;
    const uint64_t* n = R + static_cast<size_t>(in.s[2]) * 32;
    uint32_t size = in.vec;
    int64_t src_off = static_cast<int32_t>(in.aux);
    for (uint32_t m = mask; m; m &= m - 1) {
      int l = __builtin_ctz(m);
      // Bytes read from the source; the rest of the destination is zero-filled.
      uint64_t want = in.mod == 0 ? n[l] : (((n[l] != 0) != (in.mod == 2)) ? 0 : size);
      uint32_t read = static_cast<uint32_t>(std::min<uint64_t>(want, size));
      uint8_t tmp[16] = {};
      if (read) {
        const uint8_t* p =
            Resolve(w, l, in, Space::kGlobal, src[l] + static_cast<uint64_t>(src_off), size, false);
        if (!p) return;
        std::memcpy(tmp, p, read);
      }
      uint8_t* q =
          Resolve(w, l, in, Space::kShared, dst[l] + static_cast<uint64_t>(in.imm), size, true);
      if (!q) return;
      std::memcpy(q, tmp, size);
    }
  }

  // ---- device heap (malloc/free) and alloca ------------------------------------------------

  void HeapCall(Warp& w, const Inst& in, uint32_t mask) {
    const CallSite& cs = p_.calls[in.aux];
    for (uint32_t m = mask; m; m &= m - 1) {
      int l = __builtin_ctz(m);
      uint8_t* tp = w.tparam.data() + static_cast<size_t>(l) * p_.thread_param_bytes;
      uint64_t arg = 0;
      std::memcpy(&arg, tp + cs.args[0].from, cs.args[0].size);
      if (in.op == Op::kMalloc) {
        uint64_t ptr = HeapAlloc(arg);
        std::memcpy(tp + cs.results[0].to, &ptr, cs.results[0].size);
      } else if (arg != 0 && !HeapFree(arg)) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(arg));
        Fail(LaunchError::kIllegalAddress,
             std::string("free of ") + buf + ", which malloc did not return" + Where(w, l, in));
        return;
      }
    }
  }

  // A conditional handle is its cell's address (sim_gpu.h: cuGraphConditionalHandleCreate); a
  // handle that is no memory of the launch faults like any store.
  void SetConditional(Warp& w, const Inst& in, uint32_t mask) {
    const CallSite& cs = p_.calls[in.aux];
    for (uint32_t m = mask; m; m &= m - 1) {
      int l = __builtin_ctz(m);
      const uint8_t* tp = w.tparam.data() + static_cast<size_t>(l) * p_.thread_param_bytes;
      uint64_t handle = 0;
      uint32_t value = 0;
      std::memcpy(&handle, tp + cs.args[0].from, cs.args[0].size);
      std::memcpy(&value, tp + cs.args[1].from, cs.args[1].size);
      uint8_t* q = Resolve(w, l, in, Space::kGlobal, handle, sizeof value, true);
      if (!q) return;
      std::memcpy(q, &value, sizeof value);
    }
  }

  uint64_t HeapAlloc(uint64_t size) { return s_.heap->alloc(size); }
  bool HeapFree(uint64_t ptr) { return s_.heap->free(ptr); }

  // [off, off+size) of `lane`'s alloca stack, or nullptr if it is not allocated.
  uint8_t* StackBytes(Warp& w, int lane, uint64_t off, uint32_t size) {
    if (off > w.alloc_top[lane] || size > w.alloc_top[lane] - off) return nullptr;
    return w.alloc_stack[lane].data() + off;
  }

  void StackAlloc(Warp& w, const Inst& in, uint32_t mask) {
    uint64_t* R = w.regs.data();
    uint64_t* d = R + static_cast<size_t>(in.d[0]) * 32;
    const uint64_t* a = in.s[0] != kNoSlot ? R + static_cast<size_t>(in.s[0]) * 32 : nullptr;
    int bits = TypeBits(in.type);
    for (uint32_t m = mask; m; m &= m - 1) {
      int l = __builtin_ctz(m);
      if (in.op == Op::kStackSave) {
        d[l] = Trunc(kStackAllocOffset + w.alloc_top[l], bits);
      } else if (in.op == Op::kStackRestore) {
        uint64_t v = Trunc(a[l], bits);
        if (v >= kStackAllocOffset && v - kStackAllocOffset <= w.alloc_top[l])
          w.alloc_top[l] = static_cast<uint32_t>(v - kStackAllocOffset);
      } else {
        uint64_t align = static_cast<uint64_t>(in.imm);
        uint64_t at = (w.alloc_top[l] + align - 1) / align * align;
        uint64_t size = Trunc(a[l], bits);
        if (size > kStackAllocLimit || at + size > kStackAllocLimit) {
          Fail(LaunchError::kIllegalAddress,
               "stack overflow: alloca of " + std::to_string(size) + " bytes exceeds the " +
                   std::to_string(kStackAllocLimit) + "-byte per-thread limit" + Where(w, l, in));
          return;
        }
        std::vector<uint8_t>& st = w.alloc_stack[l];
        if (st.size() < at + size)
          st.resize(std::max<size_t>(at + size, std::min<size_t>(kStackAllocLimit, st.size() * 2)));
        w.alloc_top[l] = static_cast<uint32_t>(at + size);
        d[l] = Trunc(kStackAllocOffset + at, bits);
      }
    }
  }

  void Cvta(Warp& w, const Inst& in, uint32_t mask) {
    uint64_t* R = w.regs.data();
    uint64_t* d = R + static_cast<size_t>(in.d[0]) * 32;
    const uint64_t* a = R + static_cast<size_t>(in.s[0]) * 32;
    Space sp = static_cast<Space>(in.mod);
    uint64_t base = 0;
    if (sp == Space::kShared) base = kGenericSharedBase;
    if (sp == Space::kLocal) base = kGenericLocalBase;
    if (sp == Space::kKernelParam) base = kGenericParamBase;
    int w_bits = TypeBits(in.type);
    ForLanes(mask, [&](int l) {
      uint64_t v = a[l];
      if (in.op == Op::kCvta) {
        d[l] = Trunc(v + base, w_bits);
      } else if (in.op == Op::kCvtaTo) {
        d[l] = Trunc(v - base, w_bits);
      } else {  // isspacep
        bool in_space;
        if (base)
          in_space = v >= base && v - base < kGenericWindowSize;
        else
          in_space = v < kDeviceAddressLimit ||
                     (v >= kGenericHeapBase && v - kGenericHeapBase < kGenericWindowSize);
        d[l] = in_space;
      }
    });
  }

  void ReadClock(Warp& w, const Inst& in, uint32_t mask, uint64_t count) {
    uint64_t* d = w.regs.data() + static_cast<size_t>(in.d[0]) * 32;
    // %clock counts interpreted thread-instructions, plus kClockReadCycles for each read
    // before this one: deterministic and monotonic per thread. The sim runs a block's warps
    // one after another, so a warp spinning on the clock sees only its own instructions
    // advance it; the per-read step stands for what the rest of the SM would run meanwhile,
    // and keeps a wait of N cycles to about N / kClockReadCycles turns of its loop.
    uint64_t clk = instructions_ + count + clock_reads_ * kClockReadCycles;
    ++clock_reads_;
    uint64_t ns = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                            std::chrono::system_clock::now().time_since_epoch())
                                            .count());
    uint64_t v = 0;
    switch (in.aux) {
      case 0:
        v = Trunc(clk, 32);
        break;
      case 1:
        v = clk;
        break;
      case 2:
        v = ns;
        break;
      case 3:
        v = Trunc(clk >> 32, 32);
        break;
      case 4:
        v = Trunc(ns, 32);
        break;
      default:
        v = Trunc(ns >> 32, 32);
        break;
    }
    ForLanes(mask, [&](int l) { d[l] = Trunc(v, TypeBits(in.type)); });
  }

  // ---- textures and surfaces ---------------------------------------------------------------

  static std::string Hex(uint64_t v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
    return buf;
  }

  uint64_t Handle(const Warp& w, const TextureOp& t, int lane) const {
    if (t.handle != kNoSlot) return w.regs[static_cast<size_t>(t.handle) * 32 + lane];
    uint64_t h = 0;  // the decoder checked that the parameter has 8 bytes
    std::memcpy(&h, s_.params.data() + t.handle_param, 8);
    return h;
  }

  // The object a handle names, or nullptr after failing the launch. The last one found is
  // remembered: a kernel almost always uses one handle for a whole warp.
  const TextureObject* FindTexture(Warp& w, int lane, const Inst& in, uint64_t h) {
    if (texture_ && h == texture_handle_) return texture_;
    return Remember(w, lane, in, h, mem_.texture(h), "texture", &texture_, &texture_handle_);
  }

  const SurfaceObject* FindSurface(Warp& w, int lane, const Inst& in, uint64_t h) {
    if (surface_ && h == surface_handle_) return surface_;
    return Remember(w, lane, in, h, mem_.surface(h), "surface", &surface_, &surface_handle_);
  }

  // FindTexture/FindSurface past the remembered one: `found` (what h names, of `kind`) checked
  // and remembered, or nullptr after failing the launch.
  template <class Object>
  const Object* Remember(Warp& w, int lane, const Inst& in, uint64_t h, const Object* found,
                         const char* kind, const Object** last, uint64_t* last_handle) {
    std::string why;
    if (!found) {
      Fail(LaunchError::kIllegalAddress,
           "handle " + Hex(h) + " does not name a " + kind + " object" + Where(w, lane, in));
      return nullptr;
    }
    if (!ValidObject(*found, &why)) {
      Fail(LaunchError::kIllegalAddress,
           std::string(kind) + " object " + Hex(h) + " " + why + Where(w, lane, in));
      return nullptr;
    }
    *last = found;
    *last_handle = h;
    return found;
  }

  void TextureAccess(Warp& w, const Inst& in, uint32_t mask) {
    const TextureOp& t = p_.texture_ops[in.aux];
    uint64_t* R = w.regs.data();
    auto reg = [&](uint32_t slot, int lane) -> uint64_t& {
      return R[static_cast<size_t>(slot) * 32 + lane];
    };
    bool surface = in.op == Op::kSuq || in.op == Op::kSuld || in.op == Op::kSust;
    for (uint32_t m = mask; m; m &= m - 1) {
      int l = __builtin_ctz(m);
      uint64_t h = Handle(w, t, l);
      if (!surface) {
        const TextureObject* tex = FindTexture(w, l, in, h);
        if (!tex) return;
        if (in.op == Op::kTxq) {
          reg(in.d[0], l) = QueryTexture(*tex, t.query, static_cast<uint32_t>(reg(t.lod, l)));
          continue;
        }
        TexCoord c;
        c.integer = t.int_coords;
        for (int a = 0; a < 3; ++a) {
          uint32_t v = static_cast<uint32_t>(reg(t.coord[a], l));
          c.f[a] = BitsFloat(v);
          c.i[a] = static_cast<int32_t>(v);
        }
        c.layer = static_cast<uint32_t>(reg(t.layer, l));
        c.lod_mode = t.lod_mode;
        if (t.lod_mode == TexLod::kLevel) {
          uint32_t v = static_cast<uint32_t>(reg(t.lod, l));
          c.lod = t.lod_int ? static_cast<float>(static_cast<int32_t>(v)) : BitsFloat(v);
        } else if (t.lod_mode == TexLod::kGrad) {
          for (int a = 0; a < 3; ++a) {
            c.dpdx[a] = BitsFloat(static_cast<uint32_t>(reg(t.dpdx[a], l)));
            c.dpdy[a] = BitsFloat(static_cast<uint32_t>(reg(t.dpdy[a], l)));
          }
        }
        uint32_t out[4];
        bool ok = in.op == Op::kTex ? SampleTexture(*tex, c, out)
                                    : GatherTexture(*tex, c, t.component, out);
        if (!ok) {
          Fail(LaunchError::kIllegalAddress,
               "texture object " + Hex(h) + ": texel outside its memory" + Where(w, l, in));
          return;
        }
        for (int i = 0; i < 4; ++i) reg(in.d[i], l) = out[i];
        if (t.sparse != kNoSlot) reg(t.sparse, l) = 1;
        continue;
      }
      const SurfaceObject* surf = FindSurface(w, l, in, h);
      if (!surf) return;
      if (in.op == Op::kSuq) {
        reg(in.d[0], l) = QuerySurface(*surf, t.query);
        continue;
      }
      SurfaceCoord c;
      c.x = static_cast<int32_t>(reg(t.coord[0], l));
      c.y = static_cast<int32_t>(reg(t.coord[1], l));
      c.z = static_cast<int32_t>(reg(t.coord[2], l));
      c.layer = static_cast<uint32_t>(reg(t.layer, l));
      uint32_t size = uint32_t{t.elem_bytes} * in.vec;
      uint8_t* p = nullptr;
      bool store = in.op == Op::kSust;
      SurfaceAccess access = ResolveSurface(*surf, c, size, t.clamp, &p);
      if (access == SurfaceAccess::kOk) {
        for (int i = 0; i < in.vec; ++i) {
          if (store) {
            uint64_t v = reg(in.s[i], l);
            std::memcpy(p + i * t.elem_bytes, &v, t.elem_bytes);
          } else {
            uint64_t v = 0;
            std::memcpy(&v, p + i * t.elem_bytes, t.elem_bytes);
            reg(in.d[i], l) = v;
          }
        }
        continue;
      }
      if (access == SurfaceAccess::kSkip) {
        if (!store)
          for (int i = 0; i < in.vec; ++i) reg(in.d[i], l) = 0;
        continue;
      }
      std::string what = std::string(store ? "write" : "read") + " of " + std::to_string(size) +
                         " bytes at x=" + std::to_string(c.x) + " bytes, y=" + std::to_string(c.y) +
                         ", z=" + std::to_string(c.z) + ", layer=" + std::to_string(c.layer) +
                         " of surface object " + Hex(h);
      if (access == SurfaceAccess::kMisaligned)
        Fail(LaunchError::kMisalignedAddress, "misaligned surface " + what + Where(w, l, in));
      else if (access == SurfaceAccess::kOutOfRange)
        Fail(LaunchError::kIllegalAddress, "out-of-range surface " + what + Where(w, l, in));
      else
        Fail(LaunchError::kIllegalAddress,
             "surface " + what + " is outside its memory" + Where(w, l, in));
      return;
    }
  }

  // ---- warp-level --------------------------------------------------------------------------

  void Shfl(Warp& w, const Inst& in, uint32_t mask) {
    uint64_t* R = w.regs.data();
    const uint64_t* a = R + static_cast<size_t>(in.s[0]) * 32;
    const uint64_t* b = R + static_cast<size_t>(in.s[1]) * 32;
    const uint64_t* c = R + static_cast<size_t>(in.s[2]) * 32;
    uint64_t* d = R + static_cast<size_t>(in.d[0]) * 32;
    uint64_t* p = in.d[1] != kNoSlot ? R + static_cast<size_t>(in.d[1]) * 32 : nullptr;
    ShflMode mode = static_cast<ShflMode>(in.mod);
    uint64_t src[32];
    std::memcpy(src, a, sizeof src);  // all reads happen before any write
    uint64_t out[32];
    uint32_t pred = 0;
    ForLanes(mask, [&](int l) {
      int lane = l;
      int bval = static_cast<int>(b[l] & 0x1f);
      int cval = static_cast<int>(c[l] & 0x1f);
      int segmask = static_cast<int>((c[l] >> 8) & 0x1f);
      int max_lane = (lane & segmask) | (cval & ~segmask);
      int min_lane = lane & segmask;
      int j = lane;
      bool pval = false;
      switch (mode) {
        case ShflMode::kUp:
          j = lane - bval;
          pval = j >= max_lane;
          break;
        case ShflMode::kDown:
          j = lane + bval;
          pval = j <= max_lane;
          break;
        case ShflMode::kBfly:
          j = lane ^ bval;
          pval = j <= max_lane;
          break;
        case ShflMode::kIdx:
          j = min_lane | (bval & ~segmask);
          pval = j <= max_lane;
          break;
      }
      if (!pval || j < 0 || j > 31) j = lane;
      out[l] = Trunc(src[j], 32);
      if (pval) pred |= 1u << l;
    });
    ForLanes(mask, [&](int l) {
      d[l] = out[l];
      if (p) p[l] = (pred >> l) & 1;
    });
  }

  void Vote(Warp& w, const Inst& in, uint32_t mask) {
    uint64_t* R = w.regs.data();
    const uint64_t* a = R + static_cast<size_t>(in.s[0]) * 32;
    uint64_t* d = R + static_cast<size_t>(in.d[0]) * 32;
    bool neg = in.vec != 0;
    uint32_t ballot = 0;
    ForLanes(mask, [&](int l) {
      if ((a[l] != 0) != neg) ballot |= 1u << l;
    });
    uint64_t v = 0;
    switch (static_cast<VoteMode>(in.mod)) {
      case VoteMode::kAll:
        v = ballot == mask;
        break;
      case VoteMode::kAny:
        v = ballot != 0;
        break;
      case VoteMode::kUni:
        v = ballot == 0 || ballot == mask;
        break;
      case VoteMode::kBallot:
        v = ballot;
        break;
    }
    ForLanes(mask, [&](int l) { d[l] = v; });
  }

  void Match(Warp& w, const Inst& in, uint32_t mask) {
    uint64_t* R = w.regs.data();
    const uint64_t* a = R + static_cast<size_t>(in.s[0]) * 32;
    uint64_t* d = R + static_cast<size_t>(in.d[0]) * 32;
    uint64_t* p = in.d[1] != kNoSlot ? R + static_cast<size_t>(in.d[1]) * 32 : nullptr;
    int bits = TypeBits(in.type);
    uint64_t vals[32];
    ForLanes(mask, [&](int l) { vals[l] = Trunc(a[l], bits); });
    uint32_t out[32] = {};
    ForLanes(mask, [&](int l) {
      uint32_t same = 0;
      ForLanes(mask, [&](int k) {
        if (vals[k] == vals[l]) same |= 1u << k;
      });
      out[l] = same;
    });
    bool all = true;
    ForLanes(mask, [&](int l) { all = all && out[l] == mask; });
    ForLanes(mask, [&](int l) {
      if (in.op == Op::kMatchAny) {
        d[l] = out[l];
      } else {
        d[l] = all ? mask : 0;
        if (p) p[l] = all;
      }
    });
  }

  struct CacheEntry {
    uint64_t lo = 0, hi = 0;  // empty: matches no access of size >= 1
    uint8_t* host = nullptr;
  };
  static constexpr int kCacheEntries = 4;

  LaunchShared& s_;
  const Program& p_;
  const KernelInfo& k_;
  const LaunchConfig& cfg_;
  const std::unordered_map<std::string, uint64_t>& vars_;
  GlobalMemory& mem_;
  const bool reference_ = cfg_.reference;  // LaunchConfig::reference: no fast paths
  bool failed_ = false;
  uint64_t instructions_ = 0;  // this runner's (%clock)
  uint64_t unflushed_ = 0;     // counted, not yet added to the launch's (FlushCount)
  static constexpr uint64_t kCountBatch = uint64_t{1} << 16;
  uint64_t clock_reads_ = 0;  // warp reads of %clock/%clock64 by this runner
  uint8_t reserved_shared_[kReservedSharedBytes] = {};  // at kReservedSharedOffset
  uint64_t block_ = 0;                                  // linear index of the block being run
  uint32_t bx_ = 0, by_ = 0, bz_ = 0;
  int slice_ = kTimeSlice;           // each warp's turn in this round (see kFirstSlice)
  ClusterState* cluster_ = nullptr;  // the block's cluster (itself alone without clusters)
  uint32_t rank_ = 0;                // its rank there
  bool polled_ = false;  // a warp gave up its turn polling (see kPollsPerTurn) this round
  std::string printf_;   // the block's printf output
  // bar.red accumulators for the barrier generation in progress.
  uint64_t red_count_ = 0;
  bool red_all_ = true;
  bool red_any_ = false;
  uint8_t red_mode_ = 0;
  std::vector<uint8_t> shared_;
  std::vector<uint8_t> local_;
  std::vector<Warp> warps_;
  CacheEntry cache_[kCacheEntries];
  int cache_next_ = 0;
  // Last texture / surface object found, by handle (valid for the whole launch).
  const TextureObject* texture_ = nullptr;
  uint64_t texture_handle_ = 0;
  const SurfaceObject* surface_ = nullptr;
  uint64_t surface_handle_ = 0;
};

// Thread-instructions a runner runs without a block finishing before it takes another block
// beside those it holds.
constexpr uint64_t kAdmitAfter = uint64_t{1} << 20;

// One cluster's blocks (one block without clusters) resident on a runner.
struct Resident {
  ClusterState cluster;
  std::vector<std::unique_ptr<GridRun>> blocks;  // by rank
  std::vector<uint8_t> done;                     // by rank: the block finished
  size_t left = 0;                               // blocks not finished
  int stalled = 0;                               // rounds in a row in which nothing ran
};

// One runner's share of a launch: a window of resident clusters (blocks, without clusters)
// whose blocks take turns (a Step each: a turn for each of its warps), refilled in order as
// clusters finish. All runners together hold at most LaunchShared::resident blocks. A window
// starts at `first` clusters and doubles when every block in it polled in the last round
// (they wait for something), or when none finished over the last kAdmitAfter
// thread-instructions (they run long, or wait without polling). A grid of ordinary blocks thus
// runs them one after another per runner (no switching, one block's state in cache), while
// blocks that wait for each other are soon all resident and advancing, whichever runners hold
// them. A cluster's blocks are held and released together, on one runner, so they reach each
// other's shared memory from one thread.
void RunResident(LaunchShared& s, uint64_t first) {
  const uint32_t csize = s.cluster_size;
  std::vector<std::unique_ptr<Resident>> window, spare_units;
  std::vector<std::unique_ptr<GridRun>> spare;  // finished blocks' runs, to reuse
  uint64_t admit = first;
  bool drained = false;  // no cluster is left to take
  uint64_t since = 0;    // thread-instructions run since a cluster finished or was admitted
  for (;;) {
    while (!drained && window.size() < admit) {
      if (s.failed.load(std::memory_order_relaxed)) return;
      if (s.held.fetch_add(csize, std::memory_order_relaxed) + csize > s.resident) {
        s.held.fetch_sub(csize, std::memory_order_relaxed);  // the device is full: later
        break;
      }
      const uint64_t i = s.next_block.fetch_add(csize, std::memory_order_relaxed);
      if (i >= s.total_blocks) {
        s.held.fetch_sub(csize, std::memory_order_relaxed);
        drained = true;
        break;
      }
      std::unique_ptr<Resident> u;
      if (spare_units.empty()) {
        u = std::make_unique<Resident>();
      } else {
        u = std::move(spare_units.back());
        spare_units.pop_back();
      }
      u->cluster.phase = u->cluster.arrived = 0;  // (a reused unit keeps its vectors' room)
      u->cluster.ranks.resize(csize);
      u->blocks.resize(csize);
      u->done.assign(csize, 0);
      u->left = csize;
      u->stalled = 0;
      for (uint32_t r = 0; r < csize; ++r) {
        std::unique_ptr<GridRun>& b = u->blocks[r];
        if (spare.empty()) {
          b = std::make_unique<GridRun>(s);
          b->Setup();
        } else {
          b = std::move(spare.back());
          spare.pop_back();
        }
        u->cluster.ranks[r] = b.get();
      }
      for (uint32_t r = 0; r < csize; ++r) u->blocks[r]->StartBlock(i + r, &u->cluster);
      window.push_back(std::move(u));
      since = 0;
    }
    if (window.empty()) return;  // all taken, or every resident place is another runner's
    bool all_polled = true;
    size_t kept = 0;
    for (size_t k = 0; k < window.size(); ++k) {
      Resident& u = *window[k];
      uint64_t ran = 0;
      for (uint32_t r = 0; r < csize; ++r) {
        if (u.done[r]) continue;
        GridRun& b = *u.blocks[r];
        const uint64_t before = b.ran();
        const bool more = b.Step();
        ran += b.ran() - before;
        if (more) {
          all_polled = all_polled && b.polled();
          continue;
        }
        if (!b.FinishBlock()) return;  // the launch failed
        u.done[r] = 1;
        --u.left;
      }
      since += ran;
      if (u.left) {
        // Threads that exited count as arrived at the cluster barrier; a cluster (a block
        // alone: a launch without clusters is one of 1x1x1 each) that runs nothing for three
        // rounds waits there for threads that never arrive.
        u.blocks[0]->CompleteClusterPhase();
        u.stalled = ran ? 0 : u.stalled + 1;
        if (u.stalled > 2) {
          u.blocks[0]->ClusterDeadlock();
          return;
        }
        window[kept++] = std::move(window[k]);
        continue;
      }
      s.held.fetch_sub(csize, std::memory_order_relaxed);
      for (std::unique_ptr<GridRun>& b : u.blocks) spare.push_back(std::move(b));
      spare_units.push_back(std::move(window[k]));
      since = 0;
    }
    window.resize(kept);
    if (kept && (all_polled || since >= kAdmitAfter)) {
      admit = std::min(s.resident / csize, std::max<uint64_t>(admit, kept) * 2);
      since = 0;
    }
  }
}

void RunGrid(LaunchShared& s) {
  // Blocks held at once: every block of a cooperative launch; else the caller's figure (the
  // profile's occupancy), or one per runner where it gives none; whole clusters, at least one.
  uint64_t threads = 1;
  if (s.cfg.pool && s.cfg.max_threads >= 2)
    threads = std::min<uint64_t>(s.cfg.pool->threads(), s.cfg.max_threads);
  const uint64_t blocks = std::max<uint64_t>(s.total_blocks, 1);
  const uint64_t csize = s.cluster_size;
  uint64_t resident = s.cfg.resident_blocks ? s.cfg.resident_blocks : threads * csize;
  if (s.cfg.cooperative) resident = blocks;
  resident = std::clamp<uint64_t>(resident, csize, std::max(blocks, csize));
  s.resident = resident / csize * csize;
  const uint64_t clusters = s.resident / csize;
  const uint64_t runners = std::min(threads, clusters);
  // A cooperative launch starts with its blocks spread over the runners (the window of one
  // whose helpers do not come still grows to hold every block).
  const uint64_t first = s.cfg.cooperative ? (clusters + runners - 1) / runners : 1;
  const auto job = [&s, first] { RunResident(s, first); };
  if (runners < 2) return job();
  s.cfg.pool->run(static_cast<unsigned>(runners - 1), job);
}

}  // namespace

LaunchResult RunKernel(const Program& program, const KernelInfo& kernel, const LaunchConfig& config,
                       const std::unordered_map<std::string, uint64_t>& variable_addresses,
                       GlobalMemory& memory) {
  try {
    LaunchShared s(program, kernel, config, variable_addresses, memory);
    if (GridRun(s).Prepare()) RunGrid(s);
    LaunchResult r;
    {
      std::lock_guard lock(s.mu);
      r = std::move(s.result);
      for (auto& [block, text] : s.printf_by_block) {
        size_t room = kPrintfBufferBytes - std::min(kPrintfBufferBytes, r.printf_output.size());
        r.printf_output.append(text, 0, std::min(room, text.size()));
      }
    }
    r.instructions = s.instructions.load();
    return r;
  } catch (const std::bad_alloc&) {  // also std::length_error, below
    // The host could not hold the launch's registers, local or shared memory.
    LaunchResult r;
    r.error = LaunchError::kOutOfResources;
    r.message = "kernel " + kernel.name + ": out of host memory for the launch";
    return r;
  } catch (const std::length_error&) {
    LaunchResult r;
    r.error = LaunchError::kOutOfResources;
    r.message = "kernel " + kernel.name + ": out of host memory for the launch";
    return r;
  }
}

}  // namespace cuwire::ptx
