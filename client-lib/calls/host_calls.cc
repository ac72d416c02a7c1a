// Host functions in stream order, client side (the server's: server/calls/host_calls.h).
//
// cuLaunchHostFunc and cuStreamAddCallback return at once. The function stays here under an
// id, and the id goes to the server as a fire-and-forget call; when the server's stream
// reaches it, the server sends a HostCall frame on the session's host-call connection, and
// this library's host-call thread runs the function, then answers HostCallDone, which lets the
// stream go on. So a function runs after everything enqueued before it on its stream, and
// nothing enqueued after it starts before it returns, as CUDA specifies; functions of all
// streams run one at a time on that one thread, as the driver runs them on its own.
//
// One gap: a copy from host memory reads the host bytes as it is enqueued (they go with the
// call), where CUDA reads them when the stream gets there. So before such an async copy goes
// out, the enqueuing thread waits until the host functions before it in its stream have
// returned (wait_host_calls), since one of them may be what writes those bytes. A copy to host
// memory needs no wait: its bytes come back in its reply, after the stream got there.
//
// Managed memory (managed_memory.h) is mirrored here and lags the device between
// synchronisations. So while mirrors are tracked, the enqueue names their device ranges: the
// HostCall brings their bytes as the stream reached the function (when device work may have
// written them since the last pull), which go into the mirrors' clean pages before it runs, and
// the HostCallDone takes back the pages it wrote, which the server writes to the device before
// the stream goes on (server/calls/host_calls.h).
//
// A server without host-call connections (an in-process test server, an older server) gets
// the old behaviour: the enqueuing thread waits for the stream, then runs the function.

#include <cuda.h>

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "client-lib/calls/managed_memory.h"
#include "client-lib/core/client_call.h"
#include "client-lib/core/client_state.h"
#include "client-lib/core/connection.h"
#include "protocol/frame.h"
#include "protocol/memory_runs.h"
#include "protocol/messages.h"

namespace cuwire::client {
namespace {

bool is_default(CUstream s) {
  return s == nullptr || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD;
}

// One host-call connection, of one session (generation) of the process.
struct Link {
  std::unique_ptr<ByteStream> stream;
  uint64_t generation = 0;
};

struct Pending {
  CUstream stream;
  uint64_t context;     // the enqueuing thread's context id, for default streams
  uint64_t generation;  // the session it was enqueued in
  CUhostFn fn;          // cuLaunchHostFunc; or
  CUstreamCallback cb;  // cuStreamAddCallback
  void* data;
  std::vector<managed::MirrorRange> ranges;  // the managed memory it sees the device's bytes of
};

// Bytes of managed memory one host function may see (server/calls/host_calls.h: kMaxViewBytes);
// past it the function sees the mirrors as last synchronised.
constexpr uint64_t kMaxViewBytes = uint64_t{256} << 20;
constexpr size_t kMaxViews = 4096;

class HostCalls : public std::enable_shared_from_this<HostCalls> {
 public:
  // The host-call connection of the current session, opened on first use.
  // CUDA_ERROR_NOT_SUPPORTED: the server takes none.
  CUresult link(std::shared_ptr<Link>* out);
  uint64_t add(const Pending& p);
  void remove(uint64_t id);
  void wait(CUstream stream);
  void reset();

 private:
  void serve(std::shared_ptr<Link> link);
  // Drops what a session that ended had pending: it will never run.
  void drop_generation_locked(uint64_t generation);

  std::mutex open_mu_;  // one open at a time; before mu_
  std::mutex mu_;
  std::condition_variable cv_;
  std::shared_ptr<Link> link_;           // guarded by mu_
  uint64_t unsupported_generation_ = 0;  // guarded by mu_: the session whose server took none
  uint64_t next_id_ = 1;                 // guarded by mu_
  std::map<uint64_t, Pending> pending_;  // guarded by mu_
};

// The calling thread's connection's: a relay's session connection has its own (its session's
// host-call connection), everything else shares the process-wide one.
HostCalls& host_calls() {
  Connection& c = Connection::get();
  if (c.is_session()) return *c.session_state<HostCalls>();
  // Leaked: its thread may outlive static destructors.
  static auto* h = new std::shared_ptr<HostCalls>(std::make_shared<HostCalls>());
  return **h;
}

CUresult HostCalls::link(std::shared_ptr<Link>* out) {
  Connection& c = Connection::get();
  if (CUresult e = c.ensure_connected()) return e;
  const uint64_t generation = c.generation();
  {
    std::lock_guard lock(mu_);
    if (link_ && link_->generation == generation) {
      *out = link_;
      return CUDA_SUCCESS;
    }
    if (unsupported_generation_ == generation) return CUDA_ERROR_NOT_SUPPORTED;
  }
  std::lock_guard open(open_mu_);
  {
    std::lock_guard lock(mu_);
    if (link_ && link_->generation == generation) {  // another thread opened it meanwhile
      *out = link_;
      return CUDA_SUCCESS;
    }
  }
  auto link = std::make_shared<Link>();
  const CUresult rc = c.open_host_calls(&link->stream, &link->generation);
  std::shared_ptr<Link> old;
  {
    std::lock_guard lock(mu_);
    if (rc == CUDA_ERROR_NOT_SUPPORTED) {
      unsupported_generation_ = link->generation;
      return rc;
    }
    if (rc != CUDA_SUCCESS) return rc;
    old = std::exchange(link_, link);
  }
  // A stale session's connection: its thread ends, dropping what that session had pending.
  if (old) old->stream->shutdown();
  std::thread([self = shared_from_this(), link] { self->serve(link); }).detach();
  *out = std::move(link);
  return CUDA_SUCCESS;
}

uint64_t HostCalls::add(const Pending& p) {
  std::lock_guard lock(mu_);
  const uint64_t id = next_id_++;
  pending_.emplace(id, p);
  return id;
}

void HostCalls::remove(uint64_t id) {
  {
    std::lock_guard lock(mu_);
    pending_.erase(id);
  }
  cv_.notify_all();
}

void HostCalls::wait(CUstream stream) {
  std::unique_lock lock(mu_);
  if (pending_.empty()) return;
  const uint64_t ctx = current_context_id();
  const uint64_t generation = Connection::get().generation();
  auto before = [&] {
    for (const auto& [id, p] : pending_) {
      if (p.generation != generation) continue;  // will never run
      if (is_default(p.stream) || is_default(stream)) {
        if (p.context == ctx) return true;
      } else if (p.stream == stream) {
        return true;
      }
    }
    return false;
  };
  cv_.wait(lock, [&] { return !before(); });
}

void HostCalls::reset() {
  std::shared_ptr<Link> old;
  {
    std::lock_guard lock(mu_);
    old = std::exchange(link_, nullptr);
    unsupported_generation_ = 0;
    pending_.clear();
  }
  cv_.notify_all();
  if (old) old->stream->shutdown();
}

void HostCalls::drop_generation_locked(uint64_t generation) {
  for (auto it = pending_.begin(); it != pending_.end();) {
    it = it->second.generation == generation ? pending_.erase(it) : std::next(it);
  }
}

void HostCalls::serve(std::shared_ptr<Link> link) {
  mark_host_call_thread();
  Frame f;
  std::vector<uint8_t> msg;
  // A HostCall brings the views' bytes, each after a 16-byte run head.
  const FrameLimits limits{64 << 10, kMaxViewBytes + kMaxViews * sizeof(MemoryRunHead)};
  std::vector<uint8_t> writes;
  for (;;) {
    if (!read_frame(*link->stream, limits, &f)) break;
    HostCallMsg m;
    if (f.type() != FrameType::kHostCall ||
        !decode_host_call(f, FrameType::kHostCall, &m).is_ok()) {
      break;  // not what a server sends here: the connection is not trusted further
    }
    Pending p{};
    bool known = false;
    {
      std::lock_guard lock(mu_);
      auto it = pending_.find(m.id);
      if (it != pending_.end() && it->second.generation == link->generation) {
        p = it->second;
        known = true;
      }
    }
    writes.clear();
    if (known) {
      const auto status = static_cast<CUresult>(m.status);
      managed::take_device_bytes(f.bulk, p.ranges);
      if (p.cb) {
        p.cb(p.stream, status, p.data);
      } else if (status == CUDA_SUCCESS) {
        p.fn(p.data);
      }
      managed::give_host_writes(p.ranges, &writes);
      remove(m.id);
    }
    HostCallMsg done{m.id, 0};
    encode_host_call(done, &msg);
    FrameHeader h;
    h.type = static_cast<uint16_t>(FrameType::kHostCallDone);
    h.sequence = m.id;
    const std::span<const uint8_t> bulk[] = {writes};
    if (!write_frame(*link->stream, h, msg,
                     writes.empty() ? std::span<const std::span<const uint8_t>>{} : bulk))
      break;
  }
  // The session ended or the connection broke: what it had pending never runs.
  {
    std::lock_guard lock(mu_);
    drop_generation_locked(link->generation);
    if (link_ == link) link_.reset();
  }
  cv_.notify_all();
}

}  // namespace

CUresult enqueue_host_call(CUstream stream, CUhostFn fn, CUstreamCallback cb, void* data,
                           bool* queued) {
  *queued = false;
  HostCalls& h = host_calls();
  std::shared_ptr<Link> link;
  if (CUresult e = h.link(&link)) return e == CUDA_ERROR_NOT_SUPPORTED ? CUDA_SUCCESS : e;
  Pending pending{stream, current_context_id(), link->generation, fn, cb, data, {}};
  bool send_bytes = false;
  if (managed::tracking()) {
    pending.ranges = managed::mirror_ranges();
    uint64_t total = 0;
    for (const auto& r : pending.ranges) total += r.bytes;
    if (total > kMaxViewBytes || pending.ranges.size() > kMaxViews) pending.ranges.clear();
    send_bytes = managed::device_may_be_ahead();
  }
  const std::vector<managed::MirrorRange> ranges = pending.ranges;
  const uint64_t id = h.add(pending);
  ArgWriter w(cb ? CallId::k_cuStreamAddCallback : CallId::k_cuLaunchHostFunc);
  w.put_handle(stream);
  w.put(id);
  if (!ranges.empty()) {
    w.put(static_cast<uint32_t>(send_bytes ? 1 : 0));
    w.put(static_cast<uint32_t>(ranges.size()));
    for (const auto& r : ranges) {
      w.put(r.device);
      w.put(r.bytes);
    }
  }
  const CUresult rc = w.send_async();
  if (rc != CUDA_SUCCESS) {
    h.remove(id);
    return rc;
  }
  *queued = true;
  return CUDA_SUCCESS;
}

void wait_host_calls(CUstream stream) { host_calls().wait(stream); }

void reset_host_calls() { host_calls().reset(); }

}  // namespace cuwire::client

using namespace cuwire::client;

extern "C" {

// The entry points: host functions run on the client's host-call thread when the server's
// stream reaches them (above); the call returns at once. A server that takes no host calls gets the
// fallback below: the calling thread waits for the stream to drain, then runs the function.

CUresult CUDAAPI cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void* userData) {
  if (!fn) return CUDA_ERROR_INVALID_VALUE;
  if (on_host_call_thread()) return CUDA_ERROR_NOT_PERMITTED;
  CUresult captured = CUDA_SUCCESS;
  if (capture_host_function(hStream, fn, userData, &captured)) return captured;
  bool queued = false;
  if (CUresult e = enqueue_host_call(hStream, fn, nullptr, userData, &queued)) return e;
  if (queued) return CUDA_SUCCESS;
  if (CUresult e = cuStreamSynchronize(hStream)) return e;
  fn(userData);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamAddCallback(CUstream hStream, CUstreamCallback callback, void* userData,
                                     unsigned int flags) {
  if (!callback || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (on_host_call_thread()) return CUDA_ERROR_NOT_PERMITTED;
  bool queued = false;
  if (CUresult e = enqueue_host_call(hStream, nullptr, callback, userData, &queued)) return e;
  if (queued) return CUDA_SUCCESS;
  CUresult status = cuStreamSynchronize(hStream);
  if (status == CUDA_ERROR_DEVICE_UNAVAILABLE || status == CUDA_ERROR_INVALID_HANDLE) return status;
  callback(hStream, status, userData);
  return CUDA_SUCCESS;
}

}  // extern "C"
