// The sim backend's objects: allocations, contexts, streams, events, modules. Internal to
// server/sim; the driver-facing class is SimGpu (sim_gpu.h).
//
// Thread-safety: each type states who guards what. Handles given to callers are the addresses
// of these objects; SimGpu keeps a registry of live ones and rejects any other value.
#pragma once

#include <cuda.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "protocol/sealed_fd.h"
#include "server/backend/sim/ptx/ptx.h"

namespace cuwire::server::sim {

using Clock = std::chrono::steady_clock;

// ---------------------------------------------------------------------------------------------
// Memory

enum class MemKind { kDevice, kManaged, kHost, kPool };

struct Pool;
struct Context;

// One live range of the simulated address space. Immutable after creation except `bytes`
// contents; shared_ptr keeps the bytes alive for queued copies and running kernels even when
// the application frees the range under them.
struct Allocation {
  CUdeviceptr base = 0;
  size_t size = 0;     // bytes the caller asked for
  size_t charged = 0;  // bytes counted against the device capacity
  uint8_t* bytes = nullptr;
  bool owned = true;  // bytes were allocated here (host registrations are not)
  MemKind kind = MemKind::kDevice;
  int device = 0;
  uint64_t ctx_id = 0;  // owning context
  CUcontext ctx = nullptr;
  Pool* pool = nullptr;      // stream-ordered allocations
  uint64_t pool_serial = 0;  // its serial: a graph's allocation revived after its pool went
                             // must not take a new pool at the same address for it
  uint64_t session = 0;      // the allocating context's server session (SessionObjects)
  unsigned host_flags = 0;
  uint64_t buffer_id = 0;
  std::atomic<bool> free_queued{false};  // cuMemFreeAsync accepted, not yet run
  // Interprocess sharing (cuIpcGetMemHandle): the nonce its handles carry (0: never
  // exported) and the contexts that opened one, with how many opens each has not closed;
  // guarded by SimGpu::mem_mu_.
  uint64_t ipc_nonce = 0;
  std::map<uint64_t, unsigned> ipc_contexts;
  // A mapping of a physical allocation (cuMemMap): the block it shows, kept alive by it.
  std::shared_ptr<void> keep;
  uint64_t vmm_handle = 0;

  ~Allocation() {
    if (owned) std::free(bytes);
  }
};

// A CUDA array: elements row after row, `rows` rows per slice and `slices` slices (depth
// planes, layers, or cube faces). Its storage is charged to the device like an allocation but
// has no device address: kernels reach it only through texture and surface objects. Immutable
// after creation.
struct SimArray {
  CUDA_ARRAY3D_DESCRIPTOR desc{};
  size_t elem = 0;       // bytes per element
  size_t row_bytes = 0;  // desc.Width * elem
  size_t rows = 1;       // rows per slice
  size_t slices = 1;
  // The array's bytes: `size` at `offset` of `storage` (a mipmap's levels share one block).
  std::shared_ptr<Allocation> storage;
  size_t offset = 0;
  size_t size = 0;
  uint8_t* texels() const { return storage->bytes + offset; }
  Context* ctx = nullptr;  // owner; its clear_context destroys the array first
  // A level of a mipmapped array: it goes with the mipmap, never on its own.
  const struct SimMipmap* mipmap = nullptr;
};

// A mipmapped array (cuMipmappedArrayCreate): its levels are arrays of their own (copies and
// surfaces reach them through cuMipmappedArrayGetLevel), level 0 of the descriptor's extents
// and each next one half as large on every axis that is not layers or faces (at least 1).
// Immutable after creation.
struct SimMipmap {
  CUDA_ARRAY3D_DESCRIPTOR desc{};
  std::vector<std::shared_ptr<SimArray>> levels;
  Context* ctx = nullptr;
};

// A texture or surface object: the kernel-side view the PTX interpreter samples, the
// descriptions it was created from (for the Get*Desc queries), and the storage it reads, kept
// alive for as long as the object lives. Immutable after creation.
struct SimTexObject {
  bool surface = false;
  CUDA_RESOURCE_DESC resource{};
  CUDA_TEXTURE_DESC texture_desc{};
  CUDA_RESOURCE_VIEW_DESC view{};
  ptx::TextureObject texture;
  ptx::SurfaceObject surf;
  std::shared_ptr<Allocation> storage;
  std::shared_ptr<const SimMipmap> mipmap;  // a mipmapped resource: keeps every level's storage
  uint64_t ctx_id = 0;
  Context* ctx = nullptr;
};

// A nonce for an interprocess handle: random and never 0 (0 means "never exported").
inline uint64_t draw_nonce() {
  uint64_t n = 0;
  while (n == 0) n = (uint64_t{std::random_device{}()} << 32) | std::random_device{}();
  return n;
}

// What an exported handle holds: a magic that says what kind of thing it names, then the fields
// that name it (`Names`).
template <size_t N, class Names>
struct TaggedNames {
  char magic[N];
  Names names;
};
template <size_t N, class Names>
TaggedNames<N, Names> tag_names(const char (&magic)[N], const Names& names) {
  TaggedNames<N, Names> t{};
  std::memcpy(t.magic, magic, N);
  t.names = names;
  return t;
}

// An interprocess handle (CUipcMemHandle, CUipcEventHandle, CUmemPoolPtrExportData): the tagged
// names, then zeros.
template <class Handle, size_t N, class Names>
void pack_ipc_handle(Handle* out, const char (&magic)[N], const Names& names) {
  const TaggedNames<N, Names> t = tag_names(magic, names);
  static_assert(sizeof t <= sizeof out->reserved);
  std::memset(out, 0, sizeof *out);
  std::memcpy(out->reserved, &t, sizeof t);
}
// False when `in` does not carry `magic`: not a handle of this kind.
template <class Handle, size_t N, class Names>
bool unpack_ipc_handle(const Handle& in, const char (&magic)[N], Names* names) {
  TaggedNames<N, Names> t;
  static_assert(sizeof t <= sizeof in.reserved);
  std::memcpy(&t, in.reserved, sizeof t);
  if (std::memcmp(t.magic, magic, N) != 0) return false;
  *names = t.names;
  return true;
}

// A shareable handle (cuMemExportToShareableHandle, cuMemPoolExportToShareableHandle): a sealed
// memfd holding the tagged names, a descriptor of the server's process like the driver's (the
// server closes it when the export ends). *out gets the descriptor.
template <size_t N, class Names>
CUresult export_shareable(void* out, const char* fd_name, const char (&magic)[N],
                          const Names& names) {
  const TaggedNames<N, Names> t = tag_names(magic, names);
  const int fd = make_sealed_fd(fd_name, &t, sizeof t, false);
  if (fd < 0) return CUDA_ERROR_OPERATING_SYSTEM;
  *static_cast<int*>(out) = fd;
  return CUDA_SUCCESS;
}
// False when `os_handle` is no sealed memfd carrying `magic`.
template <size_t N, class Names>
bool import_shareable(void* os_handle, const char (&magic)[N], Names* names) {
  TaggedNames<N, Names> t{};
  if (!read_sealed_fd(static_cast<int>(reinterpret_cast<intptr_t>(os_handle)), &t, sizeof t) ||
      std::memcmp(t.magic, magic, N) != 0) {
    return false;
  }
  *names = t.names;
  return true;
}

// Takes what handle h names out of `registry`, a map owning objects by their addresses: null
// when h names none. The caller holds the lock that guards the registry.
template <class Map, class H>
typename Map::mapped_type take_registered(Map& registry, H h) {
  auto it = registry.find(reinterpret_cast<typename Map::key_type>(h));
  if (it == registry.end()) return nullptr;
  typename Map::mapped_type gone = std::move(it->second);
  registry.erase(it);
  return gone;
}

// Pools are told apart by a serial never used twice (an address may be).
inline uint64_t next_pool_serial() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1);
}

struct Pool {
  const uint64_t serial = next_pool_serial();
  int device = 0;
  bool is_default = false;
  CUmemPoolProps props{};
  uint64_t release_threshold = 0;
  int reuse_follow_events = 1, reuse_opportunistic = 1, reuse_internal_deps = 1;
  // Guarded by SimGpu::mem_mu_: bytes of its allocations in use, and bytes it holds (in use, or
  // freed and kept for reuse), with their high marks. Freed bytes stay held until a
  // synchronisation finds the pool above its release threshold, or a trim; what is held serves
  // later allocations first. Held is a figure, as CUDA's pool would report it: the device has
  // freed bytes back at once (cuMemGetInfo, other allocations).
  uint64_t used = 0, used_high = 0, reserved = 0, reserved_high = 0;
  void take(uint64_t n) {
    used += n;
    used_high = std::max(used_high, used);
    reserved = std::max(reserved, used);
    reserved_high = std::max(reserved_high, reserved);
  }
  void give(uint64_t n) { used -= n; }
  // Gives back held bytes nothing uses until at most `keep` are held.
  void trim_to(uint64_t keep) { reserved = std::max(used, std::min(reserved, keep)); }
  std::set<int> peer_access;  // devices granted read-write access
  uint64_t session = 0;       // the server session it was made for (SessionObjects); 0: none
  // Interprocess sharing (cuMemPoolExportToShareableHandle): the nonce its shareable handles
  // carry (0: never exported), guarded by SimGpu::mem_mu_; and, for a pool imported from
  // such a handle, the serial of the pool it shows (0: a pool of its own). An imported pool
  // holds no memory: it is what its importer names the exporter's allocations by
  // (cuMemPoolImportPointer), with access of its own.
  uint64_t ipc_nonce = 0;
  uint64_t source_serial = 0;
};

// ---------------------------------------------------------------------------------------------
// Work queues

// Completion of one queued operation; `when` is the wall time it completed (event timing).
class Marker {
 public:
  void complete() {
    {
      std::lock_guard lock(mu_);
      done_ = true;
      when_ = Clock::now();
    }
    cv_.notify_all();
  }
  void wait() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return done_; });
  }
  bool done() {
    std::lock_guard lock(mu_);
    return done_;
  }
  Clock::time_point when() {
    std::lock_guard lock(mu_);
    return when_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  Clock::time_point when_{};
};
using MarkerPtr = std::shared_ptr<Marker>;

struct Context;

// One operation of a stream. `run` gets the context's sticky error: work after a fault is
// skipped (as on a GPU whose context died), but markers still complete so nothing waits forever.
struct Op {
  std::vector<MarkerPtr> deps;
  std::function<void(CUresult sticky)> run;
  MarkerPtr done;
};

// ---------------------------------------------------------------------------------------------
// Graphs

// What a captured operation is, as a graph node: its type and a label (cuGraphDebugDotPrint;
// cuGraphExecUpdate compares the types).
struct NodeInfo {
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  std::string label;
};

// What an operation would be as a graph node, as the code that queues it describes it: the
// type, and a function making the label, called only when a capture records the operation (a
// queued operation needs no label). It refers to the caller's label function, which lives to the
// end of the submit call it is passed to.
class NodeDesc {
 public:
  NodeDesc() = default;
  explicit NodeDesc(CUgraphNodeType type) : type_(type) {}
  template <class F>
  NodeDesc(CUgraphNodeType type, const F& label)
      : type_(type),
        label_(&label),
        make_([](const void* f) { return std::string((*static_cast<const F*>(f))()); }) {}
  NodeInfo info() const { return {type_, make_ ? make_(label_) : std::string()}; }

 private:
  CUgraphNodeType type_ = CU_GRAPH_NODE_TYPE_EMPTY;
  const void* label_ = nullptr;
  std::string (*make_)(const void*) = nullptr;
};

// One operation a capture recorded: what a launch of the graph runs, and what it is.
struct GraphOp {
  std::function<void(CUresult sticky)> run;
  NodeInfo node;
  // The operations it depends on (indexes of earlier ones), as CUDA records them: the last
  // operation of its stream, and those of the streams it joined through events since.
  std::vector<uint32_t> deps;
};

// A graph: the operations stream capture recorded, in capture order. That order is a valid
// topological order of their dependencies (`deps`: the fork and join CUDA would record), so
// replay runs them one after another on the launch stream.
struct SimGraph {
  std::mutex mu;
  std::vector<GraphOp> ops;  // guarded by mu
  // Stream-ordered allocations its capture made (Capture::allocations): the graph's own.
  std::vector<std::shared_ptr<Allocation>> allocations;  // guarded by mu
  bool nodes_listed = false;  // node handles were given out (SimGpu::node_graphs_); by mu
  // A graph with allocation or free nodes has one executable graph at a time, as in CUDA: this
  // one, while it lives. Guarded by SimGpu::mu_.
  const struct SimGraphExec* sole_exec = nullptr;
};

struct SimGraphExec {
  std::shared_ptr<const std::vector<GraphOp>> ops;
  std::weak_ptr<SimGraph> sole_of;  // the graph it is the one executable graph of
  // The graph's allocations: each launch makes those the app freed live again when it is
  // enqueued, so that work queued after the launch may name them (and again in stream order,
  // after an earlier launch's free node ran).
  std::vector<std::shared_ptr<Allocation>> allocations;
};

// One stream capture: its graph under construction. Streams that joined it (by waiting on an
// event recorded in it) point at the same Capture.
struct Capture {
  uint64_t id = 0;
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  std::shared_ptr<SimGraph> graph;
  const void* origin = nullptr;  // the Stream that began it
  std::atomic<bool> invalidated{false};
  bool ended = false;  // guarded by SimGpu::mu_
  // Per stream in the capture (by Stream*): operations captured on it, and how many of them
  // another stream of the capture has waited for (through an event recorded after them). A
  // stream other than the origin with operations nobody waited for is an unjoined fork:
  // cuStreamEndCapture fails with CUDA_ERROR_STREAM_CAPTURE_UNJOINED. Guarded by graph->mu.
  struct StreamOps {
    uint64_t captured = 0;
    uint64_t joined = 0;
  };
  std::map<const void*, StreamOps> stream_ops;
  // Per stream in the capture: the operations its next one depends on (its last operation,
  // and the recording streams' at the events it waited on since), sorted, at most 256;
  // shared with the events recorded at that point (never changed, replaced). Guarded by
  // graph->mu.
  std::map<const void*, std::shared_ptr<const std::vector<uint32_t>>> frontier;
  size_t edges = 0;  // dependencies recorded so far (bounded); guarded by graph->mu
  // Stream-ordered allocations made in the capture, by address: the graph's own, live again
  // from its allocation node at each launch; guarded by graph->mu.
  std::map<CUdeviceptr, std::shared_ptr<Allocation>> allocations;
};

// A FIFO of operations executed in order by one worker thread (started on first use).
// At most `max_queued` operations wait in it (0 = no bound): enqueue blocks the caller until
// the worker makes room, except on the worker itself (a host callback submitting to its own
// stream), which could never make room. When the host cannot start a worker thread, enqueue
// runs the operation on the caller instead.
// Thread-safety: all members are safe to call from any thread.
class Stream {
 public:
  Stream(Context* ctx, unsigned flags, int priority, uint64_t id, bool legacy, size_t max_queued)
      : ctx_(ctx),
        flags_(flags),
        priority_(priority),
        id_(id),
        legacy_(legacy),
        max_queued_(max_queued) {}
  ~Stream() { shut_down(); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // Appends an operation that starts once every dep completed and the one before it finished.
  MarkerPtr enqueue(std::vector<MarkerPtr> deps, std::function<void(CUresult)> run);
  // Marker of the last queued operation, null when nothing was ever queued.
  MarkerPtr last();
  bool idle();
  void synchronize();
  // Lets queued work finish, then stops the worker.
  void shut_down();
  // Whether shut_down was called: work that waits for something else gives up.
  bool stopping() {
    std::lock_guard lock(mu_);
    return stopping_;
  }
  // The stream whose operation this thread runs now (its worker, or a caller running it in
  // place), null outside one: what an operation that waits asks whether to give up, since a
  // captured operation runs on whichever stream launches its graph.
  static Stream* running();

  Context* ctx() const { return ctx_; }
  unsigned flags() const { return flags_; }
  // The capture this stream records into, or null. Guarded by SimGpu::mu_.
  std::shared_ptr<Capture> capture;
  int priority() const { return priority_; }
  uint64_t id() const { return id_; }
  bool legacy() const { return legacy_; }
  // Blocking streams synchronise with the legacy default stream.
  bool blocking() const { return legacy_ || !(flags_ & CU_STREAM_NON_BLOCKING); }

 private:
  void work();

  Context* ctx_;
  unsigned flags_;
  int priority_;
  uint64_t id_;
  bool legacy_;
  size_t max_queued_;
  std::mutex mu_;
  std::condition_variable cv_;       // the worker waits for work
  std::condition_variable room_cv_;  // submitters wait for room in a full queue
  std::deque<Op> queue_;
  MarkerPtr last_;
  bool stopping_ = false;
  std::thread worker_;
};

// What records and waits see of an event: one state, shared by an event and the events other
// contexts opened from its interprocess handle (cuIpcOpenEventHandle).
struct EventState {
  std::mutex mu;
  MarkerPtr record;                 // latest record, null before the first
  std::weak_ptr<Capture> captured;  // recorded in this capture (a capture-time record)
  // Where in that capture: the recording stream and how many operations it had captured.
  const void* captured_stream = nullptr;
  uint64_t captured_at = 0;
  // What a wait on the record then depends on (the recording stream's frontier, shared).
  std::shared_ptr<const std::vector<uint32_t>> captured_frontier;
};

struct Event {
  Context* ctx = nullptr;
  unsigned flags = 0;
  std::shared_ptr<EventState> state = std::make_shared<EventState>();
  uint64_t ipc_nonce = 0;  // drawn at its first cuIpcGetEventHandle; guarded by SimGpu::mu_
};

// ---------------------------------------------------------------------------------------------
// Code

struct KernelDesc {
  std::string name;
  std::vector<ptx::ParamInfo> params;
  uint32_t param_bytes = 0;
  uint32_t static_shared = 0;
  uint32_t local_bytes = 0;
  uint32_t max_threads = 0;  // 0: no .maxntid
  uint32_t num_regs = 0;
  uint32_t thread_bytes = 0;  // local memory per thread of a launch (ptx::KernelInfo)
  uint64_t warp_bytes = 0;    // other interpreter memory per warp (ptx::KernelInfo)
  // The architecture the image was built for (its PTX's .target sm_NN): what
  // CU_FUNC_ATTRIBUTE_PTX_VERSION and BINARY_VERSION report; 0: unknown, as for a cubin-only
  // image (the device's).
  uint32_t target_arch = 0;
  // __cluster_dims__ (.reqnctapercluster; {0,0,0}: none) and .explicitcluster.
  ptx::Dim3 cluster{0, 0, 0};
  bool explicit_cluster = false;
};

struct VarDesc {
  std::string name;
  uint64_t size = 0;
  bool is_const = false;
  std::vector<uint8_t> initializer;
  bool is_managed = false;  // __managed__: its own page-aligned managed allocation
};

// A parsed image, immutable and shared by every context it is loaded into.
struct Image {
  std::shared_ptr<const ptx::Module> ptx;  // null for a cubin-only image: kernels cannot run
  std::vector<KernelDesc> kernels;
  std::vector<VarDesc> vars;
  const KernelDesc* find(std::string_view name) const {
    for (const KernelDesc& k : kernels)
      if (k.name == name) return &k;
    return nullptr;
  }
};

struct Module;
struct Library;
struct Kernel;

// Per-function settings that cuFuncSetAttribute / cuKernelSetAttribute change.
struct FuncSettings {
  int max_dynamic_shared = -1;  // -1: default (48 KiB minus static)
  int carveout = -1;
  CUfunc_cache cache = CU_FUNC_CACHE_PREFER_NONE;
};

struct Function {
  // Which of a function's settings were set on it (Function::set_here).
  enum : uint8_t { kOwnDynamicShared = 1, kOwnCarveout = 2, kOwnCache = 4 };
  Module* module = nullptr;
  const KernelDesc* desc = nullptr;
  // What cuFuncSetAttribute and cuFuncSetCacheConfig set on this function, through its own
  // handle or its library kernel's in this context (guarded by SimGpu::mu_).
  FuncSettings settings;
  // The settings set on it (kOwn* bits): each wins over its library kernel's on the device,
  // whether the kernel's was set before or after, as the driver documents for
  // cuKernelSetAttribute (guarded by SimGpu::mu_).
  uint8_t set_here = 0;
};

struct Module {
  Context* ctx = nullptr;
  std::shared_ptr<const Image> image;
  std::vector<std::unique_ptr<Function>> functions;  // parallel to image->kernels
  // Device addresses of the image's variables; immutable after load, shared with launches.
  std::shared_ptr<const std::unordered_map<std::string, uint64_t>> var_addresses;
  std::vector<CUdeviceptr> var_allocations;
  Library* library = nullptr;  // set when the module is a library's instance in ctx
};

struct Kernel {
  Library* library = nullptr;
  const KernelDesc* desc = nullptr;
  std::map<int, FuncSettings> per_device;  // guarded by SimGpu::mu_
};

// Context-independent code: instantiated as a Module in each context that uses it.
struct Library {
  std::shared_ptr<const Image> image;
  std::vector<std::unique_ptr<Kernel>> kernels;
  std::map<Context*, Module*> instances;  // guarded by SimGpu::mu_
};

// ---------------------------------------------------------------------------------------------
// Green-context resources (sim_green.cc)

// A resource descriptor: the SMs a green context made from it gets. Immutable.
struct ResourceDesc {
  int device = 0;
  uint32_t first_sm = 0;  // lowest SM of the groups it holds
  uint32_t sm_count = 0;
};

// ---------------------------------------------------------------------------------------------
// Contexts

// A context's reservations of device memory are asked of `reserve` first (set once by the
// server; empty: nobody to ask). Shared with the heaps that charge through it.
struct ReservationHook {
  std::mutex mu;
  std::function<bool(int, uint64_t, bool)> reserve;  // guarded by mu
  bool take(int device, uint64_t bytes) {
    std::lock_guard lock(mu);
    return !reserve || reserve(device, bytes, false);
  }
  void give_back(int device, uint64_t bytes) {
    std::lock_guard lock(mu);
    if (reserve) reserve(device, bytes, true);
  }
};

struct Context {
  uint64_t id = 0;
  int device = 0;
  bool primary = false;
  std::atomic<bool> alive{true};
  // First fault of asynchronous work; once set every later call in the context returns it.
  std::atomic<CUresult> sticky{CUDA_SUCCESS};

  // Guarded by SimGpu::mu_.
  unsigned flags = 0;
  std::shared_ptr<Stream> null_stream;
  std::set<std::shared_ptr<Stream>> streams;  // created streams
  std::map<std::thread::id, std::shared_ptr<Stream>> per_thread_streams;
  std::set<Event*> events;
  std::set<Module*> modules;
  std::set<SimArray*> arrays;  // not the levels of its mipmaps
  std::set<SimMipmap*> mipmaps;
  std::set<uint64_t> tex_objects;  // texture and surface objects
  std::set<Context*> peers;
  std::atomic<uint64_t> session{0};  // the server session it was made for (SessionObjects)
  size_t limits[10] = {1024, 1 << 20, 8 << 20, 2, 2048, 128, 0, 48 << 10, 0, 1};
  CUfunc_cache cache_config = CU_FUNC_CACHE_PREFER_NONE;
  CUsharedconfig shmem_config = CU_SHARED_MEM_CONFIG_DEFAULT_BANK_SIZE;
  // Runs context-wide event records (cuCtxRecordEvent, cuGreenCtxRecordEvent): created on
  // first use, guarded by SimGpu::mu_.
  std::shared_ptr<Stream> aside_stream;

  // A green context (sim_green.cc) runs on SMs [first_sm, first_sm + sm_count) of its device;
  // an ordinary one on all of them (sm_count 0). Immutable after creation.
  bool green = false;
  uint32_t first_sm = 0;
  uint32_t sm_count = 0;

  // Device printf output of finished launches, oldest first, at most kPendingPrintfBytes (the
  // excess is dropped). Guarded by printf_mu.
  static constexpr size_t kPendingPrintfBytes = 4 << 20;
  std::mutex printf_mu;
  std::string printf_output;

  // Device-side malloc's heap: outlives launches, as CUDA's does (ptx.h "Device heap"). Its
  // capacity is CU_LIMIT_MALLOC_HEAP_SIZE until the first malloc reserves it.
  std::shared_ptr<ptx::DeviceHeap> heap;  // guarded by SimGpu::mu_
  // Who is asked first when the heap is reserved (SessionObjects::set_context_reservations).
  std::shared_ptr<ReservationHook> reservations = std::make_shared<ReservationHook>();

  void set_sticky(CUresult e) {
    CUresult expected = CUDA_SUCCESS;
    sticky.compare_exchange_strong(expected, e);
  }
};

}  // namespace cuwire::server::sim
