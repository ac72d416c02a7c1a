// Streams and events: per-stream worker threads, legacy default stream ordering, event
// timing from the wall clock.

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <iterator>
#include <system_error>
#include <thread>
#include <utility>

#include "server/backend/sim/sim_gpu.h"

namespace cuwire::server::sim {
namespace {

// Operations one stream capture may record, and dependencies between them (a wait on events
// of many streams gives the next operation one dependency per stream).
constexpr size_t kMaxGraphOps = size_t{1} << 16;
constexpr size_t kMaxGraphEdges = size_t{1} << 16;  // what a graph's shape reply may list
// Operations the next one of a stream may depend on (Capture::frontier, kept sorted); a wait
// that would join more invalidates the capture. Each event recorded in a capture shares one.
constexpr size_t kMaxFrontier = 256;

thread_local Stream* t_running = nullptr;

// Marks the stream whose operation the thread runs, for Stream::running().
class Running {
 public:
  explicit Running(Stream* s) : before_(std::exchange(t_running, s)) {}
  ~Running() { t_running = before_; }
  Running(const Running&) = delete;
  Running& operator=(const Running&) = delete;

 private:
  Stream* before_;
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// Stream

Stream* Stream::running() { return t_running; }

MarkerPtr Stream::enqueue(std::vector<MarkerPtr> deps, std::function<void(CUresult)> run) {
  auto marker = std::make_shared<Marker>();
  // Runs the operation on the caller, after whatever the stream still holds.
  auto run_here = [&](std::unique_lock<std::mutex>& lock) {
    MarkerPtr before = std::exchange(last_, marker);
    lock.unlock();
    if (before) before->wait();
    for (const MarkerPtr& d : deps) d->wait();
    if (run) {
      Running here(this);
      run(ctx_->sticky.load());
    }
    marker->complete();
    return marker;
  };
  {
    std::unique_lock lock(mu_);
    if (!worker_.joinable() && !stopping_) {
      try {
        worker_ = std::thread([this] { work(); });
      } catch (const std::system_error& e) {
        // The host has no thread left to give (many contexts, each with streams): run the
        // operation on the caller, in order, as a stream without a worker would.
        spdlog::warn("sim: no worker thread for a stream ({}); running its work inline", e.what());
        return run_here(lock);
      }
    }
    if (max_queued_ && worker_.get_id() != std::this_thread::get_id()) {
      room_cv_.wait(lock, [&] { return queue_.size() < max_queued_ || stopping_; });
    }
    // A stream shut down (destroyed) under a submitter has no worker to run this, but the
    // marker must still complete for whoever waits on it.
    if (stopping_ || !worker_.joinable()) return run_here(lock);
    queue_.push_back(Op{std::move(deps), std::move(run), marker});
    last_ = marker;
  }
  cv_.notify_one();
  return marker;
}

MarkerPtr Stream::last() {
  std::lock_guard lock(mu_);
  return last_;
}

bool Stream::idle() {
  MarkerPtr m = last();
  return !m || m->done();
}

void Stream::synchronize() {
  if (MarkerPtr m = last()) m->wait();
}

void Stream::shut_down() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_one();
  room_cv_.notify_all();
  if (!worker_.joinable()) return;
  // A host callback destroying its own stream (the driver forbids it) must not self-join.
  if (worker_.get_id() == std::this_thread::get_id()) {
    worker_.detach();
  } else {
    worker_.join();
  }
}

void Stream::work() {
  Running here(this);
  for (;;) {
    Op op;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      op = std::move(queue_.front());
      queue_.pop_front();
    }
    room_cv_.notify_all();
    for (const MarkerPtr& d : op.deps) d->wait();
    if (op.run) op.run(ctx_->sticky.load());
    op.done->complete();
  }
}

// ---------------------------------------------------------------------------------------------
// Ordering

CUresult SimGpu::stream_of(CUstream h, CtxPtr* ctx, std::shared_ptr<Stream>* out) {
  if (h == nullptr || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) {
    if (!*ctx) {
      if (CUresult e = current(ctx)) return e;
    }
    Context& c = **ctx;
    std::unique_lock lock(mu_);
    if (h == CU_STREAM_PER_THREAD) {
      auto& s = c.per_thread_streams[std::this_thread::get_id()];
      if (!s) s = std::make_shared<Stream>(&c, 0, 0, next_id_++, false, max_queued());
      *out = s;
    } else {
      if (!c.null_stream)
        c.null_stream = std::make_shared<Stream>(&c, 0, 0, next_id_++, true, max_queued());
      *out = c.null_stream;
    }
    return CUDA_SUCCESS;
  }
  std::shared_lock lock(mu_);
  auto it = streams_.find(reinterpret_cast<Stream*>(h));
  if (it == streams_.end()) return CUDA_ERROR_INVALID_HANDLE;
  std::shared_ptr<Stream> s = it->second.lock();
  if (!s) return CUDA_ERROR_INVALID_HANDLE;
  auto c = contexts_.find(s->ctx());
  if (c == contexts_.end() || !c->second->alive) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  *ctx = c->second;
  *out = std::move(s);
  return CUDA_SUCCESS;
}

MarkerPtr SimGpu::submit(Context& ctx, Stream& s, std::function<void(CUresult)> fn,
                         std::vector<MarkerPtr> deps, const NodeDesc& node) {
  {
    std::shared_lock lock(mu_);
    if (const std::shared_ptr<Capture>& c = s.capture) {
      // Captured: the operation goes into the graph instead of the queue. Waits and markers
      // (null fn) need no node: the graph runs in capture order.
      if (fn) {
        std::lock_guard glock(c->graph->mu);
        // A capture is not bounded by the stream's queue: bound the graph, and invalidate a
        // capture that grows past it (cuStreamEndCapture then fails).
        std::shared_ptr<const std::vector<uint32_t>>& after = c->frontier[&s];
        const size_t deps = after ? after->size() : 0;
        if (c->graph->ops.size() >= kMaxGraphOps || deps > kMaxGraphEdges - c->edges) {
          c->invalidated = true;
        } else {
          c->edges += deps;
          const auto index = static_cast<uint32_t>(c->graph->ops.size());
          c->graph->ops.push_back(
              {std::move(fn), node.info(), after ? *after : std::vector<uint32_t>{}});
          after = std::make_shared<const std::vector<uint32_t>>(1, index);
          ++c->stream_ops[&s].captured;
        }
      }
      auto done = std::make_shared<Marker>();
      done->complete();
      return done;
    }
    // The legacy default stream waits for all earlier work of the context's blocking streams,
    // and blocking streams wait for earlier work of the legacy stream.
    auto after = [&](const std::shared_ptr<Stream>& t) {
      if (!t || t.get() == &s || !t->blocking()) return;
      if (MarkerPtr m = t->last(); m && !m->done()) deps.push_back(std::move(m));
    };
    if (s.legacy()) {
      for (const auto& t : ctx.streams) after(t);
      for (const auto& [tid, t] : ctx.per_thread_streams) after(t);
    } else if (s.blocking()) {
      after(ctx.null_stream);
    }
  }
  return s.enqueue(std::move(deps), std::move(fn));
}

CUresult SimGpu::run_sync(const CtxPtr& ctx, std::function<CUresult()> fn) {
  bool idle = true;
  {
    std::shared_lock lock(mu_);
    auto check = [&](const std::shared_ptr<Stream>& t) {
      if (t && t->blocking() && !t->idle()) idle = false;
    };
    check(ctx->null_stream);
    for (const auto& t : ctx->streams) check(t);
    for (const auto& [tid, t] : ctx->per_thread_streams) check(t);
  }
  // Nothing queued that the legacy stream would wait for: run here, saving a thread handoff.
  if (idle) return fn();
  CtxPtr c = ctx;
  std::shared_ptr<Stream> s;
  if (CUresult e = stream_of(nullptr, &c, &s)) return e;
  auto result = std::make_shared<CUresult>(CUDA_SUCCESS);
  MarkerPtr m = submit(*ctx, *s, [result, fn = std::move(fn)](CUresult sticky) {
    *result = sticky ? sticky : fn();
  });
  m->wait();
  return *result;
}

CUresult SimGpu::stream_wait_marker(CUstream h, MarkerPtr m) {
  CtxPtr ctx;
  std::shared_ptr<Stream> s;
  if (CUresult e = stream_of(h, &ctx, &s)) return e;
  std::vector<MarkerPtr> deps;
  if (m) deps.push_back(std::move(m));
  submit(*ctx, *s, nullptr, std::move(deps));
  return CUDA_SUCCESS;
}

CUresult SimGpu::add_host_call(CUstream h, std::function<void(CUresult)> fn) {
  CtxPtr ctx;
  std::shared_ptr<Stream> s;
  if (CUresult e = stream_of(h, &ctx, &s)) return e;
  submit(*ctx, *s, std::move(fn), {}, NodeDesc(CU_GRAPH_NODE_TYPE_HOST));
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// Stream API

CUresult SimGpu::cuStreamCreate(CUstream* ph, unsigned flags) {
  return cuStreamCreateWithPriority(ph, flags, 0);
}

CUresult SimGpu::cuStreamCreateWithPriority(CUstream* ph, unsigned flags, int priority) {
  if (!ph) return CUDA_ERROR_INVALID_VALUE;
  if (flags & ~unsigned{CU_STREAM_NON_BLOCKING}) return CUDA_ERROR_INVALID_VALUE;
  CtxPtr ctx;
  if (CUresult e = current(&ctx)) return e;
  return create_stream(ctx, flags, priority, ph);
}

CUresult SimGpu::create_stream(const CtxPtr& ctx, unsigned flags, int priority, CUstream* ph) {
  // Priorities outside [greatest, least] = [-5, 0] are clamped, as the driver does.
  priority = std::clamp(priority, -5, 0);
  auto s = std::make_shared<Stream>(ctx.get(), flags, priority, next_id_++, false, max_queued());
  std::unique_lock lock(mu_);
  // Each stream may get a worker thread: a client cannot have them without bound.
  if (options_.max_streams_per_context > 0 &&
      ctx->streams.size() >= static_cast<size_t>(options_.max_streams_per_context)) {
    spdlog::warn("sim: context {} already has {} streams (--sim-max-streams)", ctx->id,
                 ctx->streams.size());
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  ctx->streams.insert(s);
  streams_[s.get()] = s;
  *ph = reinterpret_cast<CUstream>(s.get());
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuStreamDestroy_v2(CUstream h) {
  if (h == nullptr || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD)
    return CUDA_ERROR_INVALID_HANDLE;
  std::shared_ptr<Stream> s;
  {
    std::unique_lock lock(mu_);
    auto it = streams_.find(reinterpret_cast<Stream*>(h));
    if (it == streams_.end()) return CUDA_ERROR_INVALID_HANDLE;
    s = it->second.lock();
    streams_.erase(it);
    if (!s) return CUDA_ERROR_INVALID_HANDLE;
    auto c = contexts_.find(s->ctx());
    if (c != contexts_.end()) c->second->streams.erase(s);
  }
  // The driver returns at once and lets queued work finish; here the caller waits for it,
  // which keeps the worker's lifetime simple and is indistinguishable to the application.
  s->shut_down();
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuStreamSynchronize(CUstream h) {
  CtxPtr ctx;
  std::shared_ptr<Stream> s;
  if (CUresult e = stream_of(h, &ctx, &s)) return e;
  if (CUresult e = refuse_in_capture(*s)) return e;
  if (s->legacy()) {
    // The legacy stream's last op waits for the blocking streams; a no-op makes that explicit.
    submit(*ctx, *s, nullptr);
  }
  s->synchronize();
  release_pool_memory(ctx->session);
  return ctx->sticky.load();
}

// ---------------------------------------------------------------------------------------------
// Stream memory operations

CUresult SimGpu::stream_mem_op(CUstream h, CUdeviceptr addr, uint64_t value, unsigned width,
                               unsigned flags, bool write) {
  if (write ? (flags & ~unsigned{CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER}) != 0
            : (flags & ~(3u | unsigned{CU_STREAM_WAIT_VALUE_FLUSH})) != 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (addr % width != 0) return CUDA_ERROR_INVALID_VALUE;
  CopySide d;
  if (CUresult e = copy_linear_side(addr, width, &d)) return e;
  std::shared_ptr<Stream> s;
  CtxPtr sctx;
  if (CUresult e = stream_of(h, &sctx, &s)) return e;
  if (write) {
    submit(
        *sctx, *s,
        [d, value, width](CUresult sticky) {
          if (sticky != CUDA_SUCCESS) return;
          if (width == 4) {
            __atomic_store_n(reinterpret_cast<uint32_t*>(d.p), static_cast<uint32_t>(value),
                             __ATOMIC_SEQ_CST);
          } else {
            __atomic_store_n(reinterpret_cast<uint64_t*>(d.p), value, __ATOMIC_SEQ_CST);
          }
        },
        {}, NodeDesc(CU_GRAPH_NODE_TYPE_BATCH_MEM_OP));
    return CUDA_SUCCESS;
  }
  const unsigned cmp = flags & 3u;
  submit(
      *sctx, *s,
      [d, value, width, cmp](CUresult sticky) {
        if (sticky != CUDA_SUCCESS) return;
        auto met = [&] {
          uint64_t v = width == 4
                           ? __atomic_load_n(reinterpret_cast<uint32_t*>(d.p), __ATOMIC_SEQ_CST)
                           : __atomic_load_n(reinterpret_cast<uint64_t*>(d.p), __ATOMIC_SEQ_CST);
          const uint64_t mask = width == 4 ? 0xffffffffull : ~uint64_t{0};
          switch (cmp) {
            case CU_STREAM_WAIT_VALUE_GEQ:  // wrapping comparison, as the driver documents
              return width == 4 ? static_cast<int32_t>(static_cast<uint32_t>(v - value)) >= 0
                                : static_cast<int64_t>(v - value) >= 0;
            case CU_STREAM_WAIT_VALUE_EQ:
              return v == (value & mask);
            case CU_STREAM_WAIT_VALUE_AND:
              return (v & value & mask) != 0;
            default:  // NOR
              return (~(v | value) & mask) != 0;
          }
        };
        // Polled, backing off to a millisecond: what it waits for is a kernel, a write on
        // another stream or a copy, none of which signals here. It gives up when the stream
        // running it (the one it was queued on, or the one a graph holding it was launched on)
        // shuts down.
        Stream* stream = Stream::running();
        for (auto pause = std::chrono::microseconds(2); !met();
             pause = std::min(pause * 2, std::chrono::microseconds(1000))) {
          if (!stream || stream->stopping()) {
            spdlog::warn(
                "sim: a stream wait for the value at 0x{:x} was given up: its stream "
                "was destroyed",
                d.keep ? d.keep->base : 0);
            return;
          }
          std::this_thread::sleep_for(pause);
        }
      },
      {}, NodeDesc(CU_GRAPH_NODE_TYPE_BATCH_MEM_OP));
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuStreamWaitValue32_v2(CUstream h, CUdeviceptr addr, cuuint32_t value,
                                        unsigned int flags) {
  return stream_mem_op(h, addr, value, 4, flags, false);
}
CUresult SimGpu::cuStreamWaitValue64_v2(CUstream h, CUdeviceptr addr, cuuint64_t value,
                                        unsigned int flags) {
  return stream_mem_op(h, addr, value, 8, flags, false);
}
CUresult SimGpu::cuStreamWriteValue32_v2(CUstream h, CUdeviceptr addr, cuuint32_t value,
                                         unsigned int flags) {
  return stream_mem_op(h, addr, value, 4, flags, true);
}
CUresult SimGpu::cuStreamWriteValue64_v2(CUstream h, CUdeviceptr addr, cuuint64_t value,
                                         unsigned int flags) {
  return stream_mem_op(h, addr, value, 8, flags, true);
}

CUresult SimGpu::cuStreamQuery(CUstream h) {
  CtxPtr ctx;
  std::shared_ptr<Stream> s;
  if (CUresult e = stream_of(h, &ctx, &s)) return e;
  if (CUresult e = refuse_in_capture(*s)) return e;
  if (CUresult e = ctx->sticky.load()) return e;
  return s->idle() ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult SimGpu::cuStreamWaitEvent(CUstream h, CUevent ev, unsigned flags) {
  if (flags & ~unsigned{CU_EVENT_WAIT_EXTERNAL}) return CUDA_ERROR_INVALID_VALUE;
  MarkerPtr m;
  std::shared_ptr<Capture> captured;
  // Where in that capture it was recorded: read with it, in one look (another session's
  // record through an interprocess handle may change the event meanwhile).
  const void* from = nullptr;
  uint64_t at = 0;
  std::shared_ptr<const std::vector<uint32_t>> joined;
  {
    std::shared_lock lock(mu_);
    auto it = events_.find(reinterpret_cast<Event*>(ev));
    if (it == events_.end()) return CUDA_ERROR_INVALID_HANDLE;
    std::lock_guard elock(it->second->state->mu);
    m = it->second->state->record;
    captured = it->second->state->captured.lock();
    from = it->second->state->captured_stream;
    at = it->second->state->captured_at;
    joined = it->second->state->captured_frontier;
  }
  if (flags & CU_EVENT_WAIT_EXTERNAL) {
    CtxPtr ctx;
    std::shared_ptr<Stream> s;
    if (CUresult e = stream_of(h, &ctx, &s)) return e;
    if (capture_of(*s)) {
      // In a capture: a node that waits, at each launch, for the event's record then.
      Event* key = reinterpret_cast<Event*>(ev);
      submit(
          *ctx, *s,
          [this, key](CUresult) {
            MarkerPtr now;
            {
              std::shared_lock lock(mu_);
              auto it = events_.find(key);
              if (it == events_.end()) return;
              std::lock_guard elock(it->second->state->mu);
              now = it->second->state->record;
            }
            if (now) now->wait();
          },
          {}, NodeDesc(CU_GRAPH_NODE_TYPE_WAIT_EVENT));
      return CUDA_SUCCESS;
    }
    captured = nullptr;  // outside a capture: an ordinary wait
  }
  if (captured) {
    // Waiting on an event recorded in a capture joins that capture.
    CtxPtr ctx;
    std::shared_ptr<Stream> s;
    if (CUresult e = stream_of(h, &ctx, &s)) return e;
    std::unique_lock lock(mu_);
    if (!captured->ended) {
      if (s->legacy()) return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
      if (s->capture && s->capture != captured) return CUDA_ERROR_STREAM_CAPTURE_MERGE;
      if (from != s.get()) {
        // The recording stream's work up to the record is joined into this stream.
        std::lock_guard glock(captured->graph->mu);
        Capture::StreamOps& ops = captured->stream_ops[from];
        ops.joined = std::max(ops.joined, at);
        // This stream's next operation follows the recording stream's work up to the record
        // (both lists sorted: one merge, linear, under the sim's lock).
        std::shared_ptr<const std::vector<uint32_t>>& mine = captured->frontier[s.get()];
        if (joined && !joined->empty()) {
          static const std::vector<uint32_t> kNone;
          const std::vector<uint32_t>& had = mine ? *mine : kNone;
          std::vector<uint32_t> merged;
          merged.reserve(had.size() + joined->size());
          std::set_union(had.begin(), had.end(), joined->begin(), joined->end(),
                         std::back_inserter(merged));
          // Only this graph's operations (sorted: any other index is at the end).
          merged.erase(std::lower_bound(merged.begin(), merged.end(), captured->graph->ops.size()),
                       merged.end());
          if (merged.size() > kMaxFrontier) {
            captured->invalidated = true;
          } else {
            mine = std::make_shared<const std::vector<uint32_t>>(std::move(merged));
          }
        }
      }
      s->capture = std::move(captured);
      return CUDA_SUCCESS;
    }
  }
  return stream_wait_marker(h, std::move(m));
}

CUresult SimGpu::cuStreamAddCallback(CUstream h, CUstreamCallback cb, void* user, unsigned flags) {
  if (!cb || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return add_host_call(h, [h, cb, user](CUresult status) { cb(h, status, user); });
}

CUresult SimGpu::cuLaunchHostFunc(CUstream h, CUhostFn fn, void* user) {
  if (!fn) return CUDA_ERROR_INVALID_VALUE;
  return add_host_call(h, [fn, user](CUresult status) {
    if (status == CUDA_SUCCESS) fn(user);
  });
}

CUresult SimGpu::cuStreamGetPriority(CUstream h, int* priority) {
  return stream_query(h, priority, [](const CtxPtr&, Stream& s) { return s.priority(); });
}

CUresult SimGpu::cuStreamGetFlags(CUstream h, unsigned* flags) {
  return stream_query(h, flags, [](const CtxPtr&, Stream& s) { return s.flags(); });
}

CUresult SimGpu::cuStreamGetId(CUstream h, unsigned long long* id) {
  return stream_query(h, id, [](const CtxPtr&, Stream& s) { return s.id(); });
}

CUresult SimGpu::cuStreamGetCtx(CUstream h, CUcontext* pctx) {
  return stream_query(
      h, pctx, [](const CtxPtr& ctx, Stream&) { return reinterpret_cast<CUcontext>(ctx.get()); });
}

CUresult SimGpu::cuStreamGetCtx_v2(CUstream h, CUcontext* pctx, CUgreenCtx* pgreen) {
  if (!pctx || !pgreen) return CUDA_ERROR_INVALID_VALUE;
  CtxPtr ctx;
  std::shared_ptr<Stream> s;
  if (CUresult e = stream_of(h, &ctx, &s)) return e;
  if (!ctx->green) {
    *pgreen = nullptr;
    *pctx = reinterpret_cast<CUcontext>(ctx.get());
    return CUDA_SUCCESS;
  }
  // A green context's stream names the green context, and its device's primary context.
  *pgreen = reinterpret_cast<CUgreenCtx>(ctx.get());
  std::shared_lock lock(mu_);
  const Device& d = devices_[ctx->device];
  *pctx = d.primary && d.primary_refs > 0 ? reinterpret_cast<CUcontext>(d.primary.get()) : nullptr;
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuStreamGetDevice(CUstream h, CUdevice* dev) {
  return stream_query(h, dev, [](const CtxPtr& ctx, Stream&) { return ctx->device; });
}

CUresult SimGpu::cuStreamAttachMemAsync(CUstream h, CUdeviceptr p, size_t length, unsigned flags) {
  if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST && flags != CU_MEM_ATTACH_SINGLE)
    return CUDA_ERROR_INVALID_VALUE;
  auto a = find(p, length);
  if (!a || a->kind != MemKind::kManaged) return CUDA_ERROR_INVALID_VALUE;
  // Managed memory is coherent here, so attachment only orders like any stream operation.
  return stream_wait_marker(h, nullptr);
}

// ---------------------------------------------------------------------------------------------
// Events

CUresult SimGpu::cuEventCreate(CUevent* ph, unsigned flags) {
  if (!ph) return CUDA_ERROR_INVALID_VALUE;
  constexpr unsigned kKnown =
      CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
  if (flags & ~kKnown) return CUDA_ERROR_INVALID_VALUE;
  if ((flags & CU_EVENT_INTERPROCESS) && !(flags & CU_EVENT_DISABLE_TIMING))
    return CUDA_ERROR_INVALID_VALUE;
  CtxPtr ctx;
  if (CUresult e = current(&ctx)) return e;
  auto ev = std::make_unique<Event>();
  ev->ctx = ctx.get();
  ev->flags = flags;
  Event* raw = ev.get();
  std::unique_lock lock(mu_);
  ctx->events.insert(raw);
  events_[raw] = std::move(ev);
  *ph = reinterpret_cast<CUevent>(raw);
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuEventRecord(CUevent ev, CUstream h) {
  return cuEventRecordWithFlags(ev, h, CU_EVENT_RECORD_DEFAULT);
}

CUresult SimGpu::cuEventRecordWithFlags(CUevent ev, CUstream h, unsigned flags) {
  if (flags & ~unsigned{CU_EVENT_RECORD_EXTERNAL}) return CUDA_ERROR_INVALID_VALUE;
  Context* event_ctx = nullptr;
  {
    std::shared_lock lock(mu_);
    auto it = events_.find(reinterpret_cast<Event*>(ev));
    if (it == events_.end()) return CUDA_ERROR_INVALID_HANDLE;
    event_ctx = it->second->ctx;
  }
  CtxPtr ctx;
  std::shared_ptr<Stream> s;
  if (CUresult e = stream_of(h, &ctx, &s)) return e;
  if (ctx.get() != event_ctx) return CUDA_ERROR_INVALID_HANDLE;
  std::shared_ptr<Capture> capture = capture_of(*s);
  if (capture && (flags & CU_EVENT_RECORD_EXTERNAL)) {
    // In a capture: a node that records the event at each launch, where it stands.
    Event* key = reinterpret_cast<Event*>(ev);
    submit(
        *ctx, *s,
        [this, key](CUresult) {
          auto done = std::make_shared<Marker>();
          done->complete();
          std::shared_lock lock(mu_);
          auto it = events_.find(key);
          if (it == events_.end()) return;
          std::lock_guard elock(it->second->state->mu);
          it->second->state->captured.reset();
          it->second->state->record = std::move(done);
        },
        {}, NodeDesc(CU_GRAPH_NODE_TYPE_EVENT_RECORD));
    return CUDA_SUCCESS;
  }
  MarkerPtr m = capture ? nullptr : submit(*ctx, *s, nullptr);
  std::shared_lock lock(mu_);
  auto it = events_.find(reinterpret_cast<Event*>(ev));
  if (it == events_.end()) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard elock(it->second->state->mu);
  // In a capture the record is a point of the graph: other streams that wait on it join.
  it->second->state->captured = capture;
  it->second->state->captured_stream = capture ? s.get() : nullptr;
  it->second->state->captured_at = 0;
  it->second->state->captured_frontier.reset();
  if (capture) {
    std::lock_guard glock(capture->graph->mu);
    it->second->state->captured_at = capture->stream_ops[s.get()].captured;
    it->second->state->captured_frontier = capture->frontier[s.get()];
  }
  if (!capture) it->second->state->record = std::move(m);
  return CUDA_SUCCESS;
}

namespace {
CUresult event_marker(std::shared_mutex& mu, std::map<Event*, std::unique_ptr<Event>>& events,
                      CUevent ev, MarkerPtr* out, unsigned* flags, Context** ctx) {
  std::shared_lock lock(mu);
  auto it = events.find(reinterpret_cast<Event*>(ev));
  if (it == events.end()) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard elock(it->second->state->mu);
  *out = it->second->state->record;
  if (flags) *flags = it->second->flags;
  if (ctx) *ctx = it->second->ctx;
  return CUDA_SUCCESS;
}
}  // namespace

CUresult SimGpu::cuEventQuery(CUevent ev) {
  MarkerPtr m;
  if (CUresult e = event_marker(mu_, events_, ev, &m, nullptr, nullptr)) return e;
  return !m || m->done() ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult SimGpu::cuEventSynchronize(CUevent ev) {
  MarkerPtr m;
  Context* ctx = nullptr;
  if (CUresult e = event_marker(mu_, events_, ev, &m, nullptr, &ctx)) return e;
  if (m) m->wait();
  uint64_t session = 0;
  CUresult rc = CUDA_SUCCESS;
  {
    std::shared_lock lock(mu_);
    auto it = contexts_.find(ctx);
    if (it != contexts_.end()) {
      session = it->second->session;
      rc = it->second->sticky.load();
    }
  }
  release_pool_memory(session);
  return rc;
}

CUresult SimGpu::cuEventDestroy_v2(CUevent ev) {
  std::unique_lock lock(mu_);
  auto it = events_.find(reinterpret_cast<Event*>(ev));
  if (it == events_.end()) return CUDA_ERROR_INVALID_HANDLE;
  auto c = contexts_.find(it->second->ctx);
  if (c != contexts_.end()) c->second->events.erase(it->first);
  events_.erase(it);
  return CUDA_SUCCESS;
}

// Interprocess event handles: the handle names the event and a nonce drawn at its first
// export; an event opened from it, in another context, shares its records (EventState).
namespace {
constexpr char kIpcEventMagic[8] = {'c', 'u', 'w', 'e', 'v', 't', '1', 0};
struct IpcEventNames {
  uint64_t event;
  uint64_t nonce;
};
}  // namespace

CUresult SimGpu::cuIpcGetEventHandle(CUipcEventHandle* out, CUevent ev) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  std::unique_lock lock(mu_);
  auto it = events_.find(reinterpret_cast<Event*>(ev));
  if (it == events_.end()) return CUDA_ERROR_INVALID_HANDLE;
  Event& e = *it->second;
  if (!(e.flags & CU_EVENT_INTERPROCESS)) return CUDA_ERROR_INVALID_VALUE;
  if (e.ipc_nonce == 0) e.ipc_nonce = draw_nonce();
  IpcEventNames h{};
  h.event = reinterpret_cast<uint64_t>(&e);
  h.nonce = e.ipc_nonce;
  pack_ipc_handle(out, kIpcEventMagic, h);
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuIpcOpenEventHandle(CUevent* out, CUipcEventHandle handle) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  IpcEventNames h;
  if (!unpack_ipc_handle(handle, kIpcEventMagic, &h)) return CUDA_ERROR_INVALID_VALUE;
  CtxPtr ctx;
  if (CUresult e = current(&ctx)) return e;
  auto ev = std::make_unique<Event>();
  std::unique_lock lock(mu_);
  auto it = events_.find(reinterpret_cast<Event*>(h.event));
  if (it == events_.end() || it->second->ipc_nonce == 0 || it->second->ipc_nonce != h.nonce) {
    return CUDA_ERROR_INVALID_VALUE;  // destroyed since, or never exported
  }
  if (it->second->ctx == ctx.get()) return CUDA_ERROR_INVALID_CONTEXT;
  ev->ctx = ctx.get();
  ev->flags = it->second->flags;
  ev->state = it->second->state;
  Event* raw = ev.get();
  ctx->events.insert(raw);
  events_[raw] = std::move(ev);
  *out = reinterpret_cast<CUevent>(raw);
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuEventElapsedTime_v2(float* ms, CUevent start, CUevent end) {
  if (!ms) return CUDA_ERROR_INVALID_VALUE;
  MarkerPtr a, b;
  unsigned fa = 0, fb = 0;
  if (CUresult e = event_marker(mu_, events_, start, &a, &fa, nullptr)) return e;
  if (CUresult e = event_marker(mu_, events_, end, &b, &fb, nullptr)) return e;
  if ((fa | fb) & CU_EVENT_DISABLE_TIMING) return CUDA_ERROR_INVALID_HANDLE;
  if (!a || !b) return CUDA_ERROR_INVALID_HANDLE;
  if (!a->done() || !b->done()) return CUDA_ERROR_NOT_READY;
  *ms = std::chrono::duration<float, std::milli>(b->when() - a->when()).count();
  return CUDA_SUCCESS;
}

}  // namespace cuwire::server::sim
