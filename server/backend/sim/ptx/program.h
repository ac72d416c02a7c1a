// Pre-decoded, executable form of one kernel (its entry function plus every .func it can call).
// Internal to the interpreter. Built once at Module::parse time, immutable afterwards.
//
// Register model: every register, immediate and special register becomes a "slot". A warp's
// register file is slots x 32 lanes of uint64_t, laid out slot-major (regs[slot * 32 + lane]) so
// one instruction touches contiguous memory across lanes. Values are kept zero-extended from the
// width of the type that wrote them; readers truncate or sign-extend from the width they use.
// Immediates live in constant slots initialised once per warp, so every source operand is a
// plain slot index and the executor never looks at operand kinds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "server/backend/sim/ptx/parser.h"

namespace cuwire::ptx {

enum class Type : uint8_t {
  kNone,
  kB8,
  kB16,
  kB32,
  kB64,
  kU8,
  kU16,
  kU32,
  kU64,
  kS8,
  kS16,
  kS32,
  kS64,
  kF16,
  kF16x2,
  kBF16,
  kBF16x2,
  kF32,
  kF64,
  kPred,
  kU16x2,
  kS16x2,  // packed 16-bit integers (sm_90 add/sub/min/max)
};

inline int TypeBits(Type t) {
  switch (t) {
    case Type::kB8:
    case Type::kU8:
    case Type::kS8:
      return 8;
    case Type::kB16:
    case Type::kU16:
    case Type::kS16:
    case Type::kF16:
    case Type::kBF16:
      return 16;
    case Type::kB32:
    case Type::kU32:
    case Type::kS32:
    case Type::kF32:
    case Type::kF16x2:
    case Type::kBF16x2:
    case Type::kU16x2:
    case Type::kS16x2:
      return 32;
    case Type::kB64:
    case Type::kU64:
    case Type::kS64:
    case Type::kF64:
      return 64;
    case Type::kPred:
      return 1;
    case Type::kNone:
      return 0;
  }
  return 0;
}
inline bool IsSigned(Type t) {
  return t == Type::kS8 || t == Type::kS16 || t == Type::kS32 || t == Type::kS64;
}
inline bool IsFloat(Type t) {
  return t == Type::kF16 || t == Type::kF16x2 || t == Type::kBF16 || t == Type::kBF16x2 ||
         t == Type::kF32 || t == Type::kF64;
}
Type TypeFromName(std::string_view name);  // "u32" -> kU32; kNone if unknown

enum class Op : uint8_t {
  kUnsupported,  // aux = index into Program::messages; fails the launch when executed
  kNop,
  // Integer / float arithmetic (type-dispatched at run time, per warp not per lane).
  kAdd,
  kSub,
  kMulLo,
  kMulHi,
  kMulWide,
  kMadLo,
  kMadHi,
  kMadWide,
  kMul24Lo,
  kMul24Hi,
  kMad24Lo,
  kMad24Hi,
  kDiv,
  kRem,
  kAbs,
  kNeg,
  kMin,
  kMax,
  kFma,
  kAddCC,
  kAddC,
  kSubCC,
  kSubC,
  kAnd,
  kOr,
  kXor,
  kNot,
  kCnot,
  kShl,
  kShr,
  kShfL,
  kShfR,
  kLop3,
  kBfe,
  kBfi,
  kBmsk,
  kBrev,
  kPopc,
  kClz,
  kPrmt,
  kSelp,
  kSetp,
  kSet,
  kSlct,
  kMov,
  kPack,
  kUnpack,
  kCvt,
  kCvta,
  kCvtaTo,
  kIsspacep,
  kSqrt,
  kRsqrt,
  kRcp,
  kEx2,
  kLg2,
  kSin,
  kCos,
  kTanh,
  kCopysign,
  kTestp,
  kMadCarry,  // mad{c}.{lo,hi}{.cc}: mod bit 0 = add the carry in, 1 = write the carry, 2 = hi
  kBfind,     // mod = 1: .shiftamt
  kDp4a,
  kDp2a,  // type = a's type, type2 = b's; dp2a: mod = 1 for .hi
  kSad,
  kVabsdiff,  // vabsdiff2/4 (vec = 2 or 4 elements); mod = 1: .add; type/type2 signedness
  kStackAlloc,
  kStackSave,
  kStackRestore,  // alloca / stacksave / stackrestore
  kReadClock,     // aux: 0 = %clock, 1 = %clock64, 2 = %globaltimer
  // Memory.
  kLd,
  kSt,
  kAtom,
  // Control flow and synchronization.
  kBra,
  kCall,
  kRet,
  kExit,
  kBarSync,
  // Thread-block clusters. mapa: d = s[0] (a shared address; mod 1: of the shared::cluster
  // space, else generic) mapped to the block of rank s[1]; getctarank: d = the rank whose
  // shared memory s[0] is in (mod as mapa); barrier.cluster.arrive / .wait.
  kMapa,
  kGetCtaRank,
  kClusterArrive,
  kClusterWait,
  kTrap,
  kAssert,   // aux = message index: a failed device-side assert()
  kVprintf,  // aux = CallSite index: args = (format, argument buffer), results = (return value)
  kShfl,
  kVote,
  kActivemask,
  kMatchAny,
  kMatchAll,
  kRedux,     // redux.sync: mod = AtomOp (add, min, max, and, or, xor)
  kMma,       // mma.sync.aligned: mod = MmaKind; aux indexes Program::value_slots, which hold
              // the A, B and C fragment registers in that order; d[] = the D fragment
  kLdmatrix,  // ldmatrix.sync.aligned.m8n8.xN[.trans].b16: vec = N, mod = 1 when .trans
  kCvtTf32,   // cvt.{rna,rn,rz}.tf32.f32: the f32 rounded to TF32's 10 mantissa bits
  kCpAsync,   // cp.async: copies at once. [s[0] + imm] <- [s[1] + (int32)aux], vec bytes, of
              // which s[2] (src-size, or the ignore-src predicate when mod != 0) are read
  kMalloc,
  kFree,            // calls to the device heap; aux = CallSite index (args / results as vprintf)
  kSetConditional,  // cudaGraphSetConditional(handle, value): the u32 value to the handle's cell
                    // in global memory (sim_gpu.h); aux = CallSite index
  // Textures and surfaces: aux = index into Program::texture_ops; d[] = destinations (tex, tld4,
  // txq, suq, suld), s[] = values to store (sust), vec = how many of them.
  kTex,
  kTld4,
  kTxq,
  kSuq,
  kSuld,
  kSust,
};

// State spaces as seen by ld/st/atom.
enum class Space : uint8_t {
  kGeneric,
  kGlobal,
  kConst,
  kShared,
  kLocal,
  kKernelParam,  // the launch's packed parameter buffer (read-only)
  kThreadParam,  // per-thread scratch for .func params, return values and call arguments
};

enum class Cmp : uint8_t {
  kEq,
  kNe,
  kLt,
  kLe,
  kGt,
  kGe,
  kLo,
  kLs,
  kHi,
  kHs,
  kEqu,
  kNeu,
  kLtu,
  kLeu,
  kGtu,
  kGeu,
  kNum,
  kNan,
};
enum class BoolOp : uint8_t { kNone, kAnd, kOr, kXor };
enum class Rounding : uint8_t { kDefault, kRn, kRz, kRm, kRp, kRni, kRzi, kRmi, kRpi, kRna };
enum class AtomOp : uint8_t { kAdd, kMin, kMax, kExch, kCas, kAnd, kOr, kXor, kInc, kDec };
enum class ShflMode : uint8_t { kUp, kDown, kBfly, kIdx };
enum class VoteMode : uint8_t { kAll, kAny, kUni, kBallot };
enum class TestpOp : uint8_t { kFinite, kInfinite, kNumber, kNotANumber, kNormal, kSubnormal };

// txq / suq attributes.
enum class TexQuery : uint8_t {
  kWidth,
  kHeight,
  kDepth,
  kChannelDataType,
  kChannelOrder,
  kNormalizedCoords,
  kFilterMode,
  kAddrMode0,
  kAddrMode1,
  kAddrMode2,
  kArraySize,
  kNumMipmapLevels,
  kNumSamples,
  kMemoryLayout,
};
// suld/sust out-of-range handling.
enum class SurfaceClamp : uint8_t { kTrap, kClamp, kZero };

constexpr uint32_t kNoSlot = 0xffffffffu;

// Fixed slots, initialised per warp / per block by the executor.
enum FixedSlot : uint32_t {
  kSlotZero = 0,
  kSlotTidX,
  kSlotTidY,
  kSlotTidZ,
  kSlotNtidX,
  kSlotNtidY,
  kSlotNtidZ,
  kSlotCtaidX,
  kSlotCtaidY,
  kSlotCtaidZ,
  kSlotNctaidX,
  kSlotNctaidY,
  kSlotNctaidZ,
  kSlotLaneId,
  kSlotWarpId,
  kSlotNWarpId,
  kSlotSmId,
  kSlotNSmId,
  kSlotGridId,
  kSlotLanemaskEq,
  kSlotLanemaskLt,
  kSlotLanemaskLe,
  kSlotLanemaskGt,
  kSlotLanemaskGe,
  kSlotDynSmemSize,
  kSlotTotalSmemSize,
  // Shared memory the driver reserves for the CUDA libraries (cooperative groups' multi-warp
  // tiles on sm_80+): a separate 1 KiB region of the shared window (see executor.cc).
  kSlotReservedSmemBegin,
  kSlotReservedSmemEnd,
  kSlotReservedSmemCap,
  kSlotReservedSmem0,
  kSlotReservedSmem1,
  // Thread-block clusters: the block's rank and place in its cluster, the cluster's in the
  // grid (a launch without clusters is one of 1x1x1 each).
  kSlotClusterCtaRank,
  kSlotClusterNCtaRank,
  kSlotClusterCtaidX,
  kSlotClusterCtaidY,
  kSlotClusterCtaidZ,
  kSlotClusterNCtaidX,
  kSlotClusterNCtaidY,
  kSlotClusterNCtaidZ,
  kSlotClusterIdX,
  kSlotClusterIdY,
  kSlotClusterIdZ,
  kSlotNClusterIdX,
  kSlotNClusterIdY,
  kSlotNClusterIdZ,
  kSlotIsExplicitCluster,
  // %envreg0..31: the driver's environment registers. A cooperative launch's grid workspace
  // address is in %envreg1 (high half) and %envreg2 (low half); the rest read 0.
  kSlotEnvReg0,
  kSlotEnvRegLast = kSlotEnvReg0 + 31,
  kSlotCarry,  // carry flag for add.cc / addc
  kSlotSink,   // destination for `_` and discarded results
  kNumFixedSlots,
};

// The mma.sync shapes and types the interpreter implements (row-major A, column-major B).
enum class MmaKind : uint8_t {
  kM8n8k4F64,     // .m8n8k4 .f64: A 1, B 1, C/D 2 registers
  kM16n8k16F16,   // .m16n8k16 .f32.f16.f16.f32: A 4, B 2 (f16x2 each), C/D 4 f32
  kM16n8k16Bf16,  // .m16n8k16 .f32.bf16.bf16.f32
  kM16n8k8F16,    // .m16n8k8 .f32.f16.f16.f32: A 2, B 1, C/D 4
  kM16n8k8Bf16,   // .m16n8k8 .f32.bf16.bf16.f32
  kM16n8k8Tf32,   // .m16n8k8 .f32.tf32.tf32.f32: A 4, B 2 (one tf32 each), C/D 4
};

struct Inst {
  Op op = Op::kNop;
  Type type = Type::kNone;   // main operation type (destination type for cvt)
  Type type2 = Type::kNone;  // cvt source type; setp/set source type
  uint8_t mod = 0;           // Cmp, AtomOp, ShflMode, VoteMode, TestpOp, Space (cvta) per op
  BoolOp bool_op = BoolOp::kNone;
  Rounding rnd = Rounding::kDefault;
  Space space = Space::kGeneric;
  uint8_t ftz : 1 = 0;
  uint8_t sat : 1 = 0;
  uint8_t approx : 1 = 0;
  uint8_t guard_negated : 1 = 0;
  uint8_t has_result : 1 = 0;  // atom with destination (red has none)
  uint8_t nan : 1 = 0;         // min/max .NaN: a NaN operand gives the canonical NaN
  // ld/atom that another thread's write may be awaited through (.volatile, .relaxed,
  // .acquire, .cv, .cg, every atom): a warp that does many in one turn gives up its turn.
  uint8_t polls : 1 = 0;
  uint8_t vec = 1;        // ld/st vector length, pack/unpack element count
  uint8_t dst_bits = 64;  // width of the destination register (ld sign-extension)
  uint32_t guard = kNoSlot;
  uint32_t d[4] = {kNoSlot, kNoSlot, kNoSlot, kNoSlot};  // destinations
  uint32_t s[4] = {kNoSlot, kNoSlot, kNoSlot, kNoSlot};  // sources
  int64_t imm = 0;                                       // address offset
  uint32_t aux = 0;  // branch target, call-site index, message index, clock kind
  uint32_t line = 0;
};

// Operands of a texture or surface instruction that do not fit in Inst. Coordinates the
// instruction's geometry lacks read kSlotZero. The object's shape, not the geometry, says how
// coord[] is read at run time (a cube map takes it as a direction).
// How a tex instruction picks its mipmap level: .base (and plain tex) level 0, .level an
// explicit level of detail, .grad one from gradients.
enum class TexLod : uint8_t { kBase, kLevel, kGrad };

struct TextureOp {
  uint32_t handle = kNoSlot;  // register holding the texture/surface object handle, or
  uint32_t handle_param = 0;  // (handle == kNoSlot) offset of a .texref/.surfref kernel param
  uint32_t coord[3] = {kSlotZero, kSlotZero, kSlotZero};  // x, y, z (surfaces: x in bytes)
  uint32_t layer = kSlotZero;  // array geometries: layer (cube arrays: cube) index
  uint32_t lod = kSlotZero;    // txq.level, tex.level: level of detail
  uint32_t dpdx[3] = {kSlotZero, kSlotZero, kSlotZero};  // tex.grad: gradients (.f32)
  uint32_t dpdy[3] = {kSlotZero, kSlotZero, kSlotZero};
  TexLod lod_mode = TexLod::kBase;
  bool lod_int = false;       // tex.level with .s32 coordinates: lod is an .s32 level
  uint32_t sparse = kNoSlot;  // `{..}|%p`: predicate set to true (every texel is resident)
  bool int_coords = false;    // tex with .s32 coordinates (texel indices)
  uint8_t component = 0;      // tld4: 0..3 = .r .g .b .a
  uint8_t elem_bytes = 4;     // suld/sust: bytes per vector element
  TexQuery query = TexQuery::kWidth;
  SurfaceClamp clamp = SurfaceClamp::kTrap;
};

struct ByteCopy {
  uint32_t from, to, size;  // offsets in the thread-param scratch
};

struct CallSite {
  uint32_t entry_pc = 0;
  std::vector<ByteCopy> args;     // caller's argument params -> callee's params
  std::vector<ByteCopy> results;  // callee's return params -> caller's result params
  // Indirect call (`call %rd, (args), prototype`): the register holding the function's address;
  // then args[].to / results[].from are unused and the callee's layout comes from
  // Program::functions at run time.
  uint32_t target = kNoSlot;
};

// A function whose address a kernel takes (mov.u64 %rd, func, or a module variable initialized
// with it): its address is kFunctionAddressBase + id * kFunctionAddressStep, where id is the
// function's index among the module's defined functions (the same in every kernel).
struct FunctionEntry {
  std::string name;
  uint32_t id = 0;
  uint32_t entry_pc = 0;
  std::vector<std::pair<uint32_t, uint32_t>> params;   // thread-param offset, size
  std::vector<std::pair<uint32_t, uint32_t>> returns;  // thread-param offset, size
};
constexpr uint64_t kFunctionAddressBase = 0x0000'7b00'0000'0000ull;
constexpr uint64_t kFunctionAddressStep = 16;

// A slot whose value is the device address of a module variable, known only at launch.
struct SymbolSlot {
  uint32_t slot;
  std::string variable;
  int64_t offset = 0;  // `sym+8`
};

// alloca: bytes of dynamic stack each thread may allocate (in its .local window).
constexpr uint32_t kStackAllocLimit = 256u << 10;

struct Program {
  std::string kernel;
  std::vector<Inst> code;  // pc indexes this; the kernel's entry is pc 0
  uint32_t num_slots = kNumFixedSlots;
  std::vector<std::pair<uint32_t, uint64_t>> constants;  // slot -> value, same for every lane
  std::vector<SymbolSlot> symbol_slots;
  std::vector<CallSite> calls;
  std::vector<FunctionEntry> functions;  // functions whose address is taken
  std::vector<int32_t> function_by_id;   // module function id -> index in functions, or -1
  std::vector<std::string> messages;     // for kUnsupported / kTrap
  std::vector<TextureOp> texture_ops;
  std::vector<uint32_t> value_slots;  // vector atom: aux indexes its vec value slots here
  uint32_t static_shared_bytes = 0;
  uint32_t dynamic_shared_offset = 0;  // where `extern .shared` arrays start
  uint32_t local_bytes = 0;            // per thread
  uint32_t thread_param_bytes = 0;     // per thread
  uint32_t max_call_depth = 0;
  bool uses_stack_alloc = false;    // alloca: per-thread dynamic stacks, unwound at ret
  bool uses_cluster_slots = false;  // reads a block's place in its cluster (%cluster_ctarank...)
  bool uses_reserved_smem = false;  // reads %reserved_smem_offset_*: may reach that region
};

struct KernelInfo;
struct VariableInfo;

// Builds the program for every .entry in `module`. On failure returns false and sets *error to a
// message with the line. Unknown or unsupported instructions do not fail here: they decode to
// Op::kUnsupported and fail the launch only if a thread executes them.
bool DecodeModule(const ast::Module& module, std::vector<Program>* programs,
                  std::vector<KernelInfo>* kernels, std::vector<VariableInfo>* variables,
                  std::string* error);

}  // namespace cuwire::ptx
