// ByteStream capture and graphs, client side. The server records what a capturing stream is given
// and replays it at cuGraphLaunch; the client only mirrors which streams capture (begun here,
// or joined by waiting on an event recorded in a capturing stream), so the capture queries are
// answered without a round trip.

#include <cuda.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include "client-lib/core/client_call.h"
#include "client-lib/core/client_state.h"
#include "client-lib/core/host_access.h"

namespace cuwire::client {
namespace {

// Device buffers that stand in for pageable host memory in a capture; given back with the last
// graph that uses them.
struct StagingBuffers {
  std::mutex mu;
  std::vector<CUdeviceptr> blocks;  // guarded by mu
  StagingBuffers() = default;
  StagingBuffers(const StagingBuffers&) = delete;
  StagingBuffers& operator=(const StagingBuffers&) = delete;
  ~StagingBuffers() {
    LibraryCalls library;
    for (CUdeviceptr p : blocks) cuMemFree_v2(p);
  }
};

struct Capture {
  uint64_t id;
  bool ended = false;
  std::thread::id origin_thread = std::this_thread::get_id();  // the thread that began it
  // A call CUDA prohibits during the capture was made (check_unsafe_in_capture): the capture
  // goes on on the server, and its end fails.
  std::atomic<bool> invalidated{false};
  // Copies from or to host memory the capture could not hold: each went to a staging buffer,
  // and the graph copies the host's bytes in before it runs and the results out after.
  // Host functions enqueued in the capture run after it too, in order with those copies: a
  // host function cuts the capture there (cut_locked), so that they run where enqueued.
  std::mutex mu;
  std::vector<CUDA_MEMCPY3D> before;  // guarded by mu
  std::vector<CapturedAfter> after;   // guarded by mu
  std::shared_ptr<StagingBuffers> staging = std::make_shared<StagingBuffers>();
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  // The built graph standing for the capture, when the app asked for one: the graph of
  // cuStreamBeginCaptureToGraph, or one made for cuStreamGetCaptureInfo, to which the app may
  // add nodes itself. The server's capture is then cut in segments (cut_segment): each becomes
  // a child-graph node of it, `segment` the one now being captured (made when first needed,
  // after `segment_deps`).
  CUgraph proxy = nullptr;                // guarded by mu
  bool own_proxy = false;                 // guarded by mu: made here, not the app's
  CUgraphNode segment = nullptr;          // guarded by mu
  std::vector<CUgraphNode> segment_deps;  // guarded by mu
  // The stream that began the capture; the server's capture ends only there.
  CUstream origin = nullptr;
  // How many times the server's capture was cut (guarded by CaptureTable::mu). An event recorded
  // before the last cut was recorded in a server capture that ended: a wait on it waits on `root`
  // instead, recorded on the origin where the server's capture began anew, which follows all the
  // work before the cut (check_stream_wait_event).
  uint64_t cuts = 0;
  // Events of the library's own for the cuts, made when first needed, destroyed with the
  // capture's end: `join` joins the other streams into the origin before a cut, `root` is the
  // point they fork from again after it. Guarded by mu; `root` is made before the first cut is
  // counted (under the table's lock), which is when check_stream_wait_event begins to read it.
  CUevent join = nullptr;
  CUevent root = nullptr;
};

// The per-thread default stream is a different stream in each thread.
using StreamKey = std::pair<uintptr_t, std::thread::id>;
StreamKey key(CUstream s) {
  return {reinterpret_cast<uintptr_t>(s),
          s == CU_STREAM_PER_THREAD ? std::this_thread::get_id() : std::thread::id()};
}

// An event last recorded in a capture, and after how many of its cuts.
struct RecordedIn {
  std::weak_ptr<Capture> capture;
  uint64_t cuts = 0;
};

struct CaptureTable {
  std::mutex mu;
  uint64_t next_id = 1;
  std::map<StreamKey, std::shared_ptr<Capture>> streams;  // guarded by mu
  std::map<uintptr_t, RecordedIn> events;                 // guarded by mu
};
CaptureTable& table() {
  static CaptureTable* t = new CaptureTable();  // leaked: used by atexit handlers too
  return *t;
}

std::shared_ptr<Capture> capture_of(CUstream s) {
  CaptureTable& t = table();
  std::lock_guard lock(t.mu);
  auto it = t.streams.find(key(s));
  return it == t.streams.end() ? nullptr : it->second;
}

thread_local CUstreamCaptureMode t_capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

bool unsafe_in_capture(uint32_t id) {
  switch (static_cast<CallId>(id)) {
    case CallId::k_cuMemAlloc_v2:
    case CallId::k_cuMemAllocPitch_v2:
    case CallId::k_cuMemAllocManaged:
    case CallId::k_cuMemFree_v2:
    case CallId::k_cuMemAllocHost_v2:
    case CallId::k_cuMemHostAlloc:
    case CallId::k_cuMemFreeHost:
    case CallId::k_cuMemHostRegister_v2:
    case CallId::k_cuMemHostUnregister:
    case CallId::k_cuCtxSynchronize:
    case CallId::k_cuCtxSynchronize_v2:
    case CallId::k_cuMemcpy:
    case CallId::k_cuMemcpyPeer:
    case CallId::k_cuMemcpyHtoD_v2:
    case CallId::k_cuMemcpyDtoH_v2:
    case CallId::k_cuMemcpyDtoD_v2:
    case CallId::k_cuMemcpyDtoA_v2:
    case CallId::k_cuMemcpyAtoD_v2:
    case CallId::k_cuMemcpyHtoA_v2:
    case CallId::k_cuMemcpyAtoH_v2:
    case CallId::k_cuMemcpyAtoA_v2:
    case CallId::k_cuMemcpy2D_v2:
    case CallId::k_cuMemcpy2DUnaligned_v2:
    case CallId::k_cuMemcpy3D_v2:
    case CallId::k_cuMemcpy3DPeer:
    case CallId::k_cuMemsetD8_v2:
    case CallId::k_cuMemsetD16_v2:
    case CallId::k_cuMemsetD32_v2:
    case CallId::k_cuMemsetD2D8_v2:
    case CallId::k_cuMemsetD2D16_v2:
    case CallId::k_cuMemsetD2D32_v2:
      return true;
    default:
      return false;
  }
}

// check_unsafe_in_capture's rule (capture_rules.cc), with a capture open and outside the
// library's own calls.
CUresult unsafe_call_rule(uint32_t call_id) {
  if (t_capture_mode == CU_STREAM_CAPTURE_MODE_RELAXED || !unsafe_in_capture(call_id)) {
    return CUDA_SUCCESS;
  }
  const std::thread::id me = std::this_thread::get_id();
  bool refused = false;
  CaptureTable& t = table();
  std::lock_guard lock(t.mu);
  for (const auto& [k, c] : t.streams) {
    if (c->ended || c->mode == CU_STREAM_CAPTURE_MODE_RELAXED) continue;
    const bool mine = c->origin_thread == me;
    if (mine || (t_capture_mode == CU_STREAM_CAPTURE_MODE_GLOBAL &&
                 c->mode == CU_STREAM_CAPTURE_MODE_GLOBAL)) {
      c->invalidated.store(true);
      refused = true;
    }
  }
  return refused ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

[[maybe_unused]] const bool g_rule_registered = (set_capture_rule(unsafe_call_rule), true);

}  // namespace

CUresult check_captured_event(CUevent event, bool* handled) {
  if (!captures_open()) return CUDA_SUCCESS;
  CaptureTable& t = table();
  std::lock_guard lock(t.mu);
  auto it = t.events.find(reinterpret_cast<uintptr_t>(event));
  if (it == t.events.end()) return CUDA_SUCCESS;
  std::shared_ptr<Capture> c = it->second.capture.lock();
  if (!c || c->ended) return CUDA_SUCCESS;
  c->invalidated.store(true);
  *handled = true;
  return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

void reset_capture_state() {
  CaptureTable& t = table();
  std::lock_guard lock(t.mu);
  for (auto& [k, c] : t.streams) c->ended = true;
  t.streams.clear();
  t.events.clear();
  reset_captures_open();
}

void on_capture_begin(CUstream stream, CUstreamCaptureMode mode) {
  CaptureTable& t = table();
  std::lock_guard lock(t.mu);
  auto c = std::make_shared<Capture>();
  c->id = t.next_id++;
  c->mode = mode;
  c->origin = stream;
  t.streams[key(stream)] = std::move(c);
  note_captures_open(1);
}

namespace {

// The stream's capture, which ends: every stream in it leaves it.
std::shared_ptr<Capture> end_capture(CUstream stream) {
  CaptureTable& t = table();
  std::lock_guard lock(t.mu);
  auto it = t.streams.find(key(stream));
  if (it == t.streams.end()) return nullptr;
  std::shared_ptr<Capture> c = it->second;
  c->ended = true;
  note_captures_open(-1);
  for (auto s = t.streams.begin(); s != t.streams.end();) {
    s = s->second == c ? t.streams.erase(s) : std::next(s);
  }
  return c;
}

}  // namespace

void on_event_record(CUevent event, CUstream stream) {
  CaptureTable& t = table();
  std::lock_guard lock(t.mu);
  auto it = t.streams.find(key(stream));
  if (it != t.streams.end()) {
    t.events[reinterpret_cast<uintptr_t>(event)] = RecordedIn{it->second, it->second->cuts};
  } else {
    t.events.erase(reinterpret_cast<uintptr_t>(event));
  }
}

void on_event_record_with_flags(CUevent event, CUstream stream, unsigned int flags) {
  // An external record in a capture is a node recording the event at each launch, not a
  // point other streams join the capture by.
  if (flags & CU_EVENT_RECORD_EXTERNAL) {
    CaptureTable& t = table();
    std::lock_guard lock(t.mu);
    t.events.erase(reinterpret_cast<uintptr_t>(event));
    return;
  }
  on_event_record(event, stream);
}

void on_stream_wait_event(CUstream stream, CUevent event, unsigned int flags) {
  if (flags & CU_EVENT_WAIT_EXTERNAL) return;  // a node of the capture, joining nothing
  CaptureTable& t = table();
  std::lock_guard lock(t.mu);
  auto it = t.events.find(reinterpret_cast<uintptr_t>(event));
  if (it == t.events.end()) return;
  std::shared_ptr<Capture> c = it->second.capture.lock();
  if (c && !c->ended) t.streams[key(stream)] = std::move(c);  // the stream joins the capture
}

CUresult check_stream_wait_event(CUstream stream, CUevent event, unsigned int flags,
                                 bool* handled) {
  if (!captures_open() || (flags & CU_EVENT_WAIT_EXTERNAL)) return CUDA_SUCCESS;
  CUevent root = nullptr;
  {
    CaptureTable& t = table();
    std::lock_guard lock(t.mu);
    auto it = t.events.find(reinterpret_cast<uintptr_t>(event));
    if (it == t.events.end()) return CUDA_SUCCESS;
    std::shared_ptr<Capture> c = it->second.capture.lock();
    if (!c || c->ended || it->second.cuts == c->cuts || event == c->root) return CUDA_SUCCESS;
    root = c->root;  // made before the first cut counted
  }
  *handled = true;
  return cuStreamWaitEvent(stream, root, flags);
}

CUresult check_host_copy(CUstream stream) {
  return capture_of(stream) ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

namespace {

// A device buffer of n bytes that the capture's graph owns (freed with its staging).
CUresult alloc_staging(Capture& c, size_t n, CUdeviceptr* out) {
  LibraryCalls library;
  if (CUresult e = cuMemAlloc_v2(out, n)) return e;
  std::lock_guard lock(c.staging->mu);
  c.staging->blocks.push_back(*out);
  return CUDA_SUCCESS;
}

// The graph's copy between the host and staging buffer `buf` at each launch: before the
// captured work (the host's bytes in) when to_device, else after it (the results out).
CUDA_MEMCPY3D staging_copy(const void* host, size_t n, bool to_device, CUdeviceptr buf) {
  CUDA_MEMCPY3D copy{};
  copy.WidthInBytes = n;
  copy.Height = copy.Depth = 1;
  if (to_device) {
    copy.srcMemoryType = CU_MEMORYTYPE_HOST;
    copy.srcHost = host;
    copy.srcPitch = n;
    copy.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    copy.dstDevice = buf;
    copy.dstPitch = n;
  } else {
    copy.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    copy.srcDevice = buf;
    copy.srcPitch = n;
    copy.dstMemoryType = CU_MEMORYTYPE_HOST;
    copy.dstHost = const_cast<void*>(host);
    copy.dstPitch = n;
  }
  return copy;
}

// A staged copy: the graph's host copy `host_copy` is recorded and the captured copy queued
// (`capture`, given the staging buffer's side), in an order a concurrent cut of the capture
// cannot split wrongly: the bytes in are recorded before the copy from the buffer is captured,
// the bytes out after the copy into the buffer was. Either may then fall in a later segment
// than its captured copy, never in an earlier one.
template <typename Capture3>
CUresult stage_and_capture(Capture& c, const CUDA_MEMCPY3D& host_copy, bool to_device,
                           Capture3&& capture) {
  if (to_device) {
    {
      std::lock_guard lock(c.mu);
      c.before.push_back(host_copy);
    }
    return capture();
  }
  if (CUresult e = capture()) return e;
  std::lock_guard lock(c.mu);
  c.after.push_back(CapturedAfter{host_copy, {}, false});
  return CUDA_SUCCESS;
}

}  // namespace

namespace {
// One side (src or dst) of *c becomes the packed device buffer `buf`: rows of WidthInBytes,
// slices of Height rows.
void to_packed_buffer(CUDA_MEMCPY3D* c, bool src, CUdeviceptr buf) {
  // The side's fields, by reference (`host` is const void* for the source, void* for the
  // destination).
  auto pack = [&](CUmemorytype& type, CUdeviceptr& device, auto& host, CUarray& array, size_t& x,
                  size_t& y, size_t& z, size_t& pitch, size_t& height) {
    type = CU_MEMORYTYPE_DEVICE;
    device = buf;
    host = nullptr;
    array = nullptr;
    x = y = z = 0;
    pitch = c->WidthInBytes;
    height = c->Height;
  };
  if (src) {
    pack(c->srcMemoryType, c->srcDevice, c->srcHost, c->srcArray, c->srcXInBytes, c->srcY, c->srcZ,
         c->srcPitch, c->srcHeight);
  } else {
    pack(c->dstMemoryType, c->dstDevice, c->dstHost, c->dstArray, c->dstXInBytes, c->dstY, c->dstZ,
         c->dstPitch, c->dstHeight);
  }
}
}  // namespace

CUresult capture_host_copy3d(CUDA_MEMCPY3D* c, CUstream stream, bool* handled) {
  std::shared_ptr<Capture> cap = capture_of(stream);
  if (!cap) return CUDA_SUCCESS;
  const bool src_host = c->srcMemoryType == CU_MEMORYTYPE_HOST;
  const bool dst_host = c->dstMemoryType == CU_MEMORYTYPE_HOST;
  if (src_host == dst_host) return CUDA_SUCCESS;  // no host side, or host to host (refused)
  const size_t w = c->WidthInBytes, h = c->Height, d = c->Depth;
  const size_t bytes = w * h * d;
  if (bytes == 0) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  *handled = true;
  // The host rows go to or come from a packed device buffer at each launch (a copy with the
  // host side's geometry, before or after the captured work); the capture copies between that
  // buffer and the device side.
  CUdeviceptr buf = 0;
  if (CUresult e = alloc_staging(*cap, bytes, &buf)) return e;
  // The graph's copy keeps the host side and packs the other into the buffer; the captured
  // copy takes the buffer for its host side.
  CUDA_MEMCPY3D host_copy = *c;
  to_packed_buffer(&host_copy, !src_host, buf);
  to_packed_buffer(c, src_host, buf);
  return stage_and_capture(*cap, host_copy, src_host,
                           [&] { return cuMemcpy3DAsync_v2(c, stream); });
}

CUresult check_host_copy_htod(CUdeviceptr dst, const void* src, size_t n, CUstream stream,
                              bool* handled) {
  std::shared_ptr<Capture> c = capture_of(stream);
  if (!c) {
    wait_host_calls(stream);  // one of them may write the source (host_calls.cc)
    return CUDA_SUCCESS;
  }
  if (n == 0) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  *handled = true;
  if (pinned_device_range(src, n)) {
    return cuMemcpyDtoDAsync_v2(dst, reinterpret_cast<CUdeviceptr>(src), n, stream);
  }
  if (!host_range_ok(src, n, HostAccess::kRead)) return CUDA_ERROR_INVALID_VALUE;
  CUdeviceptr buf = 0;
  if (CUresult e = alloc_staging(*c, n, &buf)) return e;
  return stage_and_capture(*c, staging_copy(src, n, true, buf), true,
                           [&] { return cuMemcpyDtoDAsync_v2(dst, buf, n, stream); });
}

CUresult check_host_copy_dtoh(void* dst, CUdeviceptr src, size_t n, CUstream stream,
                              bool* handled) {
  std::shared_ptr<Capture> c = capture_of(stream);
  if (!c || n == 0) return CUDA_SUCCESS;
  *handled = true;
  if (pinned_device_range(dst, n)) {
    // The copy lands in the server's side of the pinned memory, which reaches the host at the
    // next synchronisation. A host function captured after it must see the bytes when it runs:
    // for it, the launch synchronises the stream first (kept only where one follows).
    const CUresult rc = cuMemcpyDtoDAsync_v2(reinterpret_cast<CUdeviceptr>(dst), src, n, stream);
    if (rc != CUDA_SUCCESS) return rc;
    std::lock_guard lock(c->mu);
    c->after.push_back(CapturedAfter{{}, {}, true});
    return CUDA_SUCCESS;
  }
  if (!host_range_ok(dst, n, HostAccess::kReadWrite)) return CUDA_ERROR_INVALID_VALUE;
  CUdeviceptr buf = 0;
  if (CUresult e = alloc_staging(*c, n, &buf)) return e;
  return stage_and_capture(*c, staging_copy(dst, n, false, buf), false,
                           [&] { return cuMemcpyDtoDAsync_v2(buf, src, n, stream); });
}

CUresult check_host_copy_htoa(CUarray dst, size_t offset, const void* src, size_t n,
                              CUstream stream, bool* handled) {
  wait_host_calls(stream);
  if (!capture_of(stream)) return CUDA_SUCCESS;
  if (n == 0) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (!host_range_ok(src, n, HostAccess::kRead)) return CUDA_ERROR_INVALID_VALUE;
  // As a 3D copy: staged like a 2D one, then device to array in the capture.
  CUDA_MEMCPY3D c{};
  c.srcMemoryType = CU_MEMORYTYPE_HOST;
  c.srcHost = src;
  c.srcPitch = n;
  c.dstMemoryType = CU_MEMORYTYPE_ARRAY;
  c.dstArray = dst;
  c.dstXInBytes = offset;
  c.WidthInBytes = n;
  c.Height = c.Depth = 1;
  return capture_host_copy3d(&c, stream, handled);
}

namespace {

// ---- a capture's stand-in graph and its segments (Capture::proxy)

CUresult check_plain_edges(const CUgraphEdgeData* edges, size_t n, const char* what) {
  if (!edges) return CUDA_SUCCESS;
  for (size_t i = 0; i < n; ++i) {
    if (edges[i].from_port || edges[i].to_port || edges[i].type) {
      return unsupported((std::string(what) + " (edges with ports)").c_str());
    }
  }
  return CUDA_SUCCESS;
}

// The stand-in graph and the node of the segment being captured, made when first asked for.
CUresult stand_in_locked(Capture& c) {
  if (!c.proxy) {
    if (CUresult e = cuGraphCreate(&c.proxy, 0)) return e;
    c.own_proxy = true;
  }
  if (!c.segment) {
    return cuGraphAddEmptyNode(&c.segment, c.proxy, c.segment_deps.data(), c.segment_deps.size());
  }
  return CUDA_SUCCESS;
}

// The streams of capture `c` other than its origin, as this thread names them. False when a
// stream of it is another thread's per-thread default stream, which this thread cannot name.
bool other_streams(const std::shared_ptr<Capture>& c, std::vector<CUstream>* out) {
  const std::thread::id me = std::this_thread::get_id();
  CaptureTable& t = table();
  std::lock_guard lock(t.mu);
  for (const auto& [k, v] : t.streams) {
    if (v != c) continue;
    if (k.second != std::thread::id() && k.second != me) return false;
    const auto s = reinterpret_cast<CUstream>(k.first);
    if (s != c->origin) out->push_back(s);
  }
  return true;
}

// The server ends its capture of `stream`: *captured is its graph.
CUresult end_server_capture(CUstream stream, CUgraph* captured) {
  ArgWriter w(CallId::k_cuStreamEndCapture);
  w.put_handle(stream);
  return w.call_for_handle(captured);
}

// The segment's graph with the host copies and functions it staged around it (a client graph
// then; wrap_captured_graph).
CUresult wrap_segment_locked(Capture& c, CUgraph* captured) {
  std::vector<CUDA_MEMCPY3D> before;
  std::vector<CapturedAfter> after;
  before.swap(c.before);
  after.swap(c.after);
  // Pinned memory's bytes are copied to the host only for host functions after them.
  bool function_follows = false;
  for (size_t i = after.size(); i-- > 0;) {
    if (after[i].host.fn) function_follows = true;
    if (after[i].for_host_functions && !function_follows) after.erase(after.begin() + i);
  }
  if (before.empty() && after.empty()) return CUDA_SUCCESS;
  const uint64_t server_graph = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(*captured));
  return wrap_captured_graph(server_graph, before, after, c.staging, captured);
}

// The segment's node of the stand-in becomes a child-graph node of `captured`, which goes.
CUresult place_segment_locked(Capture& c, CUgraph captured) {
  CUresult rc = stand_in_locked(c);
  if (rc == CUDA_SUCCESS) rc = make_child_node(c.segment, captured);
  cuGraphDestroy(captured);
  return rc;
}

// After the server's capture began anew on `stream`: the stream stays in capture `c`.
void resume_capture(CUstream stream, const std::shared_ptr<Capture>& c) {
  CaptureTable& t = table();
  std::lock_guard lock(t.mu);
  std::shared_ptr<Capture>& slot = t.streams[key(stream)];
  if (slot && slot != c && !slot->ended) {  // the one cuStreamBeginCapture_v2 just made
    slot->ended = true;
    note_captures_open(-1);
  }
  slot = c;
}

CUresult make_event(CUevent* ev) {
  return *ev ? CUDA_SUCCESS : cuEventCreate(ev, CU_EVENT_DISABLE_TIMING);
}

// Cuts capture `c` where its streams stand now: the server's capture so far, with the host copies
// and functions staged around it, becomes the current segment of the stand-in graph, and the
// server's capture begins anew on the origin. A capture of several streams ends on the server
// only when all have joined the origin: the other streams join it first, and fork from the new
// capture's start after, so that their later work follows the cut as the origin's does. Each
// later segment depends on what the caller sets in segment_deps. *others: the other streams.
// Called with c->mu held; the server calls of the cut go out under the exclusive gate, the
// segment's graph is built after it (graph calls may hold the graph table's lock while they
// wait for the gate). CUDA_ERROR_NOT_SUPPORTED (nothing done) where another thread's per-thread
// default stream takes part, which this thread cannot name.
CUresult cut_locked(const std::shared_ptr<Capture>& c, std::vector<CUstream>* others) {
  CUgraph captured = nullptr;
  {
    CaptureCut no_calls_between;
    if (!other_streams(c, others)) return CUDA_ERROR_NOT_SUPPORTED;
    if (CUresult e = make_event(&c->root)) return e;
    if (!others->empty()) {
      if (CUresult e = make_event(&c->join)) return e;
      for (CUstream s : *others) {
        if (CUresult e = cuEventRecord(c->join, s)) return e;
        if (CUresult e = cuStreamWaitEvent(c->origin, c->join, 0)) return e;
      }
    }
    if (CUresult e = end_server_capture(c->origin, &captured)) return e;
    if (CUresult e = cuStreamBeginCapture_v2(c->origin, c->mode)) return e;
    resume_capture(c->origin, c);
    {
      // From now on waits on events recorded before the cut wait on `root`, which is of this
      // cut already (a wait on it is never redirected).
      CaptureTable& t = table();
      std::lock_guard lock(t.mu);
      ++c->cuts;
      t.events[reinterpret_cast<uintptr_t>(c->root)] = RecordedIn{c, c->cuts};
    }
    if (CUresult e = cuEventRecord(c->root, c->origin)) return e;
    for (CUstream s : *others) {
      if (CUresult e = cuStreamWaitEvent(s, c->root, 0)) return e;
    }
  }
  if (CUresult e = wrap_segment_locked(*c, &captured)) return e;
  return place_segment_locked(*c, captured);
}

// The events cut_locked made, once the capture is over.
void drop_cut_events(Capture& c) {
  for (CUevent* ev : {&c.join, &c.root}) {
    if (!*ev) continue;
    {
      CaptureTable& t = table();
      std::lock_guard lock(t.mu);
      t.events.erase(reinterpret_cast<uintptr_t>(*ev));
    }
    cuEventDestroy_v2(*ev);
    *ev = nullptr;
  }
}

}  // namespace

bool capture_host_function(CUstream stream, CUhostFn fn, void* data, CUresult* rc) {
  *rc = CUDA_SUCCESS;
  std::shared_ptr<Capture> c = capture_of(stream);
  if (!c) return false;
  std::lock_guard lock(c->mu);
  c->after.push_back(CapturedAfter{{}, CUDA_HOST_NODE_PARAMS{fn, data}, false});
  // The function runs where it was enqueued: the work captured so far (on every stream of the
  // capture), with the host copies staged around it and then the function, becomes one segment
  // of the capture's stand-in graph, and the capture goes on after it. Where the capture cannot
  // be cut from here, the function runs after all the captured work.
  std::vector<CUstream> others;
  const CUresult e = cut_locked(c, &others);
  if (e == CUDA_ERROR_NOT_SUPPORTED) return true;
  if ((*rc = e)) return true;
  c->segment_deps.assign(1, c->segment);
  c->segment = nullptr;
  return true;
}

}  // namespace cuwire::client

using namespace cuwire;

extern "C" {

CUresult CUDAAPI cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus* captureStatus) {
  if (!captureStatus) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<client::Capture> c = client::capture_of(hStream);
  *captureStatus = !c                      ? CU_STREAM_CAPTURE_STATUS_NONE
                   : c->invalidated.load() ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                                           : CU_STREAM_CAPTURE_STATUS_ACTIVE;
  return CUDA_SUCCESS;
}

// The graph under construction lives on the server. Asked for it, or for the capture's open
// dependencies, the client answers with a built graph standing for the capture (Capture::proxy)
// and one node standing for everything captured so far, so that the app may add nodes after it
// (cuStreamUpdateCaptureDependencies then makes them the capture's dependencies).
CUresult CUDAAPI cuStreamGetCaptureInfo_v3(CUstream hStream,
                                           CUstreamCaptureStatus* captureStatus_out,
                                           cuuint64_t* id_out, CUgraph* graph_out,
                                           const CUgraphNode** dependencies_out,
                                           const CUgraphEdgeData** edgeData_out,
                                           size_t* numDependencies_out) {
  if (!captureStatus_out) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<client::Capture> c = client::capture_of(hStream);
  *captureStatus_out = !c                      ? CU_STREAM_CAPTURE_STATUS_NONE
                       : c->invalidated.load() ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                                               : CU_STREAM_CAPTURE_STATUS_ACTIVE;
  if (id_out) *id_out = c ? c->id : 0;
  if (graph_out) *graph_out = nullptr;
  if (dependencies_out) *dependencies_out = nullptr;
  if (edgeData_out) *edgeData_out = nullptr;
  if (numDependencies_out) *numDependencies_out = 0;
  if (!c || !(graph_out || dependencies_out)) return CUDA_SUCCESS;
  std::lock_guard lock(c->mu);
  if (CUresult e = client::stand_in_locked(*c)) return e;
  if (graph_out) *graph_out = c->proxy;
  if (dependencies_out) *dependencies_out = &c->segment;
  if (numDependencies_out) *numDependencies_out = 1;
  return CUDA_SUCCESS;
}

// A capture into a built graph (cuStreamBeginCaptureToGraph) is a capture on the server like any
// other; at its end, the captured graph joins the built one as a child-graph node after the
// dependencies it began with, and the built graph is the capture's result.
CUresult CUDAAPI cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph,
                                             const CUgraphNode* dependencies,
                                             const CUgraphEdgeData* dependencyData,
                                             size_t numDependencies, CUstreamCaptureMode mode) {
  if (!hGraph || (numDependencies && !dependencies)) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult e = client::check_plain_edges(dependencyData, numDependencies,
                                             "cuStreamBeginCaptureToGraph")) {
    return e;
  }
  // Only a graph built here can take the captured work; a captured graph cannot.
  if (!client::is_built_graph(hGraph)) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult e = cuStreamBeginCapture_v2(hStream, mode)) return e;
  std::shared_ptr<client::Capture> c = client::capture_of(hStream);
  if (c) {
    std::lock_guard lock(c->mu);
    c->proxy = hGraph;
    c->segment_deps.assign(dependencies, dependencies + numDependencies);
  }
  return CUDA_SUCCESS;
}

// Cuts the capture where the app's own nodes (added to the capture's stand-in graph) go: the
// server's capture so far becomes the current segment's node, and a new one begins after
// `dependencies` (SET), or after them and that segment (ADD). In a capture of several streams
// the other streams' later work follows their earlier work, so the new segment follows the last
// one in both modes there (SET orders the updated stream after more than CUDA would).
CUresult CUDAAPI cuStreamUpdateCaptureDependencies_v2(CUstream hStream, CUgraphNode* dependencies,
                                                      const CUgraphEdgeData* dependencyData,
                                                      size_t numDependencies, unsigned int flags) {
  if ((numDependencies && !dependencies) || flags > CU_STREAM_SET_CAPTURE_DEPENDENCIES) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (CUresult e = client::check_plain_edges(dependencyData, numDependencies,
                                             "cuStreamUpdateCaptureDependencies")) {
    return e;
  }
  std::shared_ptr<client::Capture> c = client::capture_of(hStream);
  if (!c) return CUDA_ERROR_ILLEGAL_STATE;
  std::lock_guard lock(c->mu);
  if (!c->proxy) return CUDA_ERROR_INVALID_VALUE;  // the app has no node of this capture
  std::vector<CUstream> others;
  if (CUresult e = client::cut_locked(c, &others)) {
    return e == CUDA_ERROR_NOT_SUPPORTED
               ? client::unsupported(
                     "cuStreamUpdateCaptureDependencies (a capture with another "
                     "thread's per-thread stream)")
               : e;
  }
  std::vector<CUgraphNode> next(dependencies, dependencies + numDependencies);
  if (flags == CU_STREAM_ADD_CAPTURE_DEPENDENCIES || !others.empty()) next.push_back(c->segment);
  c->segment = nullptr;
  c->segment_deps = std::move(next);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamEndCapture(CUstream hStream, CUgraph* phGraph) {
  std::shared_ptr<client::Capture> pending = client::capture_of(hStream);
  bool into_graph = false;
  if (pending) {
    // A capture that is not relaxed ends on the thread that began it.
    if (pending->mode != CU_STREAM_CAPTURE_MODE_RELAXED &&
        pending->origin_thread != std::this_thread::get_id()) {
      return CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
    }
    std::lock_guard lock(pending->mu);
    into_graph = pending->proxy && !pending->own_proxy;
  }
  if (!phGraph && !into_graph) return CUDA_ERROR_INVALID_VALUE;
  CUgraph captured = nullptr;
  const CUresult rc = client::end_server_capture(hStream, &captured);
  // The capture is over when the server made its graph, or ended it failing.
  std::shared_ptr<client::Capture> c = rc == CUDA_SUCCESS ||
                                               rc == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED ||
                                               rc == CUDA_ERROR_STREAM_CAPTURE_UNJOINED
                                           ? client::end_capture(hStream)
                                           : nullptr;
  if (c) {
    std::lock_guard lock(c->mu);
    client::drop_cut_events(*c);
  }
  if (rc != CUDA_SUCCESS) return rc;
  if (!c) {
    *phGraph = captured;
    return CUDA_SUCCESS;
  }
  std::lock_guard lock(c->mu);
  if (c->invalidated.load()) {
    // A prohibited call was made during the capture: its work is dropped, as CUDA does.
    cuGraphDestroy(captured);
    if (c->own_proxy) cuGraphDestroy(c->proxy);
    if (phGraph) *phGraph = nullptr;
    return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  }
  if (CUresult e = client::wrap_segment_locked(*c, &captured)) return e;
  // A stand-in the app added nothing to: the captured graph is the result, as it would be
  // without the stand-in.
  if (!c->proxy || (c->own_proxy && client::holds_only(c->proxy, c->segment))) {
    if (c->own_proxy) cuGraphDestroy(c->proxy);
    *phGraph = captured;
    return CUDA_SUCCESS;
  }
  // Nothing captured after the last cut (a host function ended the capture): no segment.
  size_t last_nodes = 1;
  if (!c->segment && !client::is_built_graph(captured) &&
      cuGraphGetNodes(captured, nullptr, &last_nodes) == CUDA_SUCCESS && last_nodes == 0) {
    cuGraphDestroy(captured);
  } else if (CUresult e = client::place_segment_locked(*c, captured)) {
    return e;
  }
  if (phGraph) *phGraph = c->proxy;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  if (!mode || *mode > CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_ERROR_INVALID_VALUE;
  std::swap(*mode, client::t_capture_mode);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphInstantiateWithParams(CUgraphExec* phGraphExec, CUgraph hGraph,
                                              CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  if (!params) return CUDA_ERROR_INVALID_VALUE;
  const bool upload = params->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD;
  CUresult rc = cuGraphInstantiateWithFlags(
      phGraphExec, hGraph, params->flags & ~cuuint64_t{CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD});
  if (rc == CUDA_SUCCESS && upload) rc = cuGraphUpload(*phGraphExec, params->hUploadStream);
  params->hErrNode_out = nullptr;
  params->result_out =
      rc == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS : CUDA_GRAPH_INSTANTIATE_ERROR;
  return rc;
}

}  // extern "C"
