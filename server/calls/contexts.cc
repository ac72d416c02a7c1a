// Contexts: every session gets its own contexts. What the app sees as a device's primary
// context is a context this session created on the backend (cuCtxCreate), never the backend's
// real primary context, which all sessions would share.

#include <cuda.h>

#include <algorithm>
#include <cstdint>

#include "protocol/wire_formats.h"
#include "server/backend/backend.h"
#include "server/session/dispatch.h"

namespace cuwire::server {

namespace {

// Creates a context for `device` without disturbing this thread's current context: the
// session switches contexts itself, by each call's context id.
CUresult create_context(SessionContext& cx, const formats::ContextArgs& a) {
  Backend& api = cx.backend();
  CUcontext prev = nullptr;
  api.cuCtxGetCurrent(&prev);
  CUcontext ctx = nullptr;
  CUresult rc = cx.make_context(a.device, a.flags, &ctx);
  if (rc != CUDA_SUCCESS) return rc;
  // What the context spends of its own is its tenant's (design decision 13), on its device.
  SessionContext::Charge footprint;
  rc = cx.precharge_on(a.device, CheckedSize(cx.context_footprint()), &footprint);
  api.cuCtxSetCurrent(prev);
  if (rc != CUDA_SUCCESS) {
    cx.destroy_context(ctx);
    return rc;
  }
  if (CUresult e = cx.bind(HandleKind::kContext, a.ctx_id, ctx)) {
    cx.refund(&footprint);
    cx.destroy_context(ctx);
    return e;
  }
  cx.hold(HandleKind::kContext, ctx, &footprint);
  return CUDA_SUCCESS;
}

CUresult read_context_args(SessionContext& cx, ArgReader& in, formats::ContextArgs* a) {
  if (!in.get(a) || !in.at_end()) return in.malformed();
  CUdevice dev = a->device;
  if (CUresult e = cx.device_in(&dev)) return e;
  a->device = dev;
  return CUDA_SUCCESS;
}

}  // namespace

CUresult custom_cuDevicePrimaryCtxRetain(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  formats::ContextArgs a{};
  if (CUresult e = read_context_args(cx, in, &a)) return e;
  CUcontext existing = nullptr;
  if (cx.lookup(HandleKind::kContext, a.ctx_id, &existing) == CUDA_SUCCESS && existing) {
    return CUDA_SUCCESS;
  }
  if (CUresult e = cx.check_room(HandleKind::kContext)) return e;
  return create_context(cx, a);
}

CUresult custom_cuDevicePrimaryCtxReset_v2(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  formats::ContextArgs a{};
  if (CUresult e = read_context_args(cx, in, &a)) return e;
  CUcontext old = nullptr;
  if (CUresult e = cx.lookup(HandleKind::kContext, a.ctx_id, &old)) return e;
  if (cx.is_green_context_ctx(a.ctx_id)) return CUDA_ERROR_INVALID_CONTEXT;
  if (old) {
    cx.release_context_contents(a.ctx_id);
    CUcontext current = nullptr;
    cx.backend().cuCtxGetCurrent(&current);
    if (current == old) cx.backend().cuCtxSetCurrent(nullptr);  // never left dangling
    cx.destroy_context(old);
    cx.release(a.ctx_id);
  }
  if (CUresult e = create_context(cx, a)) return e;
  // The id stays the same, so the session will not switch to it again: when it was the
  // session thread's current context, the fresh one takes its place.
  if (old && cx.current_context() == a.ctx_id) {
    CUcontext fresh = nullptr;
    if (CUresult e = cx.lookup(HandleKind::kContext, a.ctx_id, &fresh)) return e;
    return cx.backend().cuCtxSetCurrent(fresh);
  }
  return CUDA_SUCCESS;
}

CUresult custom_cuCtxCreate_v4(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  formats::ContextArgs a{};
  if (CUresult e = read_context_args(cx, in, &a)) return e;
  if (CUresult e = cx.check_mint(a.ctx_id, HandleKind::kContext)) return e;
  return create_context(cx, a);
}

// Limits that reserve device memory for the context (design decision 13): the per-thread stack
// for every thread the device can hold at once, the device heap and the printf FIFO. What the
// context reserves beyond its first figures is charged to the tenant before the backend
// reserves it.
CUresult custom_cuCtxSetLimit(SessionContext& cx, ArgReader& in, ReplyWriter&) {
  CUlimit limit{};
  size_t value = 0;
  if (!in.get(&limit) || !in.get(&value) || !in.at_end()) return in.malformed();
  Backend& api = cx.backend();
  auto set = [&] { return api.cuCtxSetLimit(limit, value); };
  uint64_t per_unit = 1;
  switch (wire_enum(limit)) {
    case enum_value(CU_LIMIT_MALLOC_HEAP_SIZE):
      // A backend that keeps sessions apart charges the heap itself when it reserves it
      // (SessionObjects::set_context_reservations), at its full size.
      if (cx.backend_charges_reservations()) return set();
      break;
    case enum_value(CU_LIMIT_PRINTF_FIFO_SIZE):
      break;
    case enum_value(CU_LIMIT_STACK_SIZE): {
      CUdevice dev = 0;
      int sms = 0, threads = 0;
      if (CUresult e = api.cuCtxGetDevice(&dev)) return e;
      if (CUresult e =
              api.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev))
        return e;
      if (CUresult e = api.cuDeviceGetAttribute(
              &threads, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, dev)) {
        return e;
      }
      per_unit =
          static_cast<uint64_t>(std::max(sms, 1)) * static_cast<uint64_t>(std::max(threads, 1));
      break;
    }
    case enum_value(CU_LIMIT_PERSISTING_L2_CACHE_SIZE):
      // The L2 set-aside is the device's, not the context's: one tenant's would be every
      // tenant's where sessions share the driver's process.
      if (value != 0 && !cx.backend_keeps_sessions_apart()) return CUDA_ERROR_NOT_SUPPORTED;
      return set();
    default:
      return set();  // reserves no device memory
  }
  size_t before = 0;
  if (CUresult e = api.cuCtxGetLimit(&before, limit)) return e;
  const CheckedSize had = CheckedSize(before) * CheckedSize(per_unit);
  return cx.reserve_for_limit(limit, had.ok() ? had.value() : UINT64_MAX,
                              CheckedSize(value) * CheckedSize(per_unit), set);
}

CUresult custom_cuCtxDestroy_v2(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  uint64_t id = 0;
  CUcontext ctx = nullptr;
  if (CUresult e = in.get_only_handle(cx, HandleKind::kContext, false, &id, &ctx)) return e;
  if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
  // A green context's goes with it (cuGreenCtxDestroy), never alone.
  if (cx.is_green_context_ctx(id)) return CUDA_ERROR_INVALID_CONTEXT;
  // Everything the session made in the context goes with it, on the backend and in the
  // session's tables: a graph exec or stream kept past its context is an unknown handle.
  cx.release_context_contents(id);
  if (CUresult e = cx.destroy_context(ctx)) return e;
  if (cx.current_context() == id) cx.set_current_context(0);  // nothing current now
  cx.release(id);
  return CUDA_SUCCESS;
}

}  // namespace cuwire::server
