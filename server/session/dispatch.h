// What generated dispatch code (server_dispatch.cc) needs from the server: a reader over a
// call's arguments, a writer for its reply, and the calling session's tables.
//
// Thread-safety: all three belong to one session and are used by its one thread.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "protocol/args.h"
#include "protocol/handle_kind.h"
#include "protocol/value_sizes.h"
#include "protocol/wire_formats.h"
#include "server/backend/backend.h"
#include "server/tenancy/sm_partition.h"

namespace cuwire::server {

// A count or size computed from client values. A negative operand, or a step that overflows or
// goes below zero, makes the result invalid: a product that wraps can never pass a range check
// as a small size. The generated dispatch computes every manifest size expression with it.
// The value of an enum field of a struct a client sent, read as its underlying integer: the
// bytes may hold a value the enum does not have, and loading such an enum is undefined.
template <typename E>
requires std::is_enum_v<E> std::underlying_type_t<E> wire_enum(const E& field) {
  std::underlying_type_t<E> v;
  std::memcpy(&v, &field, sizeof v);
  return v;
}
template <typename E>
requires std::is_enum_v<E>
constexpr std::underlying_type_t<E> enum_value(E e) {
  return static_cast<std::underlying_type_t<E>>(e);
}

class CheckedSize {
 public:
  template <typename T>
  requires std::is_integral_v<T> || std::is_enum_v<T>
  constexpr CheckedSize(T v) {  // NOLINT(google-explicit-constructor): expressions mix literals
    if constexpr (std::is_enum_v<T>) {
      *this = CheckedSize(static_cast<std::underlying_type_t<T>>(v));
    } else if constexpr (std::is_signed_v<T>) {
      ok_ = v >= 0;
      v_ = ok_ ? static_cast<uint64_t>(v) : 0;
    } else {
      v_ = static_cast<uint64_t>(v);
    }
  }

  bool ok() const { return ok_; }
  // Only meaningful when ok().
  size_t value() const { return static_cast<size_t>(v_); }
  // The value, or SIZE_MAX when it is not valid.
  size_t value_or_max() const { return ok_ ? static_cast<size_t>(v_) : SIZE_MAX; }
  // A size expression's conditions (`Height ? ... : 0`) test the value.
  explicit operator bool() const { return v_ != 0; }

  friend CheckedSize operator+(CheckedSize a, CheckedSize b) {
    uint64_t r = 0;
    const bool overflowed = __builtin_add_overflow(a.v_, b.v_, &r);
    return combine(r, a, b, overflowed);
  }
  friend CheckedSize operator-(CheckedSize a, CheckedSize b) {
    uint64_t r = 0;
    const bool overflowed = __builtin_sub_overflow(a.v_, b.v_, &r);
    return combine(r, a, b, overflowed);
  }
  friend CheckedSize operator*(CheckedSize a, CheckedSize b) {
    uint64_t r = 0;
    const bool overflowed = __builtin_mul_overflow(a.v_, b.v_, &r);
    return combine(r, a, b, overflowed);
  }
  friend CheckedSize operator/(CheckedSize a, CheckedSize b) {
    return combine(b.v_ ? a.v_ / b.v_ : 0, a, b, b.v_ == 0);
  }

 private:
  static CheckedSize combine(uint64_t value, CheckedSize a, CheckedSize b, bool overflowed) {
    CheckedSize out(value);
    out.ok_ = a.ok_ && b.ok_ && !overflowed && value <= static_cast<uint64_t>(SIZE_MAX);
    return out;
  }
  uint64_t v_ = 0;
  bool ok_ = true;
};

class ArgReader {
 public:
  ArgReader(std::span<const uint8_t> args, std::span<const uint8_t> bulk)
      : cursor_(args), bulk_(bulk) {}

  template <typename T>
  bool get(T* v) {
    return cursor_.get(v);
  }
  bool get_string(const char** out);
  // An in-array inside the message: its byte length must be a multiple of elem_size.
  bool get_array(std::span<const uint8_t>* out, size_t elem_size);
  // A void* in-array from the frame's bulk bytes: u64 length in args, bytes in bulk, in order.
  bool get_bulk(std::span<const uint8_t>* out);
  // An in-array of handle ids, translated to backend handles.
  template <typename H>
  CUresult get_handles(class SessionContext& cx, HandleKind kind, std::vector<H>* out);
  // A request that is one handle id and nothing more: *id, and its backend handle, looked up as
  // SessionContext::lookup_owned does where `owned` (a call that releases or changes it), else
  // as lookup does.
  template <typename H>
  CUresult get_only_handle(class SessionContext& cx, HandleKind kind, bool owned, uint64_t* id,
                           H* out);
  // A request that is one device ordinal and nothing more, mapped as SessionContext::device_in
  // maps it.
  CUresult get_only_device(const class SessionContext& cx, CUdevice* dev);

  // The next n bytes of the frame's bulk (after the u64 length of a get_bulk array was read
  // with get): false when fewer are left.
  bool take_bulk(uint64_t n, std::span<const uint8_t>* out);

  bool at_end() const { return cursor_.at_end() && bulk_pos_ == bulk_.size(); }
  // What a call with undecodable arguments returns; the session logs it.
  CUresult malformed() {
    malformed_ = true;
    return CUDA_ERROR_INVALID_VALUE;
  }
  bool was_malformed() const { return malformed_; }

 private:
  ArgCursor cursor_;
  std::span<const uint8_t> bulk_;
  size_t bulk_pos_ = 0;
  std::deque<std::string> strings_;  // stable storage for get_string
  bool malformed_ = false;
};

class ReplyWriter {
 public:
  explicit ReplyWriter(uint64_t max_bulk) : max_bulk_(max_bulk) {}

  template <typename T>
  void put(const T& v) {
    outs_.put(v);
  }
  void put_bytes(const void* p, size_t n) { outs_.append(p, n); }
  // Room for a void* out-array, sent as the reply's bulk bytes.
  bool reserve_bulk_ok(size_t n) const { return bulk_.size() + n <= max_bulk_; }
  uint8_t* add_bulk(size_t n);

  std::span<const uint8_t> outs() const { return outs_.data(); }
  std::span<const uint8_t> bulk() const { return bulk_; }
  void clear() {
    outs_.clear();
    bulk_.clear();
  }

 private:
  ArgBuffer outs_;
  std::vector<uint8_t> bulk_;
  uint64_t max_bulk_;
};

// How many handles one session may hold: a client that creates streams, events or modules
// in a loop is refused (CUDA_ERROR_OUT_OF_MEMORY) before the backend makes one more, whatever
// the backend's own limits are.
struct HandleLimits {
  size_t max_contexts = 64;
  size_t max_streams = 1024;             // across the session's contexts
  size_t max_handles = size_t{1} << 16;  // every kind together
};

// The calling session's view: its backend, its handles and its allocations. Every handle and
// device pointer a client sends is checked here before the backend sees it.
class MemoryAccount;
struct StreamedIo;

// What watches the calls that put work on a GPU (manifest: work), for admission and GPU-time
// accounting (compute_scheduler.h). Called on the session's thread, in the call's context.
class WorkGate {
 public:
  virtual ~WorkGate() = default;
  // Before the work is submitted: may hold the call until the session may run, or refuse it
  // (its result is the call's).
  virtual CUresult before_work(CUstream stream) = 0;
  // After the backend answered the submission (rc): every admitted call comes here.
  // `complete`: the work is done already (a synchronous copy): nothing to watch on the GPU.
  virtual void after_work(CUstream stream, CUresult rc, bool complete) = 0;
  // Context `ctx_id` (0: every context of the session) is about to be destroyed: whatever the
  // gate made in it goes first.
  virtual void retire_context(uint64_t ctx_id) = 0;
  // Whether admission in the current context shares its GPU among tenants, so that work held
  // in flight keeps others waiting: then nothing waits on the client while admitted.
  virtual bool shares_gpu() = 0;
};

class SessionContext;
class HostCallChannel;
class SessionObjects;
// Forgets the interprocess handles `owner` made of its allocation at `base`, freed now; with
// base 0, every handle it made (its session ends) (server/calls/ipc.cc).
void ipc_forget(const SessionContext* owner, CUdeviceptr base);

// Unmaps, releases and frees on the backend what the session still holds of virtual memory
// management, at its end (server/calls/vmm.cc).
void vmm_reclaim(SessionContext& cx);
// What a shareable handle names: a physical allocation (cuMemCreate) or a memory pool.
enum class ShareableKind { kMemory, kPool };
// Ends the shareable handles `owner` exported of its physical allocation or pool `handle` (the
// backend's; released now) (server/calls/shareable.cc).
void shareable_forget(const SessionContext* owner, ShareableKind kind, uint64_t handle);
// Ends every shareable handle `owner` exported (its session ends).
void shareable_forget_all(const SessionContext* owner);

class SessionContext {
 public:
  explicit SessionContext(Backend& api, HandleLimits limits = {});
  ~SessionContext();
  SessionContext(const SessionContext&) = delete;
  SessionContext& operator=(const SessionContext&) = delete;

  Backend& backend() { return api_; }

  // Client id -> backend handle. Null and the special stream values pass through; an id this
  // session was not given is CUDA_ERROR_INVALID_HANDLE (INVALID_CONTEXT for contexts).
  template <typename H>
  CUresult lookup(HandleKind kind, uint64_t id, H* out) {
    void* p = nullptr;
    CUresult e = lookup_raw(kind, id, &p);
    *out = reinterpret_cast<H>(p);
    return e;
  }
  CUresult lookup_raw(HandleKind kind, uint64_t id, void** out) const;
  // As lookup, for a call that releases or changes the handle: a shared handle (see
  // export_shared) is CUDA_ERROR_NOT_PERMITTED.
  template <typename H>
  CUresult lookup_owned(HandleKind kind, uint64_t id, H* out) {
    void* p = nullptr;
    CUresult e = lookup_raw(kind, id, &p);
    if (e == CUDA_SUCCESS && is_shared(id)) e = CUDA_ERROR_NOT_PERMITTED;
    // A module or library about to go (its unload): host functions viewing its globals
    // (__managed__ variables) finish first.
    if (e == CUDA_SUCCESS && (kind == HandleKind::kModule || kind == HandleKind::kLibrary)) {
      wait_globals_unused(id);
    }
    *out = e == CUDA_SUCCESS ? reinterpret_cast<H>(p) : H{};
    return e;
  }
  void wait_globals_unused(uint64_t owner) const;
  bool is_shared(uint64_t id) const {
    auto it = handles_.find(id);
    return it != handles_.end() && it->second.shared;
  }
  // A client-minted id must be in the client range and unused, and the session must have room
  // for one more handle of `kind`.
  CUresult check_mint(uint64_t id, HandleKind kind) const;
  // Room for `n` more handles of `kind` under the session's HandleLimits; checked before the
  // backend makes them.
  CUresult check_room(HandleKind kind, size_t n = 1) const;
  template <typename H>
  CUresult bind(HandleKind kind, uint64_t id, H handle) {
    return bind_raw(kind, id, reinterpret_cast<void*>(handle));
  }
  CUresult bind_raw(HandleKind kind, uint64_t id, void* handle);
  // Backend handle -> id, assigning a server id the first time a handle is seen. A handle
  // derived from another (a function from its module) names that `parent` id: releasing the
  // parent releases it too, so a backend that reuses the memory of an unloaded module's
  // functions can never make an old id name a new function.
  template <typename H>
  uint64_t export_handle(HandleKind kind, H handle, uint64_t parent = 0) {
    return export_raw(kind, reinterpret_cast<void*>(handle), parent);
  }
  uint64_t export_raw(HandleKind kind, void* handle, uint64_t parent = 0, bool shared = false);
  // The id the session already has for a backend handle, 0 when it has none: for answers that
  // must never make one up (a context a call reports that the session did not make).
  template <typename H>
  uint64_t known_id(HandleKind kind, H handle) const {
    auto it = by_handle_.find({kind, reinterpret_cast<void*>(handle)});
    return it == by_handle_.end() ? 0 : it->second;
  }
  // Whether context id `ctx_id` is a green context's (cuGreenCtxCreate made it): it is
  // destroyed only with its green context.
  // Whether handle `id` was derived from a handle of `kind` (a mipmap level's array from its
  // mipmapped array).
  bool derived_from(uint64_t id, HandleKind kind) const {
    auto it = handles_.find(id);
    if (it == handles_.end() || it->second.parent == 0) return false;
    auto parent = handles_.find(it->second.parent);
    return parent != handles_.end() && parent->second.kind == kind;
  }
  bool is_green_context_ctx(uint64_t ctx_id) const {
    auto it = handles_.find(ctx_id);
    if (it == handles_.end() || it->second.parent == 0) return false;
    auto parent = handles_.find(it->second.parent);
    return parent != handles_.end() && parent->second.kind == HandleKind::kGreenContext;
  }
  // A handle that is the backend's own and every session's (a device's default memory pool):
  // the session may use it, never release or change it, and reclaim leaves it alone.
  template <typename H>
  uint64_t export_shared(HandleKind kind, H handle) {
    return export_raw(kind, reinterpret_cast<void*>(handle), 0, true);
  }

  // A device's current memory pool as this session set it (cuDeviceSetMemPool), by device
  // ordinal: the backend's own current pool is every session's and is never changed. 0: none.
  uint64_t current_pool(int device) const {
    auto it = current_pools_.find(device);
    return it == current_pools_.end() ? 0 : it->second;
  }
  void set_current_pool(int device, uint64_t pool_id) { current_pools_[device] = pool_id; }
  // The session's default memory pool of a backend device, 0 before it is made. CUDA's default
  // pool is the process's; the backend's is every session's, whose attributes and trimming
  // would reach (and whose counters would show) other tenants' memory. So each session gets a
  // pool of its own in its place, made on first use (server/calls/pools.cc session_default_pool).
  uint64_t default_pool(int device) const {
    auto it = default_pools_.find(device);
    return it == default_pools_.end() ? 0 : it->second;
  }
  void set_default_pool(int device, uint64_t pool_id) { default_pools_[device] = pool_id; }
  bool is_default_pool(uint64_t pool_id) const {
    for (const auto& [dev, id] : default_pools_)
      if (id == pool_id) return true;
    return false;
  }
  // A pool the session destroyed is no device's current pool any more: the default is again.
  void forget_pool(uint64_t pool_id) {
    std::erase_if(current_pools_, [&](const auto& kv) { return kv.second == pool_id; });
  }

  // The context the session's current call runs in (its id; 0 for none). Handles and memory
  // created by a call belong to it, and go when it is destroyed.
  void set_current_context(uint64_t id) { current_context_ = id; }
  uint64_t current_context() const { return current_context_; }
  // Destroys on the backend, and forgets, everything the session created in context `ctx_id`
  // (not the context itself), in the order reclaim uses.
  void release_context_contents(uint64_t ctx_id);
  // Forgets `id` and every handle derived from it.
  void release(uint64_t id);

  // Parameter sizes of a function or kernel handle, kept until the handle is released.
  const std::vector<formats::ParamSlot>* params_of(uint64_t id) const {
    auto it = param_layouts_.find(id);
    return it == param_layouts_.end() ? nullptr : &it->second;
  }
  const std::vector<formats::ParamSlot>* remember_params(uint64_t id,
                                                         std::vector<formats::ParamSlot> slots) {
    return &(param_layouts_[id] = std::move(slots));
  }
  size_t handle_count() const { return handles_.size(); }

  // Devices. The session sees the backend's devices `devices[0..n)` as its devices 0..n-1
  // (placement.h: the GPU it was placed on first); until set_devices, every backend device as
  // itself. Device ordinals from the client are translated in (CUDA_ERROR_INVALID_DEVICE for
  // one the session does not have), ordinals going back are translated out.
  void set_devices(std::vector<CUdevice> devices) { devices_ = std::move(devices); }
  CUresult device_in(CUdevice* d) const;
  CUresult device_in(CUmemLocation* l) const;
  CUresult device_in(CUmemAccessDesc* a) const { return device_in(&a->location); }
  CUresult device_in(CUmemPoolProps* p) const { return device_in(&p->location); }
  CUresult device_out(CUdevice* d) const;
  // How many devices the session sees, of `backend_count`.
  int device_count(int backend_count) const;

  // SM partitions (sm_partition.h): the session's tenant's, by backend device. Contexts the
  // session makes on a device where it has one are green contexts of it.
  void set_partitions(std::map<int, SmShare> partitions) { partitions_ = std::move(partitions); }
  const SmShare* partition(int device) const {
    auto it = partitions_.find(device);
    return it == partitions_.end() ? nullptr : &it->second;
  }
  // The partition on `device` as this session's backend may use it: its descriptor, and the SM
  // resource it gives. A relay's session in an upstream session of its own makes its own on
  // first use (the server's live in another upstream session, which this one cannot name; its
  // own end with its upstream session); every other session uses the server's.
  CUresult partition_desc(int device, CUdevResourceDesc* out);
  CUresult partition_resource(int device, CUdevResource* out);
  // A context of the session on backend device `device` (a green context of its partition
  // there), and its end: every context the session makes and destroys goes through these.
  // make_context may leave the new context current (cuCtxCreate does).
  CUresult make_context(CUdevice device, unsigned flags, CUcontext* out);
  CUresult destroy_context(CUcontext ctx);
  // A green context of descriptor `desc` on backend device `device`, with its CUcontext
  // (cuCtxFromGreenCtx): destroy_context(*ctx) ends both.
  CUresult make_green_context(CUdevResourceDesc desc, CUdevice device, CUgreenCtx* green,
                              CUcontext* ctx);

  // SM resources (green contexts) the session was handed: the backend's structs stay here and
  // the client's copies name them by id (protocol/wire_formats.h: ResourceRef). The same resource
  // asked for again keeps its id; past kMaxResources the oldest is forgotten (an id no longer known
  // is refused as a resource the session never had).
  static constexpr size_t kMaxResources = 2048;  // a split's groups and remainder fit
  uint64_t keep_resource(const CUdevResource& r);
  const CUdevResource* find_resource(uint64_t id) const;
  // Resource descriptors have no destroy call in CUDA: a session may make this many.
  static constexpr size_t kMaxDescriptors = 256;
  CUresult take_descriptor() {
    if (descriptors_ >= kMaxDescriptors) return CUDA_ERROR_OUT_OF_MEMORY;
    ++descriptors_;
    return CUDA_SUCCESS;
  }
  void give_back_descriptor() { --descriptors_; }  // the backend did not make it
  // As export_handle, for a handle made in context `ctx_id` rather than the current one (a
  // green context's streams): it goes when that context does.
  template <typename H>
  uint64_t export_in_context(HandleKind kind, H handle, uint64_t ctx_id) {
    const uint64_t saved = current_context_;
    current_context_ = ctx_id;
    const uint64_t id = export_handle(kind, handle);
    current_context_ = saved;
    return id;
  }

  // The bulk bytes of the call being executed still on the connection (server/calls/copies.h); null
  // for calls whose bulk is all in memory.
  void set_streamed(const StreamedIo* io) { streamed_ = io; }
  const StreamedIo* streamed() const { return streamed_; }

  // Work on a GPU (WorkGate); null gate: nothing watches.
  void set_work_gate(WorkGate* gate) { work_gate_ = gate; }
  CUresult before_work(CUstream stream) {
    return work_gate_ ? work_gate_->before_work(stream) : CUDA_SUCCESS;
  }
  void after_work(CUstream stream, CUresult rc, bool complete = false) {
    if (work_gate_) work_gate_->after_work(stream, rc, complete);
  }
  // before_work, `submit()` and after_work: for hand-written work calls.
  template <typename F>
  CUresult submit_work(CUstream stream, F&& submit) {
    if (CUresult e = before_work(stream)) return e;
    const CUresult rc = submit();
    after_work(stream, rc);
    return rc;
  }
  // See WorkGate::shares_gpu; false without a gate.
  bool work_shares_gpu() { return work_gate_ && work_gate_->shares_gpu(); }
  // As submit_work, for work that is done when `run()` returns (a synchronous copy): its GPU
  // time is the call's, and nothing is left to watch.
  template <typename F>
  CUresult run_work(CUstream stream, F&& run) {
    if (CUresult e = before_work(stream)) return e;
    const CUresult rc = run();
    after_work(stream, rc, true);
    return rc;
  }

  // The session loaded code that calls device printf (check_image saw it): its synchronizing
  // calls collect output where the backend prints it on the server's stdout (StdoutCapture).
  void note_may_print() { may_print_ = true; }
  bool may_print() const { return may_print_; }

  // Device memory this session allocated.
  CUresult check_range(CUdeviceptr p, size_t n) const;
  // Whether [p, p + n) lies in one allocation or one module global of the session (not an
  // import or a mapping): memory whose free or unload waits for host functions viewing it.
  bool is_allocated(CUdeviceptr p, size_t n) const;
  // Whether p is the base of an allocation of the session (not an import, a global or a
  // mapping).
  bool is_allocation_base(CUdeviceptr p) const { return p != 0 && allocations_.count(p); }
  // The backend is a relay (cuwire's client library): its managed memory is host memory of
  // this process, which the host may touch while kernels run, whatever the device reports.
  // `own_upstream_session`: the session has an upstream session of its own (upstream.h), which
  // the upstream keeps apart from every other; else it shares the relay's one.
  void set_relay(bool own_upstream_session = false) {
    relay_ = true;
    relay_apart_ = own_upstream_session;
  }
  bool relay() const { return relay_; }
  // Whether the backend keeps this session's objects apart from other sessions' by itself:
  // the sim (SessionObjects), or a relay whose session is an upstream session of its own.
  bool backend_keeps_sessions_apart() const {
    return session_objects_ != nullptr || (relay_ && relay_apart_);
  }
  // Whether p may be freed: an allocation of the session (its base), or a pointer it imported
  // from another session's pool.
  CUresult check_free(CUdeviceptr p) const;
  // The backend keeps one session's objects apart from another's by context (the sim, which
  // is told each context's session) or is a relay, whose upstream server does.
  bool backend_keeps_imports_apart() const;
  // The backend keeps each session's objects apart by context (SessionObjects: the sim), and
  // asks the session's tenant itself for what it reserves for a context on its own (its device
  // heap). Not a relay: its sessions are one session of its upstream server.
  bool backend_charges_reservations() const { return session_objects_ != nullptr; }
  // Whether the session holds an import (of any kind, in any context) at p.
  bool has_import(CUdeviceptr p) const { return imports_.count(p) > 0; }
  // Records memory the backend just allocated in the current context, charged to the session's
  // memory account (set_account) on the context's device. An allocation over the account's cap
  // is freed again and the call's answer is CUDA_ERROR_OUT_OF_MEMORY.
  CUresult on_alloc(CUdeviceptr p, size_t n);
  // Device memory the session may copy to and from but never frees: module globals and
  // constants. They belong to the module or library handle `owner` and go when it is released.
  void on_global(CUdeviceptr p, size_t n, uint64_t owner);
  void on_free(CUdeviceptr p);
  // Graph-owned memory (stream-ordered allocations made in a capture): the graph allocates it
  // again, at the same address, at each launch after the app freed it outside the graph. The
  // session records such an allocation with the capture (note_stream_alloc, after on_alloc),
  // keeps it with the graph the capture made (end_capture_allocs) and the graph's executables
  // (instantiate_allocs), and before each launch of one charges and records again what the app
  // freed since (revive_graph_allocs: CUDA_ERROR_OUT_OF_MEMORY over the cap, nothing launched;
  // CUDA_ERROR_INVALID_VALUE, as CUDA, when the app did not free what the last launch made and
  // the executable was not instantiated to free it on launch).
  // A free captured in the same capture ends it inside the graph: it is not revived.
  void note_stream_alloc(CUstream stream, CUdeviceptr p, size_t n);
  void end_capture_allocs(uint64_t capture, uint64_t graph_id);
  void instantiate_allocs(uint64_t graph_id, uint64_t exec_id, bool auto_free);
  CUresult revive_graph_allocs(uint64_t exec_id);
  // The backend's id of the capture `stream` takes part in; 0: none.
  uint64_t capture_id(CUstream stream);
  // Device memory of another session this one opened an interprocess handle of
  // (cuIpcOpenMemHandle), or imported from another session's pool (cuMemPoolImportPointer,
  // `pool`): copied to and from like an allocation, never freed, until closed (a pool's: until
  // the session frees the pointer, which ends the import, not the memory). It belongs to the
  // current context, and goes when that context is destroyed. Opened again, it is counted
  // (the backend returns the same pointer, as the driver does); each close takes one count,
  // and the last ends it.
  void on_import(CUdeviceptr p, size_t n, bool pool = false) {
    ++imports_.try_emplace(p, Import{n, current_context_, 0, pool}).first->second.opens;
  }
  // Closes an opened interprocess handle (not a pool's import): false when p is none; else
  // *left gets the opens that remain.
  bool drop_import(CUdeviceptr p, uint32_t* left) {
    auto it = imports_.find(p);
    if (it == imports_.end() || it->second.pool) return false;
    *left = --it->second.opens;
    if (*left == 0) imports_.erase(it);
    return true;
  }
  // The session's host-call channel (host_calls.h): where host functions go; null: none.
  void set_host_calls(std::shared_ptr<HostCallChannel> c) { host_calls_ = std::move(c); }
  HostCallChannel* host_calls() const { return host_calls_.get(); }
  // Whose interprocess handles this session may open: its tenant's name (set once at start).
  void set_ipc_tenant(std::string tenant) { ipc_tenant_ = std::move(tenant); }
  const std::string& ipc_tenant() const { return ipc_tenant_; }
  // Device memory a handle holds (an array's texels, a module's or library's globals), charged
  // like an allocation: before the backend makes the handle (manifest: holds=FN), refunded when
  // the call fails, attached to the handle once it exists and uncharged when it is released.
  //
  // Physical memory shared through a shareable handle (server/calls/shareable.cc) stays charged to
  // the exporting tenant while any session holds it: the charge then moves into a SharedCharge
  // that every holder's Charge points to, and the last one to let go uncharges the tenant.
  struct SharedCharge {
    SharedCharge(MemoryAccount* a, int d, uint64_t n) : account(a), device(d), bytes(n) {}
    ~SharedCharge();  // uncharges the tenant
    SharedCharge(const SharedCharge&) = delete;
    SharedCharge& operator=(const SharedCharge&) = delete;
    MemoryAccount* const account;  // a tenant: lives as long as the server
    const int device;
    const uint64_t bytes;
  };
  struct Charge {
    uint64_t bytes = 0;
    int device = 0;
    bool charged = false;                  // counted in this session's allocated bytes
    std::shared_ptr<SharedCharge> shared;  // set: the tenant's charge is held there
  };
  // Charges n bytes on the current context's device (with no context current, on the session's
  // device 0): CUDA_ERROR_OUT_OF_MEMORY over the cap.
  CUresult precharge(CheckedSize n, Charge* out);
  // The same on backend device `device`, whichever context is current.
  CUresult precharge_on(int device, CheckedSize n, Charge* out);
  void refund(Charge* c);
  // Device memory a limit of the current context reserves (cuCtxSetLimit: the stack, the
  // device heap, the printf FIFO), `want` bytes for the new value where the context had
  // `before` bytes before the session first set it: what it reserves beyond that first figure
  // is charged to the tenant before set() asks the backend for it (CUDA_ERROR_OUT_OF_MEMORY
  // over the cap, set() not called), given back when lowered or when the context goes. The
  // context's own footprint, its first figures included, is charged with the context.
  CUresult reserve_for_limit(CUlimit limit, uint64_t before, CheckedSize want,
                             const std::function<CUresult()>& set);
  // Device memory each context the session makes spends of its own (code, stacks, heap and
  // printf FIFO at their first figures), charged to the tenant with the context
  // (SessionConfig::context_memory); 0: none.
  void set_context_footprint(uint64_t bytes) { context_footprint_ = bytes; }
  uint64_t context_footprint() const { return context_footprint_; }
  // The tenant's charge of `c` as one several sessions may hold (see SharedCharge); null when
  // nothing is charged to a tenant.
  std::shared_ptr<SharedCharge> share(Charge* c);
  // The handle `handle` of `kind`, just exported, holds `c` from now on (c is emptied).
  void hold(HandleKind kind, void* handle, Charge* c);
  template <typename H>
  void hold(HandleKind kind, H handle, Charge* c) {
    hold(kind, reinterpret_cast<void*>(handle), c);
  }
  // The module-scope variables of the image check_image last passed (image.h), in bytes: what
  // loading it holds (holds=module_globals_bytes). Not valid when they cannot be counted.
  void set_image_globals(uint64_t bytes) { image_globals_ = bytes; }
  CheckedSize image_globals_bytes() const {
    return image_globals_ == UINT64_MAX ? CheckedSize(-1) : CheckedSize(image_globals_);
  }
  // Virtual memory management (server/calls/vmm.cc): the session's reserved ranges, its physical
  // allocations (each charged to its tenant) and its mappings, which it may copy to and from
  // like allocations. Unmapped parts of a reservation are no memory of the session's.
  struct VmmState {
    // A physical allocation: charged from its creation until the app released every
    // reference (cuMemCreate's, cuMemRetainAllocationHandle's) and unmapped every mapping.
    struct Handle {
      Charge charge;
      int refs = 1;     // the app's references
      size_t maps = 0;  // mappings of it
    };
    struct Mapping {
      size_t size = 0;
      uint64_t handle = 0;
    };
    std::map<CUdeviceptr, size_t> reservations;
    std::map<uint64_t, Handle> handles;
    std::map<CUdeviceptr, Mapping> mappings;
  };
  VmmState& vmm() { return vmm_; }
  size_t allocated_bytes() const { return allocated_bytes_; }
  // The tenant's ledger this session's memory is charged to (tenants.h); null: not counted.
  void set_account(MemoryAccount* account) { account_ = account; }
  // cuMemGetInfo and cuDeviceTotalMem as the session's tenant sees `device`.
  void memory_view(int device, size_t* free, size_t* total) const;
  size_t allocation_count() const { return allocations_.size(); }

  // Error of a fire-and-forget call, kept for the next synchronising call. The first one wins.
  void defer_error(CUresult e) {
    if (deferred_ == CUDA_SUCCESS) deferred_ = e;
  }
  CUresult take_deferred_error() {
    CUresult e = deferred_;
    deferred_ = CUDA_SUCCESS;
    return e;
  }

  // Texture and surface objects this session created. Their values are the backend's own:
  // kernels receive them as parameters, which the server passes through untouched, so they
  // cannot be renamed like handles. A value the session did not create is refused.
  void on_object(bool surface, uint64_t value) { objects_[{surface, value}] = current_context_; }
  bool owns_object(bool surface, uint64_t value) const { return objects_.count({surface, value}); }
  void forget_object(bool surface, uint64_t value) { objects_.erase({surface, value}); }

  // Frees everything the session still holds, newest handles first; called at disconnect.
  void reclaim();
  // Forgets everything without a backend call: for objects that are gone already (a relay's
  // lost upstream session).
  void forget_all();

 private:
  struct HandleEntry {
    HandleKind kind;
    void* handle;
    uint64_t parent = 0;
    uint64_t context = 0;  // the context it was created in; 0: not bound to one
    bool shared = false;
    Charge charge;  // memory it holds (hold())
  };
  struct Allocation {
    size_t size;     // what the app asked for: the range it may use
    size_t charged;  // what the device spends for it (granularity())
    uint64_t context;
    int device;  // charged to the account there
  };
  // Charges an allocation of n bytes in the current context to the account, at what the device
  // spends for it (granularity()); *device: the context's device, *spent: the bytes charged.
  CUresult charge(size_t n, int* device, size_t* spent);
  // The step in which the backend spends device memory on `device` for one allocation, asked
  // of the backend once per session: the distance between two one-byte allocations in the
  // current context when it is on `device` (256 bytes on the sim), else kFallbackGranularity.
  size_t granularity(int device);
  static constexpr size_t kFallbackGranularity = 512;  // cudaMalloc's step on NVIDIA GPUs
  // Charges n bytes on backend device `device` to the account (not null).
  CUresult charge_on(int device, size_t n);
  // Frees the allocation on the backend (with `free_on_backend`), uncharges and forgets it.
  void drop_allocation(std::map<CUdeviceptr, Allocation>::iterator it, bool free_on_backend);
  // Destroys on the backend, newest first and in dependency order, and forgets the handles,
  // texture/surface objects and allocations for which doomed(kind, context) is true (objects
  // and allocations are asked with kind kTexref and kArray).
  template <typename Pred>
  void destroy_where(Pred doomed);
  uint64_t context_of_new(HandleKind kind) const;
  Backend& api_;
  // The backend as one that keeps each session's objects apart (the sim); null where sessions
  // share the driver's process.
  SessionObjects* const session_objects_;
  HandleLimits limits_;
  std::unordered_map<uint64_t, HandleEntry> handles_;
  size_t contexts_ = 0, streams_ = 0;  // handles_ of these kinds
  std::map<std::pair<HandleKind, void*>, uint64_t> by_handle_;
  // Ids this server assigns are unique in its process, not only in the session: a relay's
  // sessions are upstream sessions of one client library, whose tables are process-wide.
  static uint64_t next_server_id();
  std::map<CUdeviceptr, Allocation> allocations_;
  struct GlobalRange {
    size_t size;
    uint64_t owner;
  };
  std::map<CUdeviceptr, GlobalRange> globals_;
  struct Import {
    size_t size;
    uint64_t context;
    uint32_t opens;
    bool pool;  // imported from a pool: freed, not closed
  };
  std::map<CUdeviceptr, Import> imports_;
  // The pool import at p of the current context (a free there ends it); end() when none. The
  // same session may hold both an allocation and an import of it in another context (a relay
  // upstream, whose one session carries the relay's sessions): the context tells them apart,
  // as it does on the backend.
  std::map<CUdeviceptr, Import>::const_iterator pool_import(CUdeviceptr p) const;
  struct GraphAlloc {
    CUdeviceptr p;
    size_t size;
  };
  // Graph-owned memory by open capture (backend id), by graph and by executable (handle ids,
  // never reused; entries of released handles stay until the session ends).
  std::map<uint64_t, std::vector<GraphAlloc>> capture_allocs_;
  std::map<uint64_t, std::vector<GraphAlloc>> graph_allocs_;
  struct ExecAllocs {
    std::vector<GraphAlloc> allocs;
    bool auto_free = false;  // CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH
    bool launched = false;
  };
  std::map<uint64_t, ExecAllocs> exec_allocs_;
  std::string ipc_tenant_;
  std::shared_ptr<HostCallChannel> host_calls_;
  VmmState vmm_;
  size_t allocated_bytes_ = 0;
  std::map<std::pair<bool, uint64_t>, uint64_t> objects_;  // -> context
  std::unordered_map<uint64_t, std::vector<formats::ParamSlot>> param_layouts_;
  const StreamedIo* streamed_ = nullptr;
  bool relay_ = false;
  bool relay_apart_ = false;  // a relay session with an upstream session of its own
  CUresult deferred_ = CUDA_SUCCESS;
  uint64_t current_context_ = 0;
  std::map<int, uint64_t> current_pools_;
  std::map<int, uint64_t> default_pools_;
  bool may_print_ = false;
  MemoryAccount* account_ = nullptr;
  std::map<int, uint64_t> device_totals_;  // device -> its memory, asked once
  std::map<int, size_t> granularity_;      // device -> its allocation step, asked once
  uint64_t context_footprint_ = 0;
  struct LimitReservation {
    uint64_t before = 0;  // bytes the limit reserved before the session first set it
    uint64_t extra = 0;   // bytes charged beyond that, held in the context handle's charge
  };
  std::map<std::pair<uint64_t, int>, LimitReservation> limit_reservations_;  // (ctx id, limit)
  std::vector<CUdevice> devices_;  // empty: every backend device as itself
  WorkGate* work_gate_ = nullptr;
  uint64_t image_globals_ = 0;
  std::map<int, SmShare> partitions_;
  struct OwnPartition {
    CUdevResourceDesc desc = nullptr;
    PartitionResource resource;
  };
  std::map<int, OwnPartition> own_partitions_;      // a relay session's, by device (partition_desc)
  std::map<CUcontext, CUgreenCtx> green_contexts_;  // contexts that are green contexts
  std::map<uint64_t, CUdevResource> resources_;     // by id, oldest first
  uint64_t next_resource_id_ = 1;
  size_t descriptors_ = 0;
  // This session's tag for a backend that keeps sessions apart (SessionObjects): unique among
  // the process's sessions.
  const uint64_t session_tag_ = next_session_tag();
  static uint64_t next_session_tag();
  // Tells a backend that keeps sessions apart that a context or pool it made is this
  // session's (SessionObjects).
  void tell_backend_owner(HandleKind kind, void* handle);
};

template <typename H>
CUresult ArgReader::get_handles(SessionContext& cx, HandleKind kind, std::vector<H>* out) {
  std::span<const uint8_t> raw;
  if (!get_array(&raw, sizeof(uint64_t))) return malformed();
  out->resize(raw.size() / sizeof(uint64_t));
  for (size_t i = 0; i < out->size(); ++i) {
    uint64_t id;
    std::memcpy(&id, raw.data() + i * sizeof(uint64_t), sizeof id);
    if (CUresult e = cx.lookup(kind, id, &(*out)[i])) return e;
  }
  return CUDA_SUCCESS;
}

template <typename H>
CUresult ArgReader::get_only_handle(SessionContext& cx, HandleKind kind, bool owned, uint64_t* id,
                                    H* out) {
  if (!get(id) || !at_end()) return malformed();
  return owned ? cx.lookup_owned(kind, *id, out) : cx.lookup(kind, *id, out);
}

// verify= checks of the manifest (server/calls/streams.cc, server/calls/pools.cc): structs passed
// in that may hold pointers or handles, checked before the backend sees them.
CUresult check_attribute(SessionContext& cx, CUlaunchAttributeID id,
                         const CUlaunchAttributeValue& v, bool launch);
CUresult verify_pool_props(SessionContext& cx, CUmemoryPool* pool, const CUmemPoolProps* props);
CUresult verify_pool_access(SessionContext& cx, CUmemoryPool pool, const CUmemAccessDesc* map,
                            size_t count);
CUresult verify_stream_attribute(SessionContext& cx, CUstream stream, CUstreamAttrID attr,
                                 const CUstreamAttrValue* value);
// (server/calls/textures.cc) A mipmap's level is destroyed with its mipmap, never alone: the
// server refuses it whatever the backend would do.
CUresult verify_array_destroy(SessionContext& cx, CUarray array);

// Runs call `id` (generated). *known is false for an id the manifest does not have.
CUresult dispatch_call(uint32_t id, SessionContext& cx, ArgReader& in, ReplyWriter& out,
                       bool* known);

}  // namespace cuwire::server
