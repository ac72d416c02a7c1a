// The interpreter's fast paths against its plain per-lane reference (LaunchConfig::reference),
// on generated PTX: each kernel runs both ways on identical fresh memory, and the two runs must
// fail alike (error, message, instruction count) and leave identical bytes in every buffer,
// shared and local memory included (each kernel copies them out at its end).
//
// KernelGenerator covers what the fast paths specialise: warp-wide loads and stores
// (WarpWindow/LoadLanes/StoreLanes) in every state space and through the generic space, the
// translation cache across pages and allocation ends, 8- to 64-bit elements with sign-extending
// loads, v1/v2/v4 vectors (MoveVector), aligned and misaligned per-lane addresses, constant
// offsets small, negative, large and wrapping at 32 bits in shared memory (the register holds
// the address less k, then [r+k]), lanes that collide (the highest lane's store stays), guards
// that mask lanes, partial warps, and chains of integer, compare, select, min/max, mad, mul.wide,
// fma, mov and cvt instructions (ExecAlu's specialisations). A new fast path belongs here too.
//
// Seeds are fixed, so a failure reproduces; it prints the seed and the PTX. About 480 kernels
// (960 launches) in all, under 2 s in a Release build.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "server/backend/sim/ptx/ptx.h"
#include "tests/ptx/harness.h"

namespace cuwire::ptx::testing {
namespace {

// Each thread's output: a slot per op (the registers the op wrote), then every pool register.
constexpr uint32_t kSlotBytes = 64;
constexpr int kPool16 = 8, kPool32 = 12, kPool64 = 12, kPoolPred = 8;
constexpr uint32_t kRegDumpBytes = kPool64 * 8 + kPool32 * 4 + kPool16 * 2 + kPoolPred * 4;
// Per op and thread, four 64-bit table entries: address offset, value, guard, generic mix.
constexpr int kTableEntries = 4;

// Everything a generated kernel needs; the device addresses follow from the allocation order,
// which is the same for both runs.
struct Case {
  uint32_t seed = 0;
  std::string ptx;
  Dim3 grid, block;
  uint32_t dynamic_shared = 0;
  std::vector<uint8_t> data;    // the global buffer the kernel reads and writes
  std::vector<uint64_t> table;  // per-op, per-thread entries (kTableEntries)
  std::vector<uint8_t> blob;    // the kernel parameter p_blob
  std::map<std::string, std::vector<uint8_t>> variables;  // .global/.const contents
  size_t out_bytes = 0;
  // The out buffer's layout: per thread (ops slots, then the pool registers), then each
  // block's shared memory, then each thread's local memory.
  uint32_t ops = 0, thread_out = 0, shared = 0, local = 0;
  uint64_t shared_out = 0, local_out = 0;

  // Where byte `at` of the out buffer comes from.
  std::string Describe(uint64_t at) const {
    if (at < shared_out) {
      const uint64_t t = at / thread_out, o = at % thread_out;
      if (o < uint64_t{ops} * kSlotBytes)
        return "thread " + std::to_string(t) + ", op " + std::to_string(o / kSlotBytes) +
               ", value " + std::to_string(o % kSlotBytes / 8);
      return "thread " + std::to_string(t) + ", pool register byte " +
             std::to_string(o - uint64_t{ops} * kSlotBytes);
    }
    if (at < local_out)
      return "shared memory of block " + std::to_string((at - shared_out) / shared) + ", byte " +
             std::to_string((at - shared_out) % shared);
    return "local memory of thread " + std::to_string((at - local_out) / local) + ", byte " +
           std::to_string((at - local_out) % local);
  }
};

// How an access names its memory.
enum class Where {
  kGlobal,        // ld.global [%u+k], %u = data + off
  kGeneric,       // ld [%u+k], %u = a generic base (global, shared, local or param) + off,
                  // or per lane one of two of them
  kGlobalVarSym,  // ld.global [gvar+k]
  kGlobalVarReg,  // ld.global [%u+k], %u = gvar + off
  kConstVarSym,   // ld.const [cvar+k] (loads only)
  kConstVarReg,   // ld.const [%u+k]
  kShared32,      // ld.shared [%t+k], a 32-bit register: base + k wraps at 32 bits
  kShared64,      // ld.shared [%u+k], a 64-bit register whose high half is ignored
  kSharedSym,     // ld.shared [sst+k]
  kSharedAbs,     // ld.shared [k]
  kLocal,         // ld.local [%u+k]
  kLocalSym,      // ld.local [lbuf+k]
  kParamSym,      // ld.param [p_blob+k] (loads only)
  kParamReg,      // ld.param [%u+k], %u = the parameter's offset + off (loads only)
};

struct ElemType {
  const char* name;
  uint32_t bytes;
};
constexpr ElemType kElemTypes[] = {{"u8", 1},  {"s8", 1},  {"b8", 1},  {"u16", 2}, {"s16", 2},
                                   {"b16", 2}, {"u32", 4}, {"s32", 4}, {"b32", 4}, {"f32", 4},
                                   {"u64", 8}, {"s64", 8}, {"b64", 8}, {"f64", 8}};

std::string Hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}
// A signed constant offset as PTX writes it after a base: "+16", "+-16".
std::string Plus(int64_t k) { return k < 0 ? "+-" + std::to_string(-k) : "+" + std::to_string(k); }

class KernelGenerator {
 public:
  // `alu` weights the ops towards instruction chains rather than memory accesses.
  KernelGenerator(uint32_t seed, bool alu) : rng_(seed), alu_(alu) { c_.seed = seed; }

  Case Generate() {
    const uint32_t block_sizes[] = {1, 7, 31, 32, 33, 50, 64, 65, 96, 128};
    c_.block.x = Chance(0.7) ? block_sizes[Rand(0, 9)] : Rand(1, 128);
    c_.grid.x = Rand(1, 3);
    // Static shared, then dynamic shared: none, small, or above the 48 KiB default limit.
    static_shared_ = 16 * Rand(1, 256);
    switch (Rand(0, 3)) {
      case 0:
        c_.dynamic_shared = 0;
        break;
      case 1:
        c_.dynamic_shared = 16 * Rand(1, 128);
        break;
      case 2:
        c_.dynamic_shared = 65536 - static_shared_;  // a 64 KiB window
        break;
      default:
        c_.dynamic_shared = 16 * Rand(3072, 6144);  // 48 to 96 KiB
        break;
    }
    if (c_.dynamic_shared > 16384 && c_.block.x < 32) c_.block.x += 32;  // keep copying cheap
    threads_ = c_.block.x * c_.grid.x;
    shared_ = static_shared_ + c_.dynamic_shared;
    local_ = 32 * Rand(1, 16);
    data_ = Chance(0.5) ? Rand(64, 1024) : Rand(1024, 20000);  // any size: the end is an edge
    gvar_ = 32 * Rand(1, 64);
    cvar_ = 32 * Rand(1, 32);
    blob_ = 32 * Rand(1, 8);
    ops_ = Rand(4, 12);
    c_.data = RandomBytes(data_);
    c_.blob = RandomBytes(blob_);
    c_.variables["gvar"] = RandomBytes(gvar_);
    c_.variables["cvar"] = RandomBytes(cvar_);
    c_.table.assign(static_cast<size_t>(ops_) * kTableEntries * threads_, 0);
    thread_out_ = ops_ * kSlotBytes + kRegDumpBytes;
    shared_out_ = uint64_t{threads_} * thread_out_;
    local_out_ = shared_out_ + uint64_t{c_.grid.x} * shared_;
    c_.out_bytes = local_out_ + uint64_t{threads_} * local_;
    c_.ops = ops_;
    c_.thread_out = thread_out_;
    c_.shared = shared_;
    c_.local = local_;
    c_.shared_out = shared_out_;
    c_.local_out = local_out_;

    Prologue();
    for (uint32_t op = 0; op < ops_; ++op) {
      body_ += "  // op " + std::to_string(op) + "\n";
      if (Chance(alu_ ? 0.7 : 0.25)) {
        AluChain(op);
      } else {
        MemoryAccess(op, Chance(0.4));
      }
    }
    Epilogue();
    c_.ptx = Header() + body_ + "}\n";
    return std::move(c_);
  }

 private:
  // ---- randomness --------------------------------------------------------------------------
  // Drawn from the engine's raw output, not std:: distributions (whose algorithms differ
  // between standard libraries), so a seed names the same kernel everywhere.

  uint32_t Rand(uint32_t lo, uint32_t hi) {  // [lo, hi]
    return lo + static_cast<uint32_t>((uint64_t{rng_()} * (uint64_t{hi} - lo + 1)) >> 32);
  }
  bool Chance(double p) { return rng_() < p * 4294967296.0; }
  double Unit() { return rng_() / 4294967296.0; }  // [0, 1)
  uint64_t Rand64() { return (uint64_t{rng_()} << 32) | rng_(); }
  template <class T, size_t N>
  const T& Pick(const T (&a)[N]) {
    return a[Rand(0, N - 1)];
  }
  std::vector<uint8_t> RandomBytes(uint32_t n) {
    std::vector<uint8_t> v(n);
    for (uint8_t& b : v) b = static_cast<uint8_t>(rng_());
    return v;
  }

  // Values rich in edges: small, sign and width boundaries, special floats, random bits.
  uint64_t RandValue() {
    static const uint64_t kEdges[] = {0x7f,
                                      0x80,
                                      0xff,
                                      0x7fff,
                                      0x8000,
                                      0xffff,
                                      0x7fffffff,
                                      0x80000000,
                                      0xffffffff,
                                      0x7fffffffffffffff,
                                      0x8000000000000000,
                                      ~uint64_t{0}};
    static const uint32_t kFloats[] = {0x3f800000, 0xbf800000, 0x3f000000, 0x80000000,
                                       0x7f800000, 0xff800000, 0x7fc00000, 0x7fffffff,
                                       0x00000001, 0x80000001, 0x7f7fffff, 0x00800000};
    switch (Rand(0, 7)) {
      case 0:
        return static_cast<uint64_t>(static_cast<int64_t>(Rand(0, 8)) - 4);
      case 1: {
        uint64_t v = Pick(kEdges);
        if (Chance(0.3)) v = uint64_t{0} - v;  // two's-complement negation, INT64_MIN too
        return v;
      }
      case 2:
        return (Rand64() & 0xffffffff00000000ull) | Pick(kFloats);
      case 3: {
        const float f = static_cast<float>(Unit() * 200 - 100);
        uint32_t bits;
        std::memcpy(&bits, &f, 4);
        return (Rand64() & 0xffffffff00000000ull) | bits;
      }
      case 4: {
        const double d = static_cast<double>(Rand64() >> 11) * 0x1p-53 * 200 - 100;
        uint64_t bits;
        std::memcpy(&bits, &d, 8);
        return bits;
      }
      default:
        return Rand64();
    }
  }

  // ---- text --------------------------------------------------------------------------------

  void Emit(const std::string& line) { body_ += "  " + line + ";\n"; }
  void Label(const std::string& l) { body_ += l + ":\n"; }
  std::string T32() { return "%t" + std::to_string(t32_++); }
  std::string T64() { return "%u" + std::to_string(t64_++); }
  std::string TP() { return "%c" + std::to_string(tp_++); }
  std::string Pool(int bits) {
    switch (bits) {
      case 16:
        return "%rs" + std::to_string(Rand(0, kPool16 - 1));
      case 32:
        return "%rv" + std::to_string(Rand(0, kPool32 - 1));
      case 1:
        return "%q" + std::to_string(Rand(0, kPoolPred - 1));
      default:
        return "%rw" + std::to_string(Rand(0, kPool64 - 1));
    }
  }

  std::string Header() const {
    std::string h = kHeader;
    h += ".global .align 32 .b8 gvar[" + std::to_string(gvar_) + "];\n";
    h += ".const .align 32 .b8 cvar[" + std::to_string(cvar_) + "];\n";
    h += ".extern .shared .align 16 .b8 dsm[];\n";
    h += ".visible .entry fp(.param .u64 p_data, .param .u64 p_table, .param .u64 p_out, "
         ".param .align 32 .b8 p_blob[" +
         std::to_string(blob_) + "])\n{\n";
    h += "  .reg .pred %p<4>;\n";
    h += "  .reg .pred %q<" + std::to_string(kPoolPred) + ">;\n";
    h += "  .reg .pred %c<" + std::to_string(tp_ + 1) + ">;\n";
    h += "  .reg .b16 %rs<" + std::to_string(kPool16) + ">;\n";
    h += "  .reg .b32 %rv<" + std::to_string(kPool32) + ">;\n";
    h += "  .reg .b64 %rw<" + std::to_string(kPool64) + ">;\n";
    h += "  .reg .b32 %r<16>;\n  .reg .b64 %rd<24>;\n";
    h += "  .reg .b32 %t<" + std::to_string(t32_ + 1) + ">;\n";
    h += "  .reg .b64 %u<" + std::to_string(t64_ + 1) + ">;\n";
    h += "  .shared .align 32 .b8 sst[" + std::to_string(static_shared_) + "];\n";
    h += "  .local .align 32 .b8 lbuf[" + std::to_string(local_) + "];\n";
    return h;
  }

  // Register names the prologue sets:
  //   %r1 tid, %r2 ctaid, %r4 global thread id; %rd5 this thread's table entries (op 0);
  //   %rd7 this thread's output slots; %rd1 data (global), %rd14 data (generic);
  //   %r5/%rd8 sst (shared), %rd10 sst (generic); %rd9 lbuf (local), %rd11 lbuf (generic);
  //   %rd12 p_blob (param offset), %rd13 p_blob (generic); %rd15 gvar, %rd16 cvar.
  void Prologue() {
    Emit("ld.param.u64 %rd14, [p_data]");
    Emit("cvta.to.global.u64 %rd1, %rd14");
    Emit("ld.param.u64 %rd2, [p_table]");
    Emit("cvta.to.global.u64 %rd2, %rd2");
    Emit("ld.param.u64 %rd3, [p_out]");
    Emit("cvta.to.global.u64 %rd3, %rd3");
    Emit("mov.u32 %r1, %tid.x");
    Emit("mov.u32 %r2, %ctaid.x");
    Emit("mov.u32 %r3, %ntid.x");
    Emit("mad.lo.u32 %r4, %r2, %r3, %r1");
    Emit("mul.wide.u32 %rd4, %r4, 8");
    Emit("add.s64 %rd5, %rd2, %rd4");
    Emit("mul.wide.u32 %rd6, %r4, " + std::to_string(thread_out_));
    Emit("add.s64 %rd7, %rd3, %rd6");
    Emit("mov.u32 %r5, sst");
    Emit("mov.u64 %rd8, sst");
    Emit("cvta.shared.u64 %rd10, %rd8");
    Emit("mov.u64 %rd9, lbuf");
    Emit("cvta.local.u64 %rd11, %rd9");
    Emit("mov.u64 %rd12, p_blob");
    Emit("cvta.param.u64 %rd13, %rd12");
    Emit("mov.u64 %rd15, gvar");
    Emit("mov.u64 %rd16, cvar");
    // Pool registers: distinct per thread.
    for (int i = 0; i < kPool32; ++i)
      Emit("mad.lo.u32 %rv" + std::to_string(i) + ", %r4, " + Hex(rng_() | 1) + ", " + Hex(rng_()));
    for (int i = 0; i < kPool64; ++i) {
      Emit("mul.wide.u32 %rw" + std::to_string(i) + ", %r4, " + Hex(rng_() | 1));
      Emit("xor.b64 %rw" + std::to_string(i) + ", %rw" + std::to_string(i) + ", " + Hex(Rand64()));
    }
    for (int i = 0; i < kPool16; ++i)
      Emit("cvt.u16.u32 %rs" + std::to_string(i) + ", %rv" + std::to_string(i));
    for (int i = 0; i < kPoolPred; ++i)
      Emit("setp.lt.u32 %q" + std::to_string(i) + ", %rv" + std::to_string(i) + ", " + Hex(rng_()));
    // Shared memory: a word pattern of the block, from each thread a word in ntid.
    const std::string salt = Hex(rng_());
    Emit("shl.b32 %r6, %r1, 2");
    Emit("shl.b32 %r7, %r3, 2");
    Label("fill_shared");
    Emit("setp.ge.u32 %p0, %r6, " + std::to_string(shared_));
    Emit("@%p0 bra fill_shared_done");
    Emit("mad.lo.u32 %r8, %r6, 0x9e3779b1, %r2");
    Emit("xor.b32 %r8, %r8, " + salt);
    Emit("add.u32 %r9, %r5, %r6");
    Emit("st.shared.u32 [%r9], %r8");
    Emit("add.u32 %r6, %r6, %r7");
    Emit("bra fill_shared");
    Label("fill_shared_done");
    // Local memory: a pattern of the thread.
    Emit("mov.u32 %r6, 0");
    Label("fill_local");
    Emit("mad.lo.u32 %r8, %r6, 0x85ebca6b, %r4");
    Emit("xor.b32 %r8, %r8, " + salt);
    Emit("cvt.u64.u32 %rd17, %r6");
    Emit("add.s64 %rd18, %rd9, %rd17");
    Emit("st.local.u32 [%rd18], %r8");
    Emit("add.u32 %r6, %r6, 4");
    Emit("setp.lt.u32 %p0, %r6, " + std::to_string(local_));
    Emit("@%p0 bra fill_local");
    Emit("bar.sync 0");
  }

  // Every pool register, then the block's shared memory and the thread's local memory, out to
  // global memory.
  void Epilogue() {
    Emit("bar.sync 0");
    uint32_t at = ops_ * kSlotBytes;
    for (int i = 0; i < kPool64; ++i, at += 8)
      Emit("st.global.u64 [%rd7+" + std::to_string(at) + "], %rw" + std::to_string(i));
    for (int i = 0; i < kPool32; ++i, at += 4)
      Emit("st.global.u32 [%rd7+" + std::to_string(at) + "], %rv" + std::to_string(i));
    for (int i = 0; i < kPool16; ++i, at += 2)
      Emit("st.global.u16 [%rd7+" + std::to_string(at) + "], %rs" + std::to_string(i));
    for (int i = 0; i < kPoolPred; ++i, at += 4) {
      Emit("selp.u32 %r10, 1, 0, %q" + std::to_string(i));
      Emit("st.global.u32 [%rd7+" + std::to_string(at) + "], %r10");
    }
    Emit("mul.wide.u32 %rd17, %r2, " + std::to_string(shared_));
    Emit("add.s64 %rd17, %rd17, " + std::to_string(shared_out_));
    Emit("add.s64 %rd17, %rd3, %rd17");
    Emit("shl.b32 %r6, %r1, 2");
    Label("dump_shared");
    Emit("setp.ge.u32 %p0, %r6, " + std::to_string(shared_));
    Emit("@%p0 bra dump_shared_done");
    Emit("add.u32 %r9, %r5, %r6");
    Emit("ld.shared.u32 %r8, [%r9]");
    Emit("cvt.u64.u32 %rd18, %r6");
    Emit("add.s64 %rd19, %rd17, %rd18");
    Emit("st.global.u32 [%rd19], %r8");
    Emit("add.u32 %r6, %r6, %r7");
    Emit("bra dump_shared");
    Label("dump_shared_done");
    Emit("mul.wide.u32 %rd17, %r4, " + std::to_string(local_));
    Emit("add.s64 %rd17, %rd17, " + std::to_string(local_out_));
    Emit("add.s64 %rd17, %rd3, %rd17");
    Emit("mov.u32 %r6, 0");
    Label("dump_local");
    Emit("cvt.u64.u32 %rd18, %r6");
    Emit("add.s64 %rd19, %rd9, %rd18");
    Emit("ld.local.u32 %r8, [%rd19]");
    Emit("add.s64 %rd19, %rd17, %rd18");
    Emit("st.global.u32 [%rd19], %r8");
    Emit("add.u32 %r6, %r6, 4");
    Emit("setp.lt.u32 %p0, %r6, " + std::to_string(local_));
    Emit("@%p0 bra dump_local");
    Emit("ret");
  }

  // ---- tables ------------------------------------------------------------------------------

  uint64_t& Entry(uint32_t op, int which, uint32_t thread) {
    return c_.table[(static_cast<size_t>(op) * kTableEntries + which) * threads_ + thread];
  }
  // A register loaded with this thread's entry `which` of op `op`.
  std::string LoadEntry(uint32_t op, int which) {
    std::string r = T64();
    const uint64_t at = (uint64_t{op} * kTableEntries + which) * threads_ * 8;
    Emit("ld.global.u64 " + r + ", [%rd5+" + std::to_string(at) + "]");
    return r;
  }
  // A per-lane predicate from entry `which`: all, none, every other lane, a run, one lane or
  // random lanes.
  std::string LanePredicate(uint32_t op, int which) {
    const uint32_t kind = Rand(0, 5), a = Rand(0, c_.block.x), b = Rand(0, c_.block.x);
    const uint32_t salt = rng_();
    for (uint32_t g = 0; g < threads_; ++g) {
      const uint32_t t = g % c_.block.x;
      bool on = true;
      switch (kind) {
        case 0:
          on = true;
          break;
        case 1:
          on = false;
          break;
        case 2:
          on = ((t + salt) & 1) != 0;
          break;
        case 3:
          on = t >= std::min(a, b) && t < std::max(a, b);
          break;
        case 4:
          on = t == a;
          break;
        default:
          on = Chance(0.5);
          break;
      }
      Entry(op, which, g) = on ? 1 + (salt & 0xffff0000u) : 0;
    }
    const std::string r = LoadEntry(op, which), p = TP();
    Emit("setp.ne.u64 " + p + ", " + r + ", 0");
    return p;
  }
  // "@%c3 " / "@!%c3 " / "@%q1 " / "" for an instruction of op `op`; the op's lanes
  // predicate is made once (entry 2).
  std::string Guard(uint32_t op) {
    if (Chance(0.5)) return "";
    std::string p;
    if (Chance(0.2)) {
      p = Pool(1);
    } else {
      if (guard_op_ != op) {
        guard_ = LanePredicate(op, 2);
        guard_op_ = op;
      }
      p = guard_;
    }
    return (Chance(0.3) ? "@!" : "@") + p + " ";
  }

  // ---- addresses ---------------------------------------------------------------------------

  // Per-thread byte offsets into a region of `size` bytes for accesses of `total` bytes:
  // mostly aligned and in range (contiguous, reversed, broadcast, strided, scattered, a few
  // addresses shared by many lanes, the last place, a run up to the region's end), sometimes one
  // lane or all of them misaligned or outside (a run one element past the end, or one lane far
  // off).
  std::vector<int64_t> Offsets(uint64_t size, uint32_t total) {
    std::vector<int64_t> off(threads_);
    const uint64_t slots = size >= total ? (size - total) / total + 1 : 1;
    const uint64_t start = Rand(0, static_cast<uint32_t>(std::min<uint64_t>(slots - 1, ~0u)));
    const uint32_t stride = Rand(1, 5);
    uint64_t few[3];
    for (uint64_t& f : few) f = Rand(0, static_cast<uint32_t>(slots - 1));
    const uint32_t kind = Rand(0, 8);
    // A run of lanes ending at the region's end, or now and then one element past it.
    const uint64_t run_end = slots + (Chance(0.15) ? 1 : 0);
    for (uint32_t g = 0; g < threads_; ++g) {
      const uint64_t t = g % c_.block.x;
      uint64_t slot = 0;
      switch (kind) {
        case 0:
          slot = start + t;
          break;
        case 1:  // back to front from the end, as a reversed tile read does
          slot = slots - 1 - t % slots;
          break;
        case 2:
          slot = start;
          break;
        case 3:
          slot = start + t * stride;
          break;
        case 4:
          slot = few[Rand(0, 2)];
          break;
        case 5:
          slot = Rand(0, static_cast<uint32_t>(slots - 1));
          break;
        case 6:
          slot = (start + t) ^ 1;
          break;
        case 7:  // every lane at the last place (a wider access there may cross the end)
          slot = slots - 1;
          break;
        default:
          slot = run_end - 1 - (c_.block.x - 1 - t) % std::min<uint64_t>(run_end, 8);
          off[g] = static_cast<int64_t>(slot * total);
          continue;
      }
      off[g] = static_cast<int64_t>((slot % slots) * total);
    }
    const uint32_t fault = Rand(0, 99);
    const uint32_t victim = Rand(0, threads_ - 1);
    if (fault < 2 && total > 1) {  // misaligned
      for (uint32_t g = 0; g < threads_; ++g)
        if (g == victim || fault == 0) off[g] += Rand(1, total - 1);
    } else if (fault < 4) {  // outside the region
      const int64_t past[] = {static_cast<int64_t>(size),
                              static_cast<int64_t>((size + total - 1) / total * total),
                              -static_cast<int64_t>(total), -4096, int64_t{1} << 20};
      off[victim] = Pick(past);
    }
    return off;
  }

  // A constant offset k for [r+k]: none, small, large, or one that wraps (65520 with the
  // register holding the address less 65520, 0xfffffff0, ...).
  int64_t ConstantOffset(uint32_t total, bool wide) {
    switch (Rand(0, 4)) {
      case 0:
        return 0;
      case 1:
        return (static_cast<int64_t>(Rand(0, 16)) - 8) * total;
      case 2:
        return static_cast<int64_t>(Rand(0, 140000)) - 70000;
      default: {
        static const int64_t kWide[] = {65520,      65536,       -65536,     -16,
                                        0x7ffffff0, -0x80000000, 0xfffffff0, 0x100000010};
        static const int64_t kNarrow[] = {65520, 65536, -65536, -16, 0x7ffffff0, -0x80000000};
        return wide ? Pick(kWide) : Pick(kNarrow);
      }
    }
  }

  struct Access {
    std::string space;  // ".global", "" (generic), ...
    std::string base;   // "%u3", "sst", or empty: [k]
    int64_t k = 0;
    std::string reg;  // the address register, or empty
    int reg_bits = 64;
    std::vector<int64_t> offsets;  // each thread's byte offset into the region at k
    uint64_t size = 0;             // the region's bytes
    std::string At(int64_t offset) const {
      return "[" + base + (base.empty() ? std::to_string(offset) : Plus(offset)) + "]";
    }
  };

  // Emits the address of op `op`'s access of `total` bytes in `where`, filling the table.
  Access Address(uint32_t op, Where where, uint32_t total, bool store) {
    Access a;
    auto uniform = [&](const std::string& space, const std::string& sym, uint64_t size) {
      std::vector<int64_t> off = Offsets(size, total);
      std::fill(off.begin(), off.end(), off[0]);
      a.offsets = off;
      a.size = size;
      a.space = space;
      a.base = sym;
      a.k = off[0];
      return a;
    };
    // [%u+k], %u = base + (desired - k).
    auto reg64 = [&](const std::string& space, const std::string& base, uint64_t size,
                     uint64_t high) {
      const std::vector<int64_t> off = Offsets(size, total);
      a.offsets = off;
      a.size = size;
      const int64_t k = ConstantOffset(total, true);
      for (uint32_t g = 0; g < threads_; ++g)
        Entry(op, 0, g) = static_cast<uint64_t>(off[g] - k) + (Chance(0.5) ? high : 0);
      const std::string o = LoadEntry(op, 0);
      a.reg = T64();
      Emit("add.s64 " + a.reg + ", " + base + ", " + o);
      a.space = space;
      a.base = a.reg;
      a.k = k;
      return a;
    };
    switch (where) {
      case Where::kGlobal:
        return reg64(".global", "%rd1", data_, 0);
      case Where::kGlobalVarSym:
        return uniform(".global", "gvar", gvar_);
      case Where::kGlobalVarReg:
        return reg64(".global", "%rd15", gvar_, 0);
      case Where::kConstVarSym:
        return uniform(".const", "cvar", cvar_);
      case Where::kConstVarReg:
        return reg64(".const", "%rd16", cvar_, 0);
      case Where::kShared64:
        return reg64(".shared", "%rd8", shared_, uint64_t{Rand(1, 0xffff)} << 32);
      case Where::kSharedSym:
        return uniform(".shared", "sst", shared_);
      case Where::kSharedAbs:
        return uniform(".shared", "", shared_);
      case Where::kLocal:
        return reg64(".local", "%rd9", local_, 0);
      case Where::kLocalSym:
        return uniform(".local", "lbuf", local_);
      case Where::kParamSym:
        return uniform(".param", "p_blob", blob_);
      case Where::kParamReg:
        return reg64(".param", "%rd12", blob_, 0);
      case Where::kShared32: {
        const std::vector<int64_t> off = Offsets(shared_, total);
        a.offsets = off;
        a.size = shared_;
        const int64_t k = ConstantOffset(total, false);
        for (uint32_t g = 0; g < threads_; ++g)
          Entry(op, 0, g) = static_cast<uint64_t>(off[g] - k) | (uint64_t{rng_()} << 32);
        const std::string o = LoadEntry(op, 0), o32 = T32();
        Emit("cvt.u32.u64 " + o32 + ", " + o);
        a.reg = T32();
        a.reg_bits = 32;
        Emit("add.u32 " + a.reg + ", %r5, " + o32);
        a.space = ".shared";
        a.base = a.reg;
        a.k = k;
        return a;
      }
      case Where::kGeneric:
        break;
    }
    // Generic: one window, or per lane one of two.
    struct Window {
      const char* base;
      uint64_t size;
    };
    const Window windows[] = {
        {"%rd14", data_}, {"%rd10", shared_}, {"%rd11", local_}, {"%rd13", blob_}};
    // Parameters are read-only: a store there fails, now and then on purpose.
    auto window = [&]() -> const Window& {
      const Window* w = &Pick(windows);
      while (store && w == &windows[3] && Chance(0.9)) w = &Pick(windows);
      return *w;
    };
    const Window& w1 = window();
    if (Chance(0.7)) return reg64("", w1.base, w1.size, 0);
    const Window& w2 = window();
    const std::string mix = LanePredicate(op, 3), base = T64();
    Emit("selp.b64 " + base + ", " + w1.base + ", " + w2.base + ", " + mix);
    return reg64("", base, std::min(w1.size, w2.size), 0);
  }

  // ---- ops ---------------------------------------------------------------------------------

  // Register class for an element: loads may widen (sub-word into 16/32/64 bits, 32 into 64).
  int RegBits(uint32_t bytes) {
    if (bytes == 8) return 64;
    if (bytes == 4) return Chance(0.7) ? 32 : 64;
    const int c[] = {16, 32, 64};
    return Pick(c);
  }
  std::string StoreSlot(uint32_t op, int i, const std::string& reg, int bits) {
    const std::string at = "[%rd7+" + std::to_string(op * kSlotBytes + i * 8) + "]";
    const char* st = bits == 64   ? "st.global.u64 "
                     : bits == 32 ? "st.global.u32 "
                                  : "st.global.u16 ";
    return st + at + ", " + reg;
  }

  // One access, or two through one address (the second at another constant offset: it meets
  // what the first left in the translation cache).
  void MemoryAccess(uint32_t op, bool store) {
    static const Where kLoadable[] = {
        Where::kGlobal,       Where::kGlobal,       Where::kGeneric,     Where::kGeneric,
        Where::kGlobalVarSym, Where::kGlobalVarReg, Where::kConstVarSym, Where::kConstVarReg,
        Where::kShared32,     Where::kShared32,     Where::kShared64,    Where::kSharedSym,
        Where::kSharedAbs,    Where::kLocal,        Where::kLocalSym,    Where::kParamSym,
        Where::kParamReg};
    Where where = Pick(kLoadable);
    const bool read_only = where == Where::kConstVarSym || where == Where::kConstVarReg ||
                           where == Where::kParamSym || where == Where::kParamReg;
    if (store && read_only) store = false;
    const ElemType& e = Pick(kElemTypes);
    const uint32_t vecs[] = {1, 1, 2, 4};
    uint32_t vec = Pick(vecs);
    if (e.bytes == 8 && vec == 4 && Chance(0.5)) vec = 2;
    const uint32_t total = e.bytes * vec;
    const std::string guard = Guard(op);
    if (store) {
      for (uint32_t g = 0; g < threads_; ++g) Entry(op, 1, g) = RandValue();
    }
    const std::string value = store ? LoadEntry(op, 1) : "";
    const Access a = Address(op, where, total, store);
    const bool second = Chance(0.4);
    Instruction(op, a, a.k, e, vec, store, value, guard, 0, /*clobber=*/!second);
    if (!second) return;
    // Narrower, or wider where every lane's place is aligned for it: a wider access after a
    // narrow one meets a translation cached for fewer bytes.
    const ElemType* e2;
    uint32_t vec2;
    for (int tries = 0;; ++tries) {
      e2 = &Pick(kElemTypes);
      vec2 = Pick(vecs);
      const int64_t total2 = e2->bytes * vec2;
      if (total2 <= total) break;
      if (tries < 4 && std::all_of(a.offsets.begin(), a.offsets.end(),
                                   [&](int64_t o) { return o % total2 == 0; }))
        break;
    }
    // Another place for every lane, mostly still inside the region.
    const int64_t step = e2->bytes * vec2;
    int64_t lo = -8, hi = 8;
    if (Chance(0.95)) {
      const auto [min, max] = std::minmax_element(a.offsets.begin(), a.offsets.end());
      lo = std::max<int64_t>(lo, (-*min + step - 1) / step);
      hi = std::min<int64_t>(hi, (static_cast<int64_t>(a.size) - step - *max) / step);
      if (lo > hi) lo = hi = 0;
    }
    const int64_t k2 =
        a.k + static_cast<int64_t>(Rand(0, static_cast<uint32_t>(hi - lo)) + lo) * step;
    Instruction(op, a, k2, *e2, vec2, !read_only && Chance(0.5), value.empty() ? Pool(64) : value,
                Guard(op), 4, /*clobber=*/false);
  }

  // ld/st of `vec` elements of `e` at a.At(k); a load's registers go to the op's slot from
  // value `first_value` on. `clobber`: a load may write the address register.
  void Instruction(uint32_t op, const Access& a, int64_t k, const ElemType& e, uint32_t vec,
                   bool store, const std::string& value, const std::string& guard, int first_value,
                   bool clobber) {
    const int bits = store ? (e.bytes == 8   ? 64
                              : Chance(0.5)  ? 64
                              : e.bytes == 4 ? 32
                                             : 16)
                           : RegBits(e.bytes);
    std::vector<std::string> regs;
    for (uint32_t i = 0; i < vec; ++i) {
      if (store) {
        if (Chance(0.15)) {
          regs.push_back(std::to_string(Rand(0, 1000)));  // an immediate
        } else if (bits == 64 && Chance(0.3)) {
          regs.push_back(value);
        } else if (bits == a.reg_bits && !a.reg.empty() && Chance(0.1)) {
          regs.push_back(a.reg);  // the address itself
        } else {
          regs.push_back(Pool(bits));
        }
        continue;
      }
      // Distinct destinations; one may be the address register.
      std::string r;
      do {
        r = clobber && bits == a.reg_bits && !a.reg.empty() && Chance(0.15) ? a.reg : Pool(bits);
      } while (std::find(regs.begin(), regs.end(), r) != regs.end());
      regs.push_back(r);
    }
    std::string list = regs[0];
    if (vec > 1) {
      list = "{" + regs[0];
      for (uint32_t i = 1; i < vec; ++i) list += ", " + regs[i];
      list += "}";
    }
    const std::string v = vec > 1 ? ".v" + std::to_string(vec) : "";
    if (store) {
      Emit(guard + "st" + a.space + v + "." + e.name + " " + a.At(k) + ", " + list);
      return;
    }
    Emit(guard + "ld" + a.space + v + "." + e.name + " " + list + ", " + a.At(k));
    for (uint32_t i = 0; i < vec; ++i)
      Emit(StoreSlot(op, first_value + static_cast<int>(i), regs[i], bits));
  }

  // A few register-only instructions on the pool, fresh per-lane values mixed in first.
  void AluChain(uint32_t op) {
    for (uint32_t g = 0; g < threads_; ++g) Entry(op, 1, g) = RandValue();
    const std::string v = LoadEntry(op, 1), hi = T64();
    Emit("mov.b64 " + Pool(64) + ", " + v);
    Emit("cvt.u32.u64 " + Pool(32) + ", " + v);
    Emit("shr.u64 " + hi + ", " + v + ", 32");
    Emit("cvt.u32.u64 " + Pool(32) + ", " + hi);
    Emit("cvt.u16.u64 " + Pool(16) + ", " + v);
    std::vector<std::pair<std::string, int>> written;
    const uint32_t n = Rand(2, 7);
    for (uint32_t i = 0; i < n; ++i) {
      const std::string guard = Guard(op);
      written.push_back(AluInstruction(guard));
    }
    // The last (up to 8) registers written, out to the slot.
    int slot = 0;
    for (size_t i = written.size(); i-- > 0 && slot < 8;) {
      const auto& [reg, bits] = written[i];
      if (bits == 1) {
        const std::string t = T32();
        Emit("selp.u32 " + t + ", 1, 0, " + reg);
        Emit(StoreSlot(op, slot++, t, 32));
      } else {
        Emit(StoreSlot(op, slot++, reg, bits));
      }
    }
  }

  // One instruction; returns the register it writes and its width (1: a predicate).
  std::pair<std::string, int> AluInstruction(const std::string& guard) {
    const int widths[] = {16, 32, 32, 64};
    const int w = Pick(widths);
    const std::string ws = std::to_string(w);
    const char* sign = Chance(0.5) ? "s" : "u";
    auto src = [&](int bits) {
      if (Chance(0.15)) return std::to_string(static_cast<int>(Rand(0, 200)) - 100);
      return Pool(bits);
    };
    switch (Rand(0, 11)) {
      case 0: {  // add/sub/mul.lo/and/or/xor
        static const char* kOps[] = {"add.s",    "add.u", "sub.s", "sub.u", "mul.lo.s",
                                     "mul.lo.u", "and.b", "or.b",  "xor.b"};
        const std::string d = Pool(w);
        Emit(guard + Pick(kOps) + ws + " " + d + ", " + Pool(w) + ", " + src(w));
        return {d, w};
      }
      case 1: {
        const std::string d = Pool(w);
        Emit(guard + "mad.lo." + sign + ws + " " + d + ", " + Pool(w) + ", " + src(w) + ", " +
             Pool(w));
        return {d, w};
      }
      case 2: {
        const std::string d = Pool(w);
        Emit(guard + (Chance(0.5) ? "min." : "max.") + sign + ws + " " + d + ", " + Pool(w) + ", " +
             src(w));
        return {d, w};
      }
      case 3:
      case 4: {  // setp, plain or combined, one or two destinations
        static const char* kSigned[] = {"eq", "ne", "lt", "le", "gt", "ge"};
        static const char* kUnsigned[] = {"eq", "ne", "lt", "le", "gt",
                                          "ge", "lo", "ls", "hi", "hs"};
        static const char* kBool[] = {"and", "or", "xor"};
        const int kind = Rand(0, 2);  // s, u, b
        const std::string t = (kind == 0 ? "s" : kind == 1 ? "u" : "b") + ws;
        const std::string cmp = kind == 0   ? Pick(kSigned)
                                : kind == 1 ? Pick(kUnsigned)
                                            : (Chance(0.5) ? "eq" : "ne");
        std::string p = Pool(1), q;
        if (Chance(0.25)) {
          do q = Pool(1);
          while (q == p);
        }
        const std::string dst = q.empty() ? p : p + "|" + q;
        const std::string x = Pool(w), y = Chance(0.2) ? x : src(w);  // equal operands too
        if (Chance(0.3)) {
          Emit(guard + "setp." + cmp + "." + Pick(kBool) + "." + t + " " + dst + ", " + x + ", " +
               y + ", " + (Chance(0.3) ? "!" : "") + Pool(1));
        } else {
          Emit(guard + "setp." + cmp + "." + t + " " + dst + ", " + x + ", " + y);
        }
        return {p, 1};
      }
      case 5: {
        const std::string d = Pool(w);
        Emit(guard + "selp.b" + ws + " " + d + ", " + Pool(w) + ", " + src(w) + ", " + Pool(1));
        return {d, w};
      }
      case 6: {  // mul.wide
        const int nw = w == 64 ? 32 : w;
        const std::string d = Pool(2 * nw);
        Emit(guard + "mul.wide." + sign + std::to_string(nw) + " " + d + ", " + Pool(nw) + ", " +
             src(nw));
        return {d, 2 * nw};
      }
      case 7: {  // fma.f32 in its rounding and ftz/sat forms, and fma.f64
        if (Chance(0.25)) {
          const std::string d = Pool(64);
          Emit(guard + "fma.rn.f64 " + d + ", " + Pool(64) + ", " + Pool(64) + ", " + Pool(64));
          return {d, 64};
        }
        static const char* kRnd[] = {"rn", "rn", "rn", "rz", "rm", "rp"};
        std::string mods = std::string(".") + Pick(kRnd);
        if (Chance(0.2)) mods += ".ftz";
        if (Chance(0.2)) mods += ".sat";
        const std::string d = Pool(32);
        Emit(guard + "fma" + mods + ".f32 " + d + ", " + Pool(32) + ", " + Pool(32) + ", " +
             Pool(32));
        return {d, 32};
      }
      case 8: {  // cvt between integer widths
        static const char* kCvt[][3] = {
            {"s64", "s32", "64"}, {"u64", "u32", "64"}, {"s64", "s32", "64"}, {"u32", "u64", "32"},
            {"s32", "s16", "32"}, {"u16", "u32", "16"}, {"s32", "s64", "32"}};
        const auto& c = Pick(kCvt);
        const int dbits = std::stoi(c[2]);
        const int sbits = std::stoi(std::string(c[1]).substr(1));
        const std::string d = Pool(dbits);
        const bool sat = dbits < sbits && Chance(0.3);
        Emit(guard + "cvt" + (sat ? ".sat." : ".") + c[0] + "." + c[1] + " " + d + ", " +
             Pool(sbits));
        return {d, dbits};
      }
      case 9: {
        if (Chance(0.5)) {  // float arithmetic, whole-warp loops (ForLanes)
          static const char* kOps[] = {"add.f32",    "sub.f32",     "mul.f32", "min.f32", "max.f32",
                                       "add.rz.f32", "mul.ftz.f32", "add.f64", "mul.f64"};
          const std::string o = Pick(kOps);
          const int fw = o.find("f64") != std::string::npos ? 64 : 32;
          const std::string d = Pool(fw);
          Emit(guard + o + " " + d + ", " + Pool(fw) + ", " + Pool(fw));
          return {d, fw};
        }
        const std::string d = Pool(w);
        Emit(guard + "mov.b" + ws + " " + d + ", " + src(w));
        return {d, w};
      }
      case 10: {  // predicate logic
        static const char* kOps[] = {"and", "or", "xor"};
        const std::string d = Pool(1);
        Emit(guard + Pick(kOps) + ".pred " + d + ", " + Pool(1) + ", " + Pool(1));
        return {d, 1};
      }
      default: {  // no specialisation: ExecAlu's general code in both runs
        const std::string d = Pool(32);
        Emit(guard + "add.sat.s32 " + d + ", " + Pool(32) + ", " + src(32));
        return {d, 32};
      }
    }
  }

  std::mt19937 rng_;
  bool alu_;
  Case c_;
  std::string body_;
  uint32_t threads_ = 0, ops_ = 0;
  uint32_t static_shared_ = 0, shared_ = 0, local_ = 0, data_ = 0, gvar_ = 0, cvar_ = 0, blob_ = 0;
  uint32_t thread_out_ = 0;
  uint64_t shared_out_ = 0, local_out_ = 0;
  int t32_ = 0, t64_ = 0, tp_ = 0;
  uint32_t guard_op_ = ~0u;  // the op guard_ was made for
  std::string guard_;
};

// ---- running -------------------------------------------------------------------------------

struct Outcome {
  LaunchResult result;
  std::map<std::string, std::vector<uint8_t>> buffers;  // every buffer, after the launch
};

Outcome Run(const Case& c, const Module& module, bool reference) {
  FakeGlobalMemory mem;
  std::map<std::string, std::pair<uint64_t, size_t>> buffers;  // name -> address, bytes
  std::unordered_map<std::string, uint64_t> vars;
  for (const VariableInfo& v : module.variables()) {
    std::vector<uint8_t> bytes(v.size, 0);
    auto it = c.variables.find(v.name);
    if (it != c.variables.end()) bytes = it->second;
    vars[v.name] = mem.Upload(bytes);
    buffers[v.name] = {vars[v.name], bytes.size()};
  }
  buffers["data"] = {mem.Upload(c.data), c.data.size()};
  buffers["table"] = {mem.Upload(c.table), c.table.size() * 8};
  buffers["out"] = {mem.Alloc(c.out_bytes), c.out_bytes};
  const KernelInfo* k = module.find_kernel("fp");
  std::vector<uint8_t> params(k->param_bytes, 0);
  const uint64_t pointers[] = {buffers["data"].first, buffers["table"].first, buffers["out"].first};
  for (int i = 0; i < 3; ++i) std::memcpy(params.data() + k->params[i].offset, &pointers[i], 8);
  std::memcpy(params.data() + k->params[3].offset, c.blob.data(), c.blob.size());
  LaunchConfig cfg;
  cfg.grid = c.grid;
  cfg.block = c.block;
  cfg.dynamic_shared_bytes = c.dynamic_shared;
  cfg.params = params.data();
  cfg.params_size = params.size();
  cfg.max_instructions = 50'000'000;
  cfg.reference = reference;
  Outcome o;
  o.result = module.launch("fp", cfg, vars, mem);
  for (const auto& [name, at] : buffers)
    o.buffers[name] = mem.Download<uint8_t>(at.first, at.second);
  return o;
}

// Empty when both runs agree; else what differs.
std::string Compare(const Case& c, const Outcome& fast, const Outcome& ref) {
  std::string diff;
  if (fast.result.error != ref.result.error || fast.result.message != ref.result.message) {
    diff += "error " + std::to_string(static_cast<int>(fast.result.error)) + " \"" +
            fast.result.message + "\", reference " +
            std::to_string(static_cast<int>(ref.result.error)) + " \"" + ref.result.message +
            "\"\n";
  }
  if (fast.result.instructions != ref.result.instructions)
    diff += "instructions " + std::to_string(fast.result.instructions) + ", reference " +
            std::to_string(ref.result.instructions) + "\n";
  for (const auto& [name, bytes] : ref.buffers) {
    const std::vector<uint8_t>& got = fast.buffers.at(name);
    for (size_t i = 0; i < bytes.size(); ++i) {
      if (got[i] == bytes[i]) continue;
      // The aligned 8 bytes around it, as a little-endian word.
      const size_t at = i & ~size_t{7};
      uint64_t g = 0, r = 0;
      std::memcpy(&g, got.data() + at, std::min<size_t>(8, bytes.size() - at));
      std::memcpy(&r, bytes.data() + at, std::min<size_t>(8, bytes.size() - at));
      diff += "buffer " + name + " differs first at byte " + std::to_string(i) +
              (name == "out" ? " (" + c.Describe(i) + ")" : std::string()) + ": bytes " +
              std::to_string(at) + "+8 are " + Hex(g) + ", reference " + Hex(r) + "\n";
      break;
    }
  }
  return diff;
}

struct Tally {
  int kernels = 0, failed_launches = 0, mismatches = 0;
};

void CheckSeed(uint32_t seed, bool alu, Tally* tally) {
  const Case c = KernelGenerator(seed, alu).Generate();
  std::string error;
  std::unique_ptr<Module> module = Module::parse(c.ptx, &error);
  ASSERT_NE(module, nullptr) << "seed " << seed << ": " << error << "\n" << c.ptx;
  const Outcome fast = Run(c, *module, false);
  const Outcome ref = Run(c, *module, true);
  ++tally->kernels;
  if (ref.result.error != LaunchError::kNone) ++tally->failed_launches;
  // Unsupported would mean the generator wrote something the interpreter does not run.
  EXPECT_NE(ref.result.error, LaunchError::kUnsupportedOpcode)
      << "seed " << seed << ": " << ref.result.message << "\n"
      << c.ptx;
  const std::string diff = Compare(c, fast, ref);
  if (!diff.empty()) {
    ++tally->mismatches;
    ADD_FAILURE() << "fast path and reference differ, seed " << seed << (alu ? " (alu)" : "")
                  << ":\n"
                  << diff << c.ptx;
  }
}

void CheckSeeds(uint32_t first, uint32_t count, bool alu) {
  Tally tally;
  for (uint32_t seed = first; seed < first + count && tally.mismatches < 3; ++seed) {
    CheckSeed(seed, alu, &tally);
    if (::testing::Test::HasFatalFailure()) return;
  }
  if (tally.mismatches) return;
  // The generator keeps most launches running to their end, and some failing.
  EXPECT_GT(tally.failed_launches, 0);
  EXPECT_LT(tally.failed_launches, tally.kernels / 2);
}

TEST(FastPath, MemoryAccessesMatchTheReference) { CheckSeeds(1, 320, false); }

TEST(FastPath, InstructionChainsMatchTheReference) { CheckSeeds(100001, 160, true); }

// Last wave's bug: a 64 KiB dynamic shared window read back to front with
// ld.shared.v4.u32 [%r+65520], %r holding the offset less 65520 (wrapping below zero), went
// wrong only in the warp-wide path.
TEST(FastPath, SharedWindowReadBackToFrontWithAWrappingOffset) {
  const std::string ptx = std::string(kHeader) + R"(
.extern .shared .align 16 .b8 dsm[];
.visible .entry back(.param .u64 out)
{
  .reg .pred %p<2>;
  .reg .b32 %r<16>;
  .reg .b64 %rd<8>;
  mov.u32 %r1, %tid.x;
  mov.u32 %r2, dsm;
  shl.b32 %r3, %r1, 2;
fill:
  add.u32 %r4, %r2, %r3;
  st.shared.u32 [%r4], %r3;
  add.u32 %r3, %r3, 128;
  setp.lt.u32 %p1, %r3, 65536;
  @%p1 bra fill;
  bar.sync 0;
  // Lane l reads the 16 bytes at 65520 - 16 * l: the register holds -16 * l.
  shl.b32 %r5, %r1, 4;
  neg.s32 %r5, %r5;
  add.u32 %r5, %r2, %r5;
  ld.shared.v4.u32 {%r6, %r7, %r8, %r9}, [%r5+65520];
  ld.param.u64 %rd1, [out];
  cvta.to.global.u64 %rd1, %rd1;
  mul.wide.u32 %rd2, %r1, 16;
  add.s64 %rd3, %rd1, %rd2;
  st.global.v4.u32 [%rd3], {%r6, %r7, %r8, %r9};
  ret;
}
)";
  for (bool reference : {false, true}) {
    SCOPED_TRACE(reference ? "reference" : "fast paths");
    FakeGlobalMemory mem;
    LoadedModule m = LoadPtx(ptx, mem);
    ASSERT_NE(m.module, nullptr);
    const uint64_t out = mem.Alloc(32 * 16);
    LaunchConfig cfg;
    cfg.reference = reference;
    LaunchResult r = LaunchWith(cfg, m, mem, "back", {1, 1, 1}, {32, 1, 1}, 65536, out);
    ASSERT_EQ(r.error, LaunchError::kNone) << r.message;
    const std::vector<uint32_t> got = mem.Download<uint32_t>(out, 32 * 4);
    for (uint32_t l = 0; l < 32; ++l)
      for (uint32_t i = 0; i < 4; ++i)
        ASSERT_EQ(got[l * 4 + i], 65520 - 16 * l + 4 * i) << "lane " << l << " element " << i;
  }
}

}  // namespace
}  // namespace cuwire::ptx::testing
