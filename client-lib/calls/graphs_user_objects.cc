// User objects (cuUserObjectCreate ... cuGraphReleaseUserObject): a resource whose lifetime a
// graph shares, with a destructor the app gives. They live in the client, since the destructor
// is a function of this process and function pointers never cross the wire.
//
// References are counted per object; a graph owns those retained on it, and each executable
// graph instantiated from it (and each clone) takes references of its own to the same objects.
// A graph's references go when it is destroyed; an executable graph's when it is destroyed and
// its last launch has finished (a host function on that launch's stream releases them; launches
// of one executable graph run one after another, graphs_exec.cc order_launch, so the last to finish
// is the last launched). A
// destructor runs on a thread of this library's own, never on the thread that released the
// last reference: it must not call CUDA (such a call fails with CUDA_ERROR_NOT_PERMITTED), as
// CUDA specifies.
//
// Not followed: references of a graph that becomes a child-graph node (the node's copy has
// none), and references taken on the stand-in of a capture that ends without it (the graph
// under capture from cuStreamGetCaptureInfo, when the app added no node to it).
//
// Thread-safety: all functions are safe from any thread.

#include <cuda.h>

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "client-lib/core/client_call.h"
#include "client-lib/core/connection.h"

namespace cuwire::client {
namespace {

struct UserObject {
  void* ptr;
  CUhostFn destroy;
  uint64_t refs;  // guarded by Objects::mu
};

// A reference count is at most INT_MAX per call, as CUDA's.
constexpr unsigned kMaxCount = 0x7fffffff;

struct Objects {
  std::mutex mu;
  std::condition_variable work;
  std::set<UserObject*> live;
  // References owned by graphs and executable graphs, by handle id.
  std::map<uint64_t, std::map<UserObject*, uint64_t>> owned;
  // The stream of each executable graph's last launch, while it owns references.
  std::map<uint64_t, CUstream> last_launch;
  std::deque<UserObject*> doomed;  // to destroy, on the destructor thread
  bool thread_started = false;
};

Objects& objects() {
  static Objects* o = new Objects();  // leaked: its thread may outlive static destructors
  return *o;
}

void destructor_thread() {
  mark_host_call_thread();  // CUDA calls from a destructor are refused, as CUDA says
  Objects& o = objects();
  std::unique_lock lock(o.mu);
  for (;;) {
    o.work.wait(lock, [&] { return !o.doomed.empty(); });
    UserObject* u = o.doomed.front();
    o.doomed.pop_front();
    lock.unlock();
    u->destroy(u->ptr);
    delete u;
    lock.lock();
  }
}

// Drops n references of u; at zero its destructor is queued.
void release_locked(Objects& o, UserObject* u, uint64_t n) {
  u->refs = n >= u->refs ? 0 : u->refs - n;
  if (u->refs != 0) return;
  o.live.erase(u);
  o.doomed.push_back(u);
  if (!o.thread_started) {
    o.thread_started = true;
    std::thread(destructor_thread).detach();
  }
  o.work.notify_one();
}

void release_all_locked(Objects& o, std::map<UserObject*, uint64_t>& refs) {
  // One the app released too often is gone already: not released twice.
  for (auto& [u, n] : refs) {
    if (o.live.count(u)) release_locked(o, u, n);
  }
}

UserObject* live_locked(Objects& o, CUuserObject h) {
  auto* u = reinterpret_cast<UserObject*>(h);
  return o.live.count(u) ? u : nullptr;
}

// Calls change(o, u) on the live object `h` with the objects locked, once `count` is known to
// be a valid reference count.
template <typename Change>
CUresult change_live(CUuserObject h, unsigned int count, Change&& change) {
  if (count == 0 || count > kMaxCount) return CUDA_ERROR_INVALID_VALUE;
  Objects& o = objects();
  std::lock_guard lock(o.mu);
  UserObject* u = live_locked(o, h);
  if (!u) return CUDA_ERROR_INVALID_VALUE;
  change(o, u);
  return CUDA_SUCCESS;
}

// A host function that releases the references it is given (an executable graph's, after
// its last launch).
void CUDA_CB release_later(void* p) {
  auto* refs = static_cast<std::map<UserObject*, uint64_t>*>(p);
  Objects& o = objects();
  {
    std::lock_guard lock(o.mu);
    release_all_locked(o, *refs);
  }
  delete refs;
}

}  // namespace

void user_objects_copy(uint64_t from, uint64_t to) {
  Objects& o = objects();
  std::lock_guard lock(o.mu);
  auto it = o.owned.find(from);
  if (it == o.owned.end()) return;
  std::map<UserObject*, uint64_t> refs = it->second;
  auto& mine = o.owned[to];
  for (auto& [u, n] : refs) {
    if (!o.live.count(u)) continue;
    u->refs += n;
    mine[u] += n;
  }
}

void user_objects_launched(uint64_t exec, CUstream stream) {
  Objects& o = objects();
  std::lock_guard lock(o.mu);
  if (o.owned.count(exec)) o.last_launch[exec] = stream;
}

void user_objects_drop(uint64_t owner) {
  Objects& o = objects();
  std::map<UserObject*, uint64_t> refs;
  CUstream stream = nullptr;
  bool launched = false;
  {
    std::lock_guard lock(o.mu);
    auto it = o.owned.find(owner);
    if (it == o.owned.end()) return;
    refs = std::move(it->second);
    o.owned.erase(it);
    auto l = o.last_launch.find(owner);
    if (l != o.last_launch.end()) {
      stream = l->second;
      launched = true;
      o.last_launch.erase(l);
    }
  }
  // Launched: the references go when the stream got past the last launch.
  CUstreamCaptureStatus capturing = CU_STREAM_CAPTURE_STATUS_NONE;
  if (launched && cuStreamIsCapturing(stream, &capturing) == CUDA_SUCCESS &&
      capturing == CU_STREAM_CAPTURE_STATUS_NONE) {
    auto* held = new std::map<UserObject*, uint64_t>(std::move(refs));
    if (cuLaunchHostFunc(stream, release_later, held) == CUDA_SUCCESS) return;
    refs = std::move(*held);
    delete held;
  }
  std::lock_guard lock(o.mu);
  release_all_locked(o, refs);
}

}  // namespace cuwire::client

using namespace cuwire::client;

extern "C" {

CUresult CUDAAPI cuUserObjectCreate(CUuserObject* object_out, void* ptr, CUhostFn destroy,
                                    unsigned int initialRefcount, unsigned int flags) {
  if (!object_out || !destroy || initialRefcount == 0 || initialRefcount > kMaxCount ||
      flags != CU_USER_OBJECT_NO_DESTRUCTOR_SYNC) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto* u = new UserObject{ptr, destroy, initialRefcount};
  Objects& o = objects();
  std::lock_guard lock(o.mu);
  o.live.insert(u);
  *object_out = reinterpret_cast<CUuserObject>(u);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuUserObjectRetain(CUuserObject object, unsigned int count) {
  return change_live(object, count, [&](Objects&, UserObject* u) { u->refs += count; });
}

CUresult CUDAAPI cuUserObjectRelease(CUuserObject object, unsigned int count) {
  return change_live(object, count,
                     [&](Objects& o, UserObject* u) { release_locked(o, u, count); });
}

CUresult CUDAAPI cuGraphRetainUserObject(CUgraph graph, CUuserObject object, unsigned int count,
                                         unsigned int flags) {
  if (!graph || (flags & ~unsigned{CU_GRAPH_USER_OBJECT_MOVE})) return CUDA_ERROR_INVALID_VALUE;
  return change_live(object, count, [&](Objects& o, UserObject* u) {
    // MOVE: the caller's references become the graph's; otherwise the graph takes new ones.
    if (!(flags & CU_GRAPH_USER_OBJECT_MOVE)) u->refs += count;
    o.owned[reinterpret_cast<uintptr_t>(graph)][u] += count;
  });
}

CUresult CUDAAPI cuGraphReleaseUserObject(CUgraph graph, CUuserObject object, unsigned int count) {
  if (!graph || count == 0 || count > kMaxCount) return CUDA_ERROR_INVALID_VALUE;
  Objects& o = objects();
  std::lock_guard lock(o.mu);
  UserObject* u = live_locked(o, object);
  auto it = o.owned.find(reinterpret_cast<uintptr_t>(graph));
  if (!u || it == o.owned.end()) return CUDA_ERROR_INVALID_VALUE;
  auto ref = it->second.find(u);
  if (ref == it->second.end() || ref->second < count) return CUDA_ERROR_INVALID_VALUE;
  ref->second -= count;
  if (ref->second == 0) it->second.erase(ref);
  if (it->second.empty()) o.owned.erase(it);
  release_locked(o, u, count);
  return CUDA_SUCCESS;
}

}  // extern "C"
