// What the generated client stubs (client_stubs.cc) use to put a call on the wire.
//
// Thread-safety: ArgWriter and OutReader live on the calling thread's stack; the connection
// they go through is shared and serialises calls in the app's order.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <type_traits>
#include <vector>

#include "generated/call_ids.h"
#include "protocol/args.h"
#include "protocol/handle_kind.h"
#include "protocol/inline_vector.h"
#include "protocol/value_sizes.h"

namespace cuwire::client {

// Where reply bulk bytes go: straight into the app's destination buffers.
struct BulkTarget {
  void* data;
  size_t size;
};

class OutReader {
 public:
  template <typename T>
  void get_array(T* p, size_t count) {
    take(p, count * sizeof(T));
  }
  template <typename H>
  void get_handles(H* p, size_t count) {
    for (size_t i = 0; i < count; ++i) {
      uint64_t id = 0;
      take(&id, sizeof id);
      p[i] = reinterpret_cast<H>(id);
    }
  }
  // CUDA_SUCCESS, or an error if the reply held fewer bytes than the stub read.
  CUresult finish() const { return ok_ ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN; }
  // Whether every read so far found its bytes, and the bytes left to read: for a count read
  // from the reply, before an array of that many is made.
  bool ok() const { return ok_; }
  size_t remaining() const { return ok_ && pos_ <= bytes_.size() ? bytes_.size() - pos_ : 0; }

  std::vector<uint8_t>& buffer() { return bytes_; }

 private:
  void take(void* p, size_t n);
  std::vector<uint8_t> bytes_;
  size_t pos_ = 0;
  bool ok_ = true;
};

class ArgWriter {
 public:
  explicit ArgWriter(CallId id) : id_(static_cast<uint32_t>(id)) {}

  template <typename T>
  void put(const T& v) {
    args_.put(v);
  }
  template <typename H>
  void put_handle(H h) {
    args_.put(static_cast<uint64_t>(reinterpret_cast<uintptr_t>(h)));
  }
  template <typename T>
  void put_array(const T* p, size_t count) {
    args_.put_bytes(p, count * sizeof(T));
  }
  template <typename H>
  void put_handles(const H* p, size_t count) {
    args_.put<uint64_t>(count * sizeof(uint64_t));
    for (size_t i = 0; i < count; ++i) put_handle(p[i]);
  }
  void put_string(const char* s) { args_.put_string(s); }
  // A void* in-array: its length goes in the args, its bytes as frame bulk, uncopied. The app's
  // memory: call() and send_async() check that all of it is readable before anything is sent,
  // and fail the call with CUDA_ERROR_INVALID_VALUE otherwise (client-lib/core/host_access.h).
  void bulk(const void* p, size_t n) {
    args_.put<uint64_t>(n);
    if (n) {
      bulk_.push_back({static_cast<const uint8_t*>(p), n});
      app_bulk_.push_back(bulk_.back());
    }
  }
  // As bulk(), for bytes the client library itself holds (packed kernel parameters, staging
  // buffers): not checked, so launches cost no system call.
  void own_bulk(const void* p, size_t n) {
    args_.put<uint64_t>(n);
    if (n) bulk_.push_back({static_cast<const uint8_t*>(p), n});
  }
  // A void* out-array the reply's bulk bytes are read into; checked writable before the call
  // goes out, as bulk() is checked readable.
  void reply_bulk(void* p, size_t n) {
    if (n) reply_bulk_.push_back({p, n});
  }

  // A module image (fatbin wrapper, fatbin, cubin or PTX) as bulk: a wrapper is resolved to its
  // fatbin, the size read from the image's headers. INVALID_IMAGE when it is none of those.
  CUresult image(const void* p);

  // Round trip: sends, waits for the reply, fills *out. Transport failures map to CUDA errors.
  CUresult call(OutReader* out);
  // A round trip whose successful answer never changes (device attributes, names): answered
  // from the process-wide cache after the first time, keyed by call id and argument bytes.
  CUresult call_cached(OutReader* out);
  // Fire-and-forget: errors of the call come back at the next synchronising call.
  CUresult send_async();

  // A round trip whose reply holds nothing the caller reads: the call's result alone.
  CUresult call_result() {
    OutReader r;
    if (CUresult e = call(&r)) return e;
    return r.finish();
  }
  // A round trip whose reply is one value, read as a Wire (by default as T): *out is set only
  // when the call succeeded and the reply held it.
  template <typename Wire = void, typename T>
  CUresult call_for(T* out) {
    using W = std::conditional_t<std::is_void_v<Wire>, T, Wire>;
    OutReader r;
    if (CUresult e = call(&r)) return e;
    W v{};
    r.get_array(&v, 1);
    if (CUresult e = r.finish()) return e;
    *out = v;
    return CUDA_SUCCESS;
  }
  // A round trip whose reply is one handle, stored to *out (null if the reply was short).
  template <typename H>
  CUresult call_for_handle(H* out) {
    OutReader r;
    if (CUresult e = call(&r)) return e;
    r.get_handles(out, 1);
    return r.finish();
  }

  uint32_t id() const { return id_; }
  std::span<const uint8_t> args() const { return args_.data(); }
  std::span<const std::span<const uint8_t>> bulk() const { return bulk_.span(); }
  std::span<const BulkTarget> reply_bulk() const { return reply_bulk_.span(); }

 private:
  // The app's source buffers are readable (before the call goes out: its write reads them).
  CUresult check_host_buffers() const;

 public:
  // The app's destination buffers are writable: asked once the call is out, so the check runs
  // while the server works (Connection::round_trip); a reply for buffers that are not is read
  // and dropped, and the call fails with CUDA_ERROR_INVALID_VALUE.
  bool destinations_writable() const;

 private:
  // Bulk bytes the call carries to the server and back (copies, images), for the stats table.
  uint64_t bulk_bytes() const;

  uint32_t id_;
  ArgBuffer args_;
  // Inline: a call's stack object costs no allocation (launches are enqueued at memory speed).
  InlineVector<std::span<const uint8_t>, 2> bulk_;
  InlineVector<std::span<const uint8_t>, 2> app_bulk_;  // the part of bulk_ from the app's pointers
  InlineVector<BulkTarget, 2> reply_bulk_;
};

// Host functions (host_calls.cc). A host function may make no CUDA call, as CUDA specifies:
// one it makes on the thread that runs it answers CUDA_ERROR_NOT_PERMITTED (it could wait on
// the very stream that waits on it).
bool on_host_call_thread();
// Enqueues host function `fn` (cuLaunchHostFunc) or callback `cb` (cuStreamAddCallback) on
// `stream`: it runs on the client's host-call thread when the server's stream reaches it.
// *queued false: the server takes no host calls, and the caller runs the function itself.
CUresult enqueue_host_call(CUstream stream, CUhostFn fn, CUstreamCallback cb, void* data,
                           bool* queued);
// Before an async copy reads host memory on `stream` (it reads it as it is enqueued, not when
// the stream gets there): waits until the host functions enqueued before it on that stream,
// or on the default stream, or for a default stream any of the context's, have returned.
void wait_host_calls(CUstream stream);
// Forgets the host-call connection (cuwire_client_reset).
void reset_host_calls();
// Forget the previous session's interprocess events and VMM mappings (cuwire_client_reset).
void reset_ipc_state();
void reset_vmm_state();

// A new client-side handle id (streams, events ... created without a round trip).
uint64_t mint_handle();

// The calling thread's current context id (0: none); every Call carries it (client_state.cc).
uint64_t current_context_id();

// Device allocations the client knows of, to tell device from host pointers (client_state.cc).
void note_alloc(CUdeviceptr p, size_t n);
void note_free(CUdeviceptr p);
// Reads the reply of a call that opened another process's memory in this one (u64 dptr, u64
// size: cuIpcOpenMemHandle, cuMemPoolImportPointer), which becomes a device allocation here.
CUresult take_opened_memory(OutReader& r, CUdeviceptr* out);

// Drops the cached replies (manifest option `cached`) of calls whose arguments begin with
// handle `id`: the handle was released, and a call naming it must reach the server again.
void forget_cached(uint64_t id);

// ByteStream capture as the client sees it (client-lib/calls/graphs_capture.cc): the server records
// the captured work; the client mirrors which streams capture, so that cuStreamIsCapturing and
// cuStreamGetCaptureInfo (asked on every allocation by some frameworks) need no round trip.
// Called by the generated stubs (manifest option `after=`) once the call went out.
void on_capture_begin(CUstream stream, CUstreamCaptureMode mode);
void on_event_record(CUevent event, CUstream stream);
void on_event_record_with_flags(CUevent event, CUstream stream, unsigned int flags);
void on_stream_wait_event(CUstream stream, CUevent event, unsigned int flags);
// A wait on an event recorded in a capture before the capture was last cut (a host function in
// it, cuStreamUpdateCaptureDependencies): the server's capture it was recorded in has ended, so
// the wait is made on the point the capture began anew from, which follows that record.
CUresult check_stream_wait_event(CUstream stream, CUevent event, unsigned int flags, bool* handled);
// CUDA's rule for potentially unsafe calls during a capture (allocations, frees, synchronous
// copies and memsets, cuCtxSynchronize): with the calling thread's mode (cuThreadExchange-
// StreamCaptureMode) not relaxed, such a call is refused with
// CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED if the thread began a capture that is not relaxed, or,
// in global mode, if another thread began a global one; each such capture is invalidated
// (cuStreamEndCapture then fails with CUDA_ERROR_STREAM_CAPTURE_INVALIDATED). Checked by
// ArgWriter::call on every round trip; one relaxed load while nothing captures.
CUresult check_unsafe_in_capture(uint32_t call_id);
// cuEventQuery and cuEventSynchronize of an event last recorded in a capture that is still
// open (check= in the manifest): refused, and the capture invalidated, as CUDA does.
CUresult check_captured_event(CUevent event, bool* handled);
// cuStreamWaitValue*/cuStreamWriteValue* (check= in the manifest): a null or misaligned address
// is refused at once, as the driver does, rather than at the next synchronising call (the calls
// are asynchronous; the server checks the flags and the memory itself).
CUresult check_wait_value(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags,
                          bool* handled);
CUresult check_wait_value(CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags,
                          bool* handled);
CUresult check_write_value(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags,
                           bool* handled);
CUresult check_write_value(CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags,
                           bool* handled);
// Calls the library makes for its own purposes while serving one of the app's (staging
// buffers, managed memory's mirrors, graph allocations): the capture rules above are the
// app's call's, not theirs. Scoped, per thread.
class LibraryCalls {
 public:
  LibraryCalls();
  ~LibraryCalls();
  LibraryCalls(const LibraryCalls&) = delete;
  LibraryCalls& operator=(const LibraryCalls&) = delete;
};
// A capture is cut by a sequence of calls (client-lib/calls/graphs_capture.cc: cut_locked) that
// leaves its streams out of the server's capture for a moment: no other thread's call may come
// between them, or work meant for the capture would run at once. Every call that goes out while a
// capture is open holds a CaptureCallGate (shared, taken once per thread however the calls nest;
// the stubs of manifest option `gate` hold it across their capture bookkeeping too); the cutting
// thread holds a CaptureCut (exclusive) across the sequence. Lock order: a capture's own mutex,
// then the gate, then the capture table's; no thread holding the gate waits for a capture's mutex
// or the graph table's (client-lib/calls/graphs_capture.cc).
template <bool Exclusive>
class CaptureGate {
 public:
  CaptureGate();
  ~CaptureGate();
  CaptureGate(const CaptureGate&) = delete;
  CaptureGate& operator=(const CaptureGate&) = delete;

 private:
  bool locked_ = false;
};
using CaptureCallGate = CaptureGate<false>;
using CaptureCut = CaptureGate<true>;
// The rule itself, registered by client-lib/calls/graphs_capture.cc; the count of captures open
// (begun, not ended).
using CaptureRule = CUresult (*)(uint32_t call_id);
void set_capture_rule(CaptureRule rule);
void note_captures_open(int delta);
void reset_captures_open();
bool captures_open();
// Async copies from or to host memory in a stream that captures (check= in the manifest).
// Pinned memory backed on the device (cuMemHostAlloc; client-lib/core/host_access.cc) is captured
// as a device-to-device copy of its backing, which the block's tracking keeps coherent with the
// host at every launch and synchronisation, as CUDA allows for pinned memory: *handled is set
// and the copy is queued here. Other host memory goes through a device staging buffer that
// the graph fills from the host before the captured work, or copies to the host after it, at
// each launch (docs/design.md).
CUresult check_host_copy(CUstream stream);  // the refusal alone (a copy no capture takes)
// A 2D or 3D copy with one host side in a capturing stream: the host side becomes a staging
// buffer, the copy (*c, rewritten device to device) is captured here and *handled is set;
// nothing happens outside a capture.
CUresult capture_host_copy3d(CUDA_MEMCPY3D* c, CUstream stream, bool* handled);
CUresult check_host_copy_htod(CUdeviceptr dst, const void* src, size_t n, CUstream stream,
                              bool* handled);
CUresult check_host_copy_dtoh(void* dst, CUdeviceptr src, size_t n, CUstream stream, bool* handled);
CUresult check_host_copy_htoa(CUarray dst, size_t offset, const void* src, size_t n,
                              CUstream stream, bool* handled);

// A kernel's arguments packed by its parameter layout, as a launch sends them (launches.cc):
// graphs keep them for every launch of a kernel node.
CUresult pack_kernel_params(CUfunction f, void** kernelParams, void** extra,
                            std::vector<uint8_t>* out);

// Graphs built node by node (graphs.cc). The app's free of memory an allocation node made only
// marks it free: the graph keeps it, at the same address, for its next launch (check= hooks).
CUresult check_graph_free(CUdeviceptr p, bool* handled);
CUresult check_graph_free_async(CUdeviceptr p, CUstream stream, bool* handled);
// A captured graph whose capture copied from or to host memory that is not backed on the device:
// the copies went through device staging buffers, and a client graph copies the host bytes to
// them before the captured graph and the results back after it, in capture order with the
// host functions the capture was given (after the captured device work: a capture is cut at
// each host function where it can be, client-lib/calls/graphs_capture.cc). Takes over
// `server_graph`. What runs after the captured work: a staged copy out to the host, or (fn set) a
// host function the capture was given.
struct CapturedAfter {
  CUDA_MEMCPY3D copy;
  CUDA_HOST_NODE_PARAMS host;
  // Neither: a copy into pinned memory went before. The launch waits there for the stream,
  // whose synchronisation brings the bytes to the host, for the host functions after it; kept
  // only where one follows (a later synchronisation brings them anyway).
  bool for_host_functions = false;
};
CUresult wrap_captured_graph(uint64_t server_graph, const std::vector<CUDA_MEMCPY3D>& before,
                             const std::vector<CapturedAfter>& after, std::shared_ptr<void> keep,
                             CUgraph* out);
// A host function enqueued in a capturing stream (true; *rc the outcome), as the server cannot
// call the app's code: the capture of one stream is cut there, so that the function runs in
// capture order, after the work and host copies before it and before the work after it; in a
// capture of several streams it runs after all the captured work.
bool capture_host_function(CUstream stream, CUhostFn fn, void* data, CUresult* rc);

// User objects (client-lib/calls/graphs_user_objects.cc): references graphs and executable graphs
// own, by handle id. A clone or an instantiation takes references to what `from` owns; a destroyed
// graph lets go of its own at once, an executable graph once its last launch
// (user_objects_launched) finished.
void user_objects_copy(uint64_t from, uint64_t to);
void user_objects_launched(uint64_t exec, CUstream stream);
void user_objects_drop(uint64_t owner);
// Whether `g` is a graph built here (graphs.cc), not a captured one.
bool is_built_graph(CUgraph g);
// Empty node `node` of a built graph becomes a child-graph node of `child` (copied, or for a
// captured graph instantiated on the server), as cuGraphAddChildGraphNode makes them.
CUresult make_child_node(CUgraphNode node, CUgraph child);
// Whether built graph `g` holds nothing the app put there: no conditional handle, and no node
// but `only` (which may be null).
bool holds_only(CUgraph g, CUgraphNode only);
// The kernel a function came from (after= cuKernelGetFunction), which kernel nodes report.
void on_kernel_function(CUfunction* f, CUkernel kernel);
// cuLibraryUnload succeeded: the host mirrors of its __managed__ variables go (managed_memory.cc).
void on_library_unload(CUlibrary library);
void reset_graph_state();

// Interprocess events (ipc.cc): an event made with CU_EVENT_INTERPROCESS, or opened from a
// handle, is recorded with a round trip, so that once the record call returns, another process
// told so (through shared memory, a pipe) and waiting on the event waits for this record: a
// record sent fire-and-forget could still sit in this process's send buffer.
void on_event_create(CUevent* event, unsigned int flags);
CUresult check_event_record(CUevent event, CUstream stream, bool* handled);
CUresult check_event_record_with_flags(CUevent event, CUstream stream, unsigned int flags,
                                       bool* handled);

// What every unsupported entry returns; logs the function's name once per process.
CUresult unsupported(const char* name);

}  // namespace cuwire::client
