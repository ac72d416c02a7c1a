#include "server/session/call_executor.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <exception>
#include <new>
#include <optional>
#include <stdexcept>

#include "generated/call_ids.h"
#include "server/backend/backend.h"
#include "server/backend/cuda/stdout_capture.h"
#include "server/backend/relay/upstream.h"
#include "server/session/bulk_extent.h"
#include "server/session/session.h"
#include "server/tenancy/compute_scheduler.h"
#include "server/tenancy/sm_partition.h"
#include "server/tenancy/tenants.h"

namespace cuwire::server {
namespace {

// Device printf text carried by one reply; what does not fit waits for the next synchronizing
// call. Leaves room for the outs under FrameLimits::max_message_bytes (1 MiB by default).
constexpr size_t kMaxDeviceOutputPerReply = 512 << 10;
// Captured device output a session may have waiting for its replies (as the sim backend keeps
// per context); more is dropped, with a warning.
constexpr size_t kMaxCapturedDeviceOutput = 4 << 20;

// What a call that threw answers. Out of memory (bad_alloc, and length_error: a size no
// container can hold) is CUDA_ERROR_OUT_OF_MEMORY, as the driver answers an allocation it
// cannot make; anything else is a server fault the client cannot act on: CUDA_ERROR_UNKNOWN.
// The session goes on either way: an exception is the call's failure, not the session's.
CUresult result_for_exception(std::exception_ptr e, std::string* what) {
  try {
    std::rethrow_exception(e);
  } catch (const std::bad_alloc&) {
    *what = "out of memory";
    return CUDA_ERROR_OUT_OF_MEMORY;
  } catch (const std::length_error& x) {
    *what = std::string("length error: ") + x.what();
    return CUDA_ERROR_OUT_OF_MEMORY;
  } catch (const std::exception& x) {
    *what = x.what();
    return CUDA_ERROR_UNKNOWN;
  } catch (...) {
    *what = "an exception of unknown type";
    return CUDA_ERROR_UNKNOWN;
  }
}

const char* result_name(CUresult rc) {
  return rc == CUDA_ERROR_OUT_OF_MEMORY ? "CUDA_ERROR_OUT_OF_MEMORY" : "CUDA_ERROR_UNKNOWN";
}

}  // namespace

CallExecutor::CallExecutor(Backend& backend, const SessionConfig& config, Tenant* tenant,
                           std::string who, WarnFn warn, int gpu,
                           std::shared_ptr<SessionStats> stats)
    : backend_(backend),
      config_(config),
      who_(std::move(who)),
      warn_(std::move(warn)),
      cx_(backend, config.handles),
      out_(std::make_unique<ReplyWriter>(config.limits.max_bulk_bytes)),
      device_output_(backend.device_output()),
      direct_(backend.device_memory_io()) {
  cx_.set_account(tenant);
  cx_.set_context_footprint(config.context_memory);
  cx_.set_ipc_tenant(tenant ? tenant->name() : std::string());
  if (stats) {
    stats_ = std::move(stats);
  } else if (tenant) {
    tenant_ = tenant;
    stats_ = tenant->stats().open_session(gpu);
  }
  if (config_.partitions && tenant) cx_.set_partitions(config_.partitions->of(tenant->name()));
  if (config_.upstream) {
    epoch_ = config_.upstream->join();
    upstream_session_ = config_.upstream->open_session();
    cx_.set_relay(upstream_session_ != nullptr);
  }
  if (config_.compute && !config_.compute->empty()) {
    // A relay's markers are asked about in the session's own upstream session.
    const MarkerRoute route{upstream_session_ ? config_.upstream : nullptr, upstream_session_,
                            epoch_};
    compute_ = std::make_unique<ComputeGate>(cx_, *config_.compute, tenant, route);
    cx_.set_work_gate(compute_.get());
  }
}

CallExecutor::~CallExecutor() {
  finish();
  if (tenant_) tenant_->stats().close_session(stats_);
}

CUresult CallExecutor::before_call(const CallView& call) {
  // Each call runs in the calling app thread's current context; switching costs nothing when
  // one thread (the common case) keeps one context.
  if (call.context != cx_.current_context()) {
    CUcontext ctx = nullptr;
    if (CUresult e = cx_.lookup(HandleKind::kContext, call.context, &ctx)) return e;
    if (CUresult e = backend_.cuCtxSetCurrent(ctx)) return e;
    cx_.set_current_context(call.context);
  }
  if (device_output_ && call.context != 0) output_contexts_.insert(call.context);
  return CUDA_SUCCESS;
}

void CallExecutor::after_call(const CallView&, CUresult rc) {
  if (config_.upstream) config_.upstream->check(rc);
}

CUresult CallExecutor::run(const CallView& call, std::span<const uint8_t> bulk, bool* known,
                           bool* malformed) {
  ArgReader in(call.args, bulk);
  BulkScope bulk_scope(bulk);
  StdoutCapture* capture = config_.device_printf;
  CUresult rc;
  if (capture && cx_.may_print() && call_is_sync(call.call_id)) {
    rc = capture->run(&captured_, kMaxCapturedDeviceOutput, &captured_dropped_,
                      [&] { return dispatch_call(call.call_id, cx_, in, *out_, known); });
  } else {
    rc = dispatch_call(call.call_id, cx_, in, *out_, known);
  }
  *malformed = in.was_malformed();
  return rc;
}

void CallExecutor::collect_device_output(const CallView& call) {
  output_text_.clear();
  if (!call_is_sync(call.call_id)) return;
  if (device_output_) {
    for (auto it = output_contexts_.begin(); it != output_contexts_.end();) {
      CUcontext ctx = nullptr;
      if (cx_.lookup(HandleKind::kContext, *it, &ctx) != CUDA_SUCCESS || !ctx) {
        it = output_contexts_.erase(it);  // destroyed: its output went with it
        continue;
      }
      device_output_->take_device_output(ctx, kMaxDeviceOutputPerReply - output_text_.size(),
                                         &output_text_);
      ++it;
    }
  }
  if (!captured_.empty()) {
    size_t n = std::min(captured_.size(), kMaxDeviceOutputPerReply - output_text_.size());
    output_text_.append(captured_, 0, n);
    captured_.erase(0, n);
  }
  if (captured_dropped_ > 0) {
    warn_(fmt::format("{}: {} bytes of device printf output dropped (more than {} waiting)", who_,
                      captured_dropped_, kMaxCapturedDeviceOutput));
    captured_dropped_ = 0;
  }
}

CUresult CallExecutor::execute(const CallView& call, std::span<const uint8_t> bulk,
                               bool wants_reply, std::vector<uint8_t>* reply,
                               std::span<const uint8_t>* reply_bulk,
                               std::chrono::steady_clock::time_point arrival,
                               BulkChannel* channel) {
  const auto start = std::chrono::steady_clock::now();
  *reply_bulk = {};
  CUresult rc = CUDA_SUCCESS;
  const uint64_t streamed_in = channel ? channel->in_left() : 0;
  StreamedIo io;
  if (channel) {
    io.channel = channel;
    io.direct = direct_;
    // Its buffers are made on first use: by the cuda backend's copies, and by any backend's on
    // a GPU shared under compute caps (server/calls/copies.h).
    if (!staging_) staging_ = std::make_unique<CopyStaging>(backend_);
    io.staging = staging_.get();
    cx_.set_streamed(&io);
  }
  execute_call(call, bulk, wants_reply, reply, reply_bulk, &rc, channel);
  cx_.set_streamed(nullptr);
  if (stats_) {
    // A streamed call's bytes are counted as they would be whole: those it took in, and those
    // of a reply it began (its count argument, as streams_reply_bulk read it).
    uint64_t streamed_out = 0;
    if (channel && channel->reply_begun()) {
      ArgCursor c(call.args);
      uint64_t src = 0;
      c.get(&src);
      c.get(&streamed_out);
    }
    const auto end = std::chrono::steady_clock::now();
    using std::chrono::nanoseconds;
    stats_->record(
        call.call_id,
        static_cast<uint64_t>(
            std::max<int64_t>(0, std::chrono::duration_cast<nanoseconds>(start - arrival).count())),
        static_cast<uint64_t>(std::chrono::duration_cast<nanoseconds>(end - start).count()), rc,
        bulk.size() + streamed_in - (channel ? channel->in_left() : 0),
        reply_bulk->size() + streamed_out);
    stats_->set_memory(cx_.allocated_bytes());
  }
  return rc;
}

void CallExecutor::encode_streamed_reply(const CallView& call, std::vector<uint8_t>* msg) {
  collect_device_output(call);
  encode_reply(CUDA_SUCCESS, out_->outs(), msg,
               {reinterpret_cast<const uint8_t*>(output_text_.data()), output_text_.size()});
}

void CallExecutor::execute_call(const CallView& call, std::span<const uint8_t> bulk,
                                bool wants_reply, std::vector<uint8_t>* reply,
                                std::span<const uint8_t>* reply_bulk, CUresult* result,
                                BulkChannel* channel) {
  CUresult& rc = *result;
  // The session's boundary for one call: whatever the call throws (an allocation the host
  // cannot make, a bug) becomes this call's result; the session and the server go on.
  try {
    out_->clear();
    // A relay: the call reaches the upstream only while the session's epoch is current.
    std::optional<UpstreamLink::Use> use;
    if (config_.upstream) {
      use.emplace(config_.upstream->use(epoch_));
      if (!*use) rc = CUDA_ERROR_DEVICE_UNAVAILABLE;
      // The library's calls on this thread go to this session's own upstream session.
      config_.upstream->bind(upstream_session_);
    }
    if (rc == CUDA_SUCCESS) rc = before_call(call);
    bool known = true, malformed = false;
    if (rc == CUDA_SUCCESS) {
      rc = run(call, bulk, &known, &malformed);
      after_call(call, rc);
    }
    if (!known) {
      warn_(fmt::format("{}: unknown call id {}", who_, call.call_id));
    } else if (malformed) {
      warn_(fmt::format("{}: malformed arguments for {}", who_, call_name(call.call_id)));
    }
    if (!wants_reply) {
      // A stream-capture error of a fire-and-forget call invalidated its capture, which the
      // capture's end reports; the client already returned it where it can tell (check= in
      // the manifest). Deferring it too would fail an unrelated later call.
      if (rc != CUDA_SUCCESS && rc != CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) cx_.defer_error(rc);
      return;
    }
    if (rc == CUDA_SUCCESS && call_is_sync(call.call_id)) rc = cx_.take_deferred_error();
    // A streamed reply went out already, with its device output; the trailer tells rc.
    if (channel && channel->reply_begun()) return;
    collect_device_output(call);
    const bool send_outs = rc == CUDA_SUCCESS;
    encode_reply(static_cast<uint32_t>(rc), send_outs ? out_->outs() : std::span<const uint8_t>{},
                 reply,
                 {reinterpret_cast<const uint8_t*>(output_text_.data()), output_text_.size()});
    if (send_outs) *reply_bulk = out_->bulk();
  } catch (...) {
    std::string what;
    rc = result_for_exception(std::current_exception(), &what);
    warn_(fmt::format("{}: {} failed inside the server: {}; answered {}", who_,
                      call_name(call.call_id), what, result_name(rc)));
    // Whatever the call built is dropped with its memory.
    out_ = std::make_unique<ReplyWriter>(config_.limits.max_bulk_bytes);
    output_text_.clear();
    *reply_bulk = {};
    if (!wants_reply) {
      cx_.defer_error(rc);
    } else if (!(channel && channel->reply_begun())) {
      encode_reply(static_cast<uint32_t>(rc), {}, reply);
    }
  }
}

void CallExecutor::finish() {
  if (finished_) return;
  finished_ = true;
  // The staging buffers go last: the session's kernels may reach them until reclaim has drained
  // its streams and destroyed its contexts.
  struct EndStaging {
    std::unique_ptr<CopyStaging>& staging;
    ~EndStaging() { staging.reset(); }
  } end_staging{staging_};
  size_t bytes = cx_.allocated_bytes(), allocs = cx_.allocation_count();
  size_t handles = cx_.handle_count();
  std::optional<UpstreamLink::Use> use;
  if (config_.upstream) {
    use.emplace(config_.upstream->use(epoch_));
    config_.upstream->bind(upstream_session_);
  }
  // Its upstream session ends with it, whatever is left there going with it.
  struct EndUpstream {
    UpstreamLink* link;
    void* session;
    ~EndUpstream() {
      if (!link) return;
      link->bind(nullptr);
      link->close_session(session);
    }
  } end_upstream{config_.upstream, upstream_session_};
  upstream_session_ = nullptr;
  if (use && !*use) {
    // What the session made lived in an upstream session that is gone.
    cx_.forget_all();
    if (allocs || handles) {
      spdlog::info("{}: {} allocations and {} handles went with the lost upstream", who_, allocs,
                   handles);
    }
    return;
  }
  cx_.reclaim();
  if (cx_.current_context() != 0) backend_.cuCtxSetCurrent(nullptr);
  if (allocs || handles) {
    spdlog::info("{}: reclaimed {} allocations ({} bytes) and {} handles", who_, allocs, bytes,
                 handles);
  }
}

size_t CallExecutor::retained_bytes() const {
  return output_text_.capacity() + captured_.capacity() + out_->bulk().size() +
         out_->outs().size() + (staging_ ? staging_->bytes() : 0);
}

void CallExecutor::release_large_buffers() {
  // Memory committed for one call alone goes back now.
  if (out_->bulk().size() > kRetainedBufferBytes || out_->outs().size() > kRetainedBufferBytes) {
    out_ = std::make_unique<ReplyWriter>(config_.limits.max_bulk_bytes);
  }
  release_if_large(&output_text_);
}

}  // namespace cuwire::server
