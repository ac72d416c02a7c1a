// PTX interpreter for the sim backend: parses the PTX text that nvcc emits and runs its kernels
// on the CPU.
//
// Thread-safety: a parsed Module is immutable and may be launched from many threads at once.
// A launch runs on the calling thread; it reads and writes device memory only through the
// GlobalMemory it is given. Global atomics use host atomics, so concurrent launches that share
// memory see atomic read-modify-writes (plain loads/stores race as they would on a GPU).
//
// What parse() accepts: the PTX nvcc 12/13 emits (any .version/.target), including -G and
// -lineinfo output. Instructions are decoded once, at parse time, into a compact form with
// registers resolved to indices. An instruction the interpreter does not implement (unknown
// opcode, unsupported modifier or operand form, direct recursive calls, calls to external
// functions other than those below) does NOT fail parse(): it is recorded, and a launch fails
// with kUnsupportedOpcode, naming the opcode, line and function, only if a thread executes it.
// Known gaps of that kind: wmma, mbarrier and cp.async.bulk/TMA, cluster instructions other
// than mapa, getctarank and barrier.cluster, video instructions other than
// vabsdiff2/vabsdiff4 with default selectors.
// Device printf (a call to the external vprintf) is formatted on the CPU into
// LaunchResult::printf_output; an unreadable format string, argument buffer or %s string fails
// the launch with kIllegalAddress. malloc/free use the launch's device heap (below).
// Malformed text (syntax errors, undefined registers/labels/functions) fails parse() with
// "line N: ...". So does text built to exhaust the server: operands or initializers nested more
// than 32 deep, more than 16M tokens or about 1 GiB of syntax tree, more than 16M decoded
// instructions per module, a kernel with more than kMaxThreadLocalBytes of local data per
// thread, variables larger than 64 MiB (.shared/.local/.param) or 4 GiB (.global/.const).
// Calls nest at most 255 deep at run time (deeper fails the launch with kTrap, "call stack
// overflow"). A call to __assertfail fails the launch with kAssert.
// Function pointers: taking a function's address (mov.u64 %rd, f; or a .global/.const
// initializer naming f, as in a __device__ table of function pointers) yields an opaque value
// that indirect calls (call %rd, (...), prototype) resolve at run time; a value that names no
// function with the call's parameter count fails the launch with kIllegalAddress, and recursion
// through pointers fails it with kTrap (call stack overflow).
// sm_80+ forms: redux.sync; cp.async copies at once (commit_group/wait_group/wait_all are then
// no-ops, which is indistinguishable for race-free code); %reserved_smem_offset_* name a 1 KiB
// shared region (cooperative groups' scratch) outside the kernel's own shared memory.
// alloca/stacksave/stackrestore give each thread a dynamic stack of up to 256 KiB in its .local
// window, released when the allocating function returns; exceeding it fails with
// kIllegalAddress.
// Textures and surfaces: tex, tld4, txq, suld.b, sust.b and suq on bindless objects (the handle
// in a .u64 register, or a .texref/.surfref kernel parameter) run against the objects that
// GlobalMemory::texture/surface resolve (see "Texture and surface objects" below). Recorded as
// unsupported: module-scope texture/surface references, separate sampler operands, .f16 tex
// results, multisample geometries, tex offset and depth-compare operands, sust.p (formatted),
// sured, and txq .force_unnormalized_coords.
//
// Execution model: the blocks of a grid run on the launching thread and, given a WorkerPool, on
// its threads too; printf output is still gathered block by block, in block order. Up to
// LaunchConfig::resident_blocks blocks are resident at once (the device's occupancy), taken in
// block order; each thread takes turns between the blocks it holds, and a block's warps take
// turns within it (turns of one instruction after each barrier, growing to a time slice; a
// warp polling with volatile/relaxed/acquire loads, atomics or nanosleep gives up its turn
// early). A thread holds one block, and twice as many each time all it holds polled in one
// round or none finished for a while, so short blocks run one after another and blocks that
// wait for each other (flags, decoupled look-back, persistent threads, cooperative groups'
// grid.sync(), which finds its barrier word through %envreg1/%envreg2) all advance. A kernel
// that waits for a block that never becomes resident is bounded by
// LaunchConfig::max_instructions (kTimeout). Within a block, threads run in warps of 32 in
// SIMT lockstep; divergent lanes reconverge by always running the lanes with the smallest
// (call stack, pc), which matches the structured control flow nvcc emits, so shfl/vote/match see
// the lanes CUDA code expects. bar.sync/barrier.sync (and bar.red, i.e. __syncthreads_count/
// _and/_or) wait for every non-exited thread of the block; barrier ids and thread counts are
// not modelled.
//
// Device heap: malloc and free in device code allocate from LaunchConfig::heap, at
// kGenericHeapBase in the generic (and global) address space. The heap outlives launches, as
// CUDA's does: memory one launch allocates stays valid for later launches given the same heap
// until device code frees it. malloc returns 0 when it is full, as CUDA's does; free of a
// pointer malloc did not return fails the launch with kIllegalAddress. Without a heap the
// launch gets one of LaunchConfig::malloc_heap_bytes for itself.
//
// Numerics: integer semantics are exact (including PTX results for division by zero: all ones
// for div, the dividend for rem). Floats use the host's IEEE arithmetic; .rz/.rm/.rp rounding is
// honoured for add/sub/mul/fma/div/rcp/sqrt/cvt (conversions to f16/bf16 round once from the
// source value, NaN becomes the canonical 0x7fff), .ftz and .sat are applied, a NaN result of
// f32 add/sub/mul/div/min/max/fma is the canonical NaN 0x7fffffff (the GPU's single precision
// has no NaN payloads, and the host's choice between two NaN inputs varies with the code path),
// float min/max take -0 as less than +0 and with .NaN return the canonical NaN for a NaN
// operand, f16/bf16 arithmetic is computed in f32 and rounded to the 16-bit format, and .approx
// functions (sin, cos, ex2, lg2, rsqrt, tanh, div.approx) return the correctly rounded libm
// value, which is at least as accurate as the GPU.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

namespace cuwire::ptx {

// Generic addressing. Device (global/const) addresses are used as generic addresses unchanged;
// the sim backend keeps them below kDeviceAddressLimit. Shared, local and kernel-parameter state
// spaces appear in the generic space as windows above that limit (cvta adds the base, cvta.to
// subtracts it). The local window is per thread: the same generic address names a different
// byte in each thread, as on the GPU.
constexpr uint64_t kDeviceAddressLimit = 0x0000'7000'0000'0000ull;
// A cooperative launch's grid workspace (cooperative groups' driver ABI: {size, barrier}).
constexpr uint64_t kGridWorkspaceBase = 0x0000'7a00'0000'0000ull;
constexpr uint64_t kGenericHeapBase = 0x0000'7c00'0000'0000ull;  // device malloc (DeviceHeap)
constexpr uint64_t kGenericParamBase = 0x0000'7d00'0000'0000ull;
constexpr uint64_t kGenericSharedBase = 0x0000'7e00'0000'0000ull;
constexpr uint64_t kGenericLocalBase = 0x0000'7f00'0000'0000ull;
constexpr uint64_t kGenericWindowSize = 0x0000'0001'0000'0000ull;  // 4 GiB each

struct Dim3 {
  uint32_t x = 1, y = 1, z = 1;
};

struct ParamInfo {
  uint32_t offset = 0;  // byte offset in the packed parameter buffer
  uint32_t size = 0;    // bytes
  uint32_t align = 1;
};

struct KernelInfo {
  std::string name;                  // mangled entry name as in the PTX
  std::vector<ParamInfo> params;     // in declaration order; offsets follow C layout rules
  uint32_t param_bytes = 0;          // size of the packed parameter buffer
  uint32_t static_shared_bytes = 0;  // sum of .shared variables the kernel uses
  uint32_t local_bytes = 0;          // per-thread .local bytes, including called .funcs
  uint32_t max_threads = 0;          // .maxntid product, 0 if not given
  uint32_t num_regs = 0;             // registers declared (informational)
  // .reqnctapercluster (__cluster_dims__): the cluster dimensions every launch has, {0,0,0}
  // when the kernel gives none; .explicitcluster: a launch must give a cluster.
  Dim3 cluster{0, 0, 0};
  bool explicit_cluster = false;
  // Local memory a launch allocates per thread: .local data and call parameters, at most
  // kMaxThreadLocalBytes. A backend reserves it (times the threads of a block) before launching.
  uint32_t thread_bytes = 0;
  // Host memory a launch takes per warp of a block besides that: registers, call stacks and
  // (for kernels that use alloca) dynamic stacks; at most about 12 MiB per warp.
  uint64_t warp_bytes = 0;
};

// Per-thread local memory a kernel may use, as on the GPU (512 KiB); parse() refuses more.
constexpr uint32_t kMaxThreadLocalBytes = 512u << 10;

// A module-scope variable (.global or .const) that the sim backend must place in device memory.
struct VariableInfo {
  std::string name;
  uint64_t size = 0;
  uint32_t align = 1;
  bool is_const = false;             // .const state space
  bool is_managed = false;           // a __managed__ variable (.attribute(.managed))
  std::vector<uint8_t> initializer;  // empty = zero-filled
};

// ---- Texture and surface objects
// A kernel receives CUtexObject / CUsurfObject values as 64-bit parameters and names them in
// tex/tld4/txq/suld/sust/suq instructions. The backend resolves a value to one of these views
// for the duration of a launch (GlobalMemory::texture / surface).
//
// Sampling follows the CUDA Programming Guide's texture-fetching appendix:
// - The object's shape, not the instruction's geometry, decides how coordinates are read
//   (x; x y; x y z; a cube map's direction x y z), plus the layer of array geometries, clamped
//   to the last layer. Normalized coordinates are multiplied by the extent; cube maps are always
//   addressed by direction and clamp at face edges (no seamless filtering).
// - Point filtering takes floor(x). Linear filtering puts texel centres at +0.5 and blends the
//   2, 4 or 8 neighbours with weights rounded to 1/256 (the GPU's 8 fractional bits); it applies
//   only to float-returning reads, other reads are point-sampled.
// - Address modes: wrap and mirror need normalized coordinates (otherwise clamp); border reads
//   border_color. kLinear resources (tex1Dfetch) are never filtered and read (0, 0, 0, 0)
//   outside [0, width). Integer (.s32) coordinates are texel indices, point-sampled.
// - Reads: 8/16-bit integer formats return floats normalized to [0, 1] / [-1, 1] unless
//   read_as_integer; 32-bit integer formats always return integers; f16 becomes f32; srgb
//   converts the colour channels of 8-bit unsigned data. Channels a format lacks read
//   (x, 0, 0, 1), with 1 as 1.0f for float reads.
// - Mipmaps (TextureObject::levels): the level of detail is 0 for plain tex, the operand of
//   tex.level, or log2 of the larger footprint length of tex.grad's gradients in level-0 texels
//   (|dPdx * size| and |dPdy * size|, Euclidean); then lod_bias is added and the result clamped
//   to [min_lod, max_lod] and to the levels there are. Point mipmap filtering takes the nearest
//   level (ceil(lod + 0.5) - 1 above 0.5, else 0); linear blends floor(lod) and the level above
//   by the fraction, for float reads only. Each level is sampled as a texture of its own extents
//   (max(1, extent >> level)) with the object's filter and address modes.
// - txq/suq: .channel_data_type is the CUarray_format value, .channel_order the channel count,
//   .addr_mode_N is PTX's enumeration (wrap 0, mirror 1, clamp_to_edge 3, clamp_to_border 4);
//   extents the shape lacks (height of 1D, depth of 2D), .array_size of non-arrays,
//   .num_samples read 0, .num_mipmap_levels the levels of a mipmapped object (0 otherwise);
//   .memory_layout is 1 for kLinear/kPitch2D.
// Surfaces: x is in bytes (not scaled) and must be a multiple of the access size
// (kMisalignedAddress); out of range, .trap fails the launch with kIllegalAddress, .zero reads 0
// and drops writes, .clamp uses the nearest element. Every access, texture or surface, is
// checked against TexelLayout::bytes last: a layout whose extents and pitches overrun it fails
// the launch with kIllegalAddress instead of touching memory outside it, as does a layout with
// an empty extent, a channel count other than 1, 2 or 4, or a cube map without 6n faces.

// Element types, in CUarray_format's order of meaning (not its numeric values).
enum class TexelFormat : uint8_t { kU8, kU16, kU32, kS8, kS16, kS32, kF16, kF32 };
// CUaddress_mode values: wrap, clamp, mirror, border.
enum class AddressMode : uint8_t { kWrap = 0, kClamp = 1, kMirror = 2, kBorder = 3 };
enum class ResourceShape : uint8_t {
  k1D,
  k2D,
  k3D,
  k1DLayered,
  k2DLayered,
  kCube,
  kCubeLayered,
  kLinear,   // cudaResourceTypeLinear: 1D, width elements, fetched with integer coordinates
  kPitch2D,  // cudaResourceTypePitch2D: 2D rows `row_pitch` bytes apart
};

struct TexelLayout {
  uint8_t* data = nullptr;   // texel (0, 0, 0) of layer (or cube face) 0
  uint64_t bytes = 0;        // bytes readable/writable from data; nothing outside is touched
  uint64_t row_pitch = 0;    // bytes from one row to the next
  uint64_t slice_pitch = 0;  // bytes from one depth plane (or layer, or cube face) to the next
  uint32_t width = 0;        // in elements
  uint32_t height = 1;
  uint32_t depth = 1;
  uint32_t layers = 1;  // layered shapes: layer count; cube: 6; cube layered: 6 * layers
  TexelFormat format = TexelFormat::kF32;
  uint8_t channels = 1;  // 1, 2 or 4
};

struct TextureObject {
  TexelLayout texels;
  ResourceShape shape = ResourceShape::k2D;
  AddressMode address[3] = {AddressMode::kClamp, AddressMode::kClamp, AddressMode::kClamp};
  bool linear_filter = false;      // CU_TR_FILTER_MODE_LINEAR
  bool normalized_coords = false;  // CU_TRSF_NORMALIZED_COORDINATES
  bool read_as_integer = false;    // CU_TRSF_READ_AS_INTEGER; otherwise 8/16-bit integer
                                   // formats read as normalized floats
  bool srgb = false;               // CU_TRSF_SRGB
  float border_color[4] = {0, 0, 0, 0};
  // A mipmapped array's levels, level 0 first (texels is levels[0]); empty for every other
  // resource. Each level has the format and channels of level 0.
  std::vector<TexelLayout> levels;
  bool mip_linear = false;  // CU_TR_FILTER_MODE_LINEAR as mipmapFilterMode
  float lod_bias = 0;       // mipmapLevelBias
  float min_lod = 0;        // minMipmapLevelClamp
  float max_lod = 0;        // maxMipmapLevelClamp
};

struct SurfaceObject {
  TexelLayout texels;
  ResourceShape shape = ResourceShape::k2D;
};

// Device memory as the kernel sees it. The sim backend implements it over its allocations.
class GlobalMemory {
 public:
  virtual ~GlobalMemory() = default;
  // Host pointer for the device range [addr, addr+len), or nullptr when that range is not
  // inside one live allocation (the launch then fails with kIllegalAddress).
  virtual uint8_t* translate(uint64_t addr, uint64_t len) = 0;
  // The texture / surface object a handle names, valid until the launch ends, or nullptr when
  // the handle names none the launching context may use (the launch then fails with
  // kIllegalAddress, naming the handle).
  virtual const TextureObject* texture(uint64_t /*handle*/) { return nullptr; }
  virtual const SurfaceObject* surface(uint64_t /*handle*/) { return nullptr; }
};

enum class LaunchError {
  kNone = 0,
  kIllegalAddress,     // out-of-range global/shared/local access
  kUnsupportedOpcode,  // an instruction the interpreter does not implement
  kTrap,               // trap / brkpt
  kAssert,             // a device-side assert() failed (__assertfail)
  kInvalidLaunch,      // bad kernel name, param buffer size, shared size
  kMisalignedAddress,
  kTimeout,         // ran past LaunchConfig::max_instructions
  kOutOfResources,  // the host could not allocate the launch's state
};

struct LaunchResult {
  LaunchError error = LaunchError::kNone;
  std::string message;  // names the opcode / address / kernel involved
  // Dynamic thread-instructions: each executed instruction counts once per thread of the warp
  // that was at it, including threads whose guard predicate was false (as the GPU issues them),
  // plus, for starting each block, 32 per warp and one per 32 bytes of shared memory.
  uint64_t instructions = 0;
  // Text the kernel's printf calls produced, in execution order (block by block; within a warp,
  // lanes in order). At most kPrintfBufferBytes: the excess is dropped, as when the GPU's printf
  // FIFO (cudaLimitPrintfFifoSize, 1 MiB by default) fills up. Kept when the launch fails.
  std::string printf_output;
};

constexpr size_t kPrintfBufferBytes = 1 << 20;

// A device heap: the memory device-side malloc and free manage, shared by every launch given
// it (a context's). Its bytes are reserved by the first malloc, at the capacity set by then,
// once `charge(capacity)` agrees (the owner counts them as device memory; malloc returns 0
// when it refuses); `uncharge` gives them back when the heap is destroyed. Thread-safe.
class DeviceHeap {
 public:
  explicit DeviceHeap(uint64_t capacity, std::function<bool(uint64_t)> charge = {},
                      std::function<void(uint64_t)> uncharge = {})
      : capacity_(capacity), charge_(std::move(charge)), uncharge_(std::move(uncharge)) {}
  ~DeviceHeap();
  DeviceHeap(const DeviceHeap&) = delete;
  DeviceHeap& operator=(const DeviceHeap&) = delete;
  // Changes the capacity while no malloc has reserved the heap; false afterwards.
  bool set_capacity(uint64_t bytes);
  uint64_t capacity() const;
  bool reserved() const { return base_.load(std::memory_order_acquire) != nullptr; }
  // A 16-byte aligned block of `size` bytes at a generic address, or 0 when none is free.
  uint64_t alloc(uint64_t size);
  // Frees a block alloc returned; false for any other address.
  bool free(uint64_t ptr);
  // Host bytes for [addr, addr + size) inside the heap, or nullptr.
  uint8_t* translate(uint64_t addr, uint64_t size) const;

 private:
  mutable std::mutex mu_;
  uint64_t capacity_;  // guarded by mu_
  std::function<bool(uint64_t)> charge_;
  std::function<void(uint64_t)> uncharge_;
  std::unique_ptr<uint8_t[]> bytes_;     // guarded by mu_; set once
  std::atomic<uint8_t*> base_{nullptr};  // bytes_.get() once reserved
  std::atomic<uint64_t> size_{0};
  std::map<uint64_t, uint64_t> blocks_;  // offset -> bytes; guarded by mu_
};

// Threads that run blocks of launches beside the launching thread. Launches from several
// threads share one pool; a launch never waits for a helper that has not started (its own
// thread runs the blocks the helpers do not take). Thread-safe.
class WorkerPool {
 public:
  // `threads` counts the launching thread: threads - 1 helpers are started.
  explicit WorkerPool(unsigned threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;
  unsigned threads() const { return static_cast<unsigned>(helpers_.size()) + 1; }
  // Runs `job` on the calling thread and on up to `helpers` idle pool threads at once; returns
  // when every started copy has returned. Copies not started by then are dropped.
  void run(unsigned helpers, const std::function<void()>& job);

 private:
  struct Batch;
  void loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Batch*> queue_;  // one entry per helper a batch asked for; guarded by mu_
  bool stop_ = false;         // guarded by mu_
  std::vector<std::thread> helpers_;
};

struct LaunchConfig {
  Dim3 grid;
  Dim3 block;
  uint32_t dynamic_shared_bytes = 0;
  const void* params = nullptr;  // packed as KernelInfo::params describes
  size_t params_size = 0;
  // Stops the launch with kTimeout once this many thread-instructions ran (0 = no limit).
  // Guards the server against kernels that never finish (a flag no block ever sets).
  uint64_t max_instructions = 0;
  // The heap device-side malloc allocates from (see "Device heap" above); when null, the launch
  // gets its own of malloc_heap_bytes (cudaLimitMallocHeapSize; 8 MiB by default).
  DeviceHeap* heap = nullptr;
  uint64_t malloc_heap_bytes = 8u << 20;
  // Thread-block clusters ({0,0,0}: none): the grid is tiled by clusters of these dimensions
  // (each dividing the grid's), whose blocks are resident together on one thread, share their
  // shared memory (shared::cluster, mapa) and synchronise with barrier.cluster. The caller
  // checks the dimensions against the device.
  Dim3 cluster{0, 0, 0};
  // Every block resident at once (cuLaunchCooperativeKernel). The caller bounds the grid (the
  // cooperative launch limit).
  bool cooperative = false;
  // Threads to run blocks on besides the caller's (null: the caller's thread only), and how
  // many threads at most may hold a block of this launch at once (the caller's included).
  WorkerPool* pool = nullptr;
  unsigned max_threads = ~0u;
  // Blocks resident at once, as many as fit on the device (the occupancy per SM times the
  // SMs): they all advance, taking turns, so blocks that wait for each other finish as on a
  // GPU. 0: one per thread. A cooperative launch holds every block.
  uint64_t resident_blocks = 0;
  // Every instruction runs on the plain per-lane path: no warp-wide windows, no translation
  // cache, no whole-warp ALU specialisations. The reference the fast paths are checked against
  // (tests/ptx/fastpath_test.cc); slow, for tests. Results, faults and instruction counts are
  // the same either way.
  bool reference = false;
};

class Module {
 public:
  virtual ~Module() = default;

  // Parses PTX text (as in a .ptx file, any ISA version nvcc 12/13 emits). On failure returns
  // nullptr and sets *error to a message with the line number.
  static std::unique_ptr<Module> parse(std::string_view ptx_text, std::string* error);

  virtual const std::vector<KernelInfo>& kernels() const = 0;
  virtual const std::vector<VariableInfo>& variables() const = 0;
  virtual const KernelInfo* find_kernel(std::string_view name) const = 0;

  // Runs one kernel grid to completion. `variable_addresses` gives the device address of
  // every VariableInfo (by name), chosen by the caller. Blocks may run in any order.
  virtual LaunchResult launch(std::string_view kernel, const LaunchConfig& config,
                              const std::unordered_map<std::string, uint64_t>& variable_addresses,
                              GlobalMemory& memory) const = 0;
};

}  // namespace cuwire::ptx
