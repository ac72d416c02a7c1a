// SM resources and green contexts. The driver-internal part of a CUdevResource never leaves
// the server: a client gets the type and the SM figures, and a ResourceRef naming the
// backend's resource, which the session keeps (SessionContext::keep_resource).

#include <cuda.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "protocol/wire_formats.h"
#include "server/backend/backend.h"
#include "server/session/dispatch.h"
#include "server/tenancy/sm_partition.h"

namespace cuwire::server {

// A tenant with SMs of its own (sm_partition.h) sees its partition as the device's resource, so
// whatever it splits and makes green contexts of stays inside it.

namespace {

void put_resource(SessionContext& cx, ReplyWriter& out, const CUdevResource& backend) {
  CUdevResource r;
  std::memset(&r, 0, sizeof r);
  r.type = CU_DEV_RESOURCE_TYPE_SM;
  r.sm = backend.sm;
  const formats::ResourceRef ref{formats::kResourceMagic, 0, cx.keep_resource(backend)};
  std::memcpy(r._internal_padding, &ref, sizeof ref);
  out.put_bytes(&r, sizeof r);
}

// The backend's resource a client's copy names: CUDA_ERROR_INVALID_VALUE for one the session
// was not handed, or whose figures were changed.
CUresult resource_in(SessionContext& cx, const CUdevResource& client, CUdevResource* out) {
  if (wire_enum(client.type) != CU_DEV_RESOURCE_TYPE_SM) return CUDA_ERROR_INVALID_RESOURCE_TYPE;
  formats::ResourceRef ref{};
  std::memcpy(&ref, client._internal_padding, sizeof ref);
  if (ref.magic != formats::kResourceMagic || ref.reserved != 0) return CUDA_ERROR_INVALID_VALUE;
  const CUdevResource* kept = cx.find_resource(ref.id);
  if (!kept || std::memcmp(&kept->sm, &client.sm, sizeof client.sm) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *out = *kept;
  return CUDA_SUCCESS;
}

CUresult read_resource_type(ArgReader& in, CUdevResourceType* type) {
  int32_t t = 0;
  if (!in.get(&t) || !in.at_end()) return in.malformed();
  if (t != CU_DEV_RESOURCE_TYPE_SM) return CUDA_ERROR_INVALID_RESOURCE_TYPE;
  *type = CU_DEV_RESOURCE_TYPE_SM;
  return CUDA_SUCCESS;
}

// At most this many groups come back from one split (more SMs than any GPU has).
constexpr uint32_t kMaxSplitGroups = 1024;
// And at most this many resources go into one descriptor.
constexpr size_t kMaxDescResources = 1024;

// in: u64 id of a context of kind `kind`, u32 resource type. out: the resource `get` reports
// of it. A null context is the current one; a null green context is none.
template <typename H>
CUresult context_resource(SessionContext& cx, ArgReader& in, ReplyWriter& out, HandleKind kind,
                          CUresult (DriverApi::*get)(H, CUdevResource*, CUdevResourceType)) {
  uint64_t id = 0;
  if (!in.get(&id)) return in.malformed();
  CUdevResourceType type{};
  if (CUresult e = read_resource_type(in, &type)) return e;
  H h = nullptr;
  if (CUresult e = cx.lookup(kind, id, &h)) return e;
  if (!h && kind == HandleKind::kGreenContext) return CUDA_ERROR_INVALID_CONTEXT;
  CUdevResource r{};
  if (CUresult e = (cx.backend().*get)(h, &r, type)) return e;
  put_resource(cx, out, r);
  return CUDA_SUCCESS;
}

}  // namespace

CUresult custom_cuDeviceGetDevResource(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  CUdevice dev = 0;
  if (!in.get(&dev)) return in.malformed();
  CUdevResourceType type{};
  if (CUresult e = read_resource_type(in, &type)) return e;
  if (CUresult e = cx.device_in(&dev)) return e;
  CUdevResource r{};
  if (cx.partition(dev)) {
    if (CUresult e = cx.partition_resource(dev, &r)) return e;
  } else if (CUresult e = cx.backend().cuDeviceGetDevResource(dev, &r, type)) {
    return e;
  }
  put_resource(cx, out, r);
  return CUDA_SUCCESS;
}

CUresult custom_cuCtxGetDevResource(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  return context_resource(cx, in, out, HandleKind::kContext, &DriverApi::cuCtxGetDevResource);
}

CUresult custom_cuGreenCtxGetDevResource(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  return context_resource(cx, in, out, HandleKind::kGreenContext,
                          &DriverApi::cuGreenCtxGetDevResource);
}

CUresult custom_cuDevSmResourceSplitByCount(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  formats::SplitArgs a{};
  CUdevResource client{};
  if (!in.get(&a) || !in.get(&client) || !in.at_end()) return in.malformed();
  if (a.want_result > 1 || a.want_remaining > 1 || a.reserved) return in.malformed();
  CUdevResource input{};
  if (CUresult e = resource_in(cx, client, &input)) return e;
  if (a.want_result && a.groups == 0) return CUDA_ERROR_INVALID_VALUE;
  unsigned n = std::min(a.groups, kMaxSplitGroups);
  std::vector<CUdevResource> result(a.want_result ? n : 0);
  CUdevResource remaining{};
  if (CUresult e = cx.backend().cuDevSmResourceSplitByCount(
          a.want_result ? result.data() : nullptr, &n, &input,
          a.want_remaining ? &remaining : nullptr, a.use_flags, a.min_count)) {
    return e;
  }
  if (a.want_result && n > result.size()) return CUDA_ERROR_UNKNOWN;  // a backend that overran
  const auto groups = static_cast<uint32_t>(n);
  out.put(groups);
  for (uint32_t i = 0; i < groups && a.want_result; ++i) put_resource(cx, out, result[i]);
  if (a.want_remaining) put_resource(cx, out, remaining);
  return CUDA_SUCCESS;
}

CUresult custom_cuDevResourceGenerateDesc(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  std::span<const uint8_t> raw;
  unsigned nb = 0;
  if (!in.get_array(&raw, sizeof(CUdevResource)) || !in.get(&nb) || !in.at_end()) {
    return in.malformed();
  }
  if (raw.size() / sizeof(CUdevResource) != nb) return in.malformed();
  if (nb == 0 || nb > kMaxDescResources) return CUDA_ERROR_INVALID_VALUE;
  std::vector<CUdevResource> resources(nb);
  for (unsigned i = 0; i < nb; ++i) {
    CUdevResource client;
    std::memcpy(&client, raw.data() + i * sizeof client, sizeof client);
    if (CUresult e = resource_in(cx, client, &resources[i])) return e;
  }
  if (CUresult e = cx.check_room(HandleKind::kDevResourceDesc)) return e;
  if (CUresult e = cx.take_descriptor()) return e;
  CUdevResourceDesc desc = nullptr;
  if (CUresult e = cx.backend().cuDevResourceGenerateDesc(&desc, resources.data(), nb)) {
    cx.give_back_descriptor();
    return e;
  }
  out.put(cx.export_handle(HandleKind::kDevResourceDesc, desc));
  return CUDA_SUCCESS;
}

CUresult custom_cuGreenCtxCreate(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  formats::GreenContextArgs a{};
  if (!in.get(&a) || !in.at_end()) return in.malformed();
  CUdevResourceDesc desc = nullptr;
  if (cx.lookup(HandleKind::kDevResourceDesc, a.desc_id, &desc) != CUDA_SUCCESS) {
    return CUDA_ERROR_INVALID_VALUE;  // as CUDA answers a descriptor it does not know
  }
  if (!desc) return CUDA_ERROR_INVALID_VALUE;
  CUdevice dev = a.device;
  if (CUresult e = cx.device_in(&dev)) return e;
  if (a.flags != CU_GREEN_CTX_DEFAULT_STREAM) return CUDA_ERROR_INVALID_VALUE;  // required
  if (CUresult e = cx.check_room(HandleKind::kContext, 1)) return e;
  if (CUresult e = cx.check_room(HandleKind::kGreenContext, 2)) return e;
  // A green context is a context: what it spends of its own is its tenant's, as for any.
  SessionContext::Charge footprint;
  if (CUresult e = cx.precharge_on(dev, CheckedSize(cx.context_footprint()), &footprint)) return e;
  CUgreenCtx green = nullptr;
  CUcontext ctx = nullptr;
  if (CUresult e = cx.make_green_context(desc, dev, &green, &ctx)) {
    cx.refund(&footprint);
    return e;
  }
  formats::GreenContextIds ids{};
  ids.green_id = cx.export_handle(HandleKind::kGreenContext, green);
  // The context is the green context's: releasing the green context's id releases it too.
  ids.ctx_id = cx.export_handle(HandleKind::kContext, ctx, ids.green_id);
  cx.hold(HandleKind::kContext, ctx, &footprint);
  out.put(ids);
  return CUDA_SUCCESS;
}

CUresult custom_cuGreenCtxDestroy(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  uint64_t green_id = 0;
  if (!in.get(&green_id) || !in.at_end()) return in.malformed();
  CUgreenCtx green = nullptr;
  if (cx.lookup_owned(HandleKind::kGreenContext, green_id, &green) != CUDA_SUCCESS) {
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  if (!green) return CUDA_ERROR_INVALID_CONTEXT;
  CUcontext ctx = nullptr;
  if (CUresult e = cx.backend().cuCtxFromGreenCtx(&ctx, green)) return e;
  // Everything the session made in its context goes first, as with cuCtxDestroy.
  const uint64_t ctx_id = cx.export_handle(HandleKind::kContext, ctx, green_id);
  cx.release_context_contents(ctx_id);
  if (CUresult e = cx.destroy_context(ctx)) return e;
  if (cx.current_context() == ctx_id) cx.set_current_context(0);  // nothing current now
  cx.release(green_id);
  return CUDA_SUCCESS;
}

// Which contexts a stream belongs to, answered with ids the session already has: a green
// context's stream names that green context (when the session made it) and its context,
// never the device's primary context, which no session may hold (a tenant with SMs of its own
// would escape its partition through it).
CUresult custom_cuStreamGetCtx_v2(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  uint64_t stream_id = 0;
  uint8_t want_green = 0;  // the client passed pGreenCtx
  if (!in.get(&stream_id) || !in.get(&want_green) || !in.at_end()) return in.malformed();
  CUstream stream = nullptr;
  if (CUresult e = cx.lookup(HandleKind::kStream, stream_id, &stream)) return e;
  CUcontext ctx = nullptr;
  CUgreenCtx green = nullptr;
  if (CUresult e = cx.backend().cuStreamGetCtx_v2(stream, &ctx, &green)) return e;
  if (green) {
    if (CUresult e = cx.backend().cuCtxFromGreenCtx(&ctx, green)) return e;
  }
  const uint64_t ctx_id = cx.known_id(HandleKind::kContext, ctx);
  if (ctx && !ctx_id) return CUDA_ERROR_INVALID_CONTEXT;  // not a context of this session
  out.put(ctx_id);
  if (want_green) out.put(green ? cx.known_id(HandleKind::kGreenContext, green) : uint64_t{0});
  return CUDA_SUCCESS;
}

CUresult custom_cuStreamGetGreenCtx(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  uint64_t stream_id = 0;
  CUstream stream = nullptr;
  if (CUresult e = in.get_only_handle(cx, HandleKind::kStream, false, &stream_id, &stream)) {
    return e;
  }
  CUgreenCtx green = nullptr;
  if (CUresult e = cx.backend().cuStreamGetGreenCtx(stream, &green)) return e;
  // A green context the server made for the session (an SM partition) is the session's
  // ordinary context as far as the client knows: none.
  out.put(green ? cx.known_id(HandleKind::kGreenContext, green) : uint64_t{0});
  return CUDA_SUCCESS;
}

CUresult custom_cuGreenCtxStreamCreate(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  uint64_t green_id = 0;
  unsigned flags = 0;
  int priority = 0;
  if (!in.get(&green_id) || !in.get(&flags) || !in.get(&priority) || !in.at_end()) {
    return in.malformed();
  }
  CUgreenCtx green = nullptr;
  if (CUresult e = cx.lookup(HandleKind::kGreenContext, green_id, &green)) return e;
  if (!green) return CUDA_ERROR_INVALID_CONTEXT;
  CUcontext ctx = nullptr;
  if (CUresult e = cx.backend().cuCtxFromGreenCtx(&ctx, green)) return e;
  if (CUresult e = cx.check_room(HandleKind::kStream)) return e;
  CUstream stream = nullptr;
  if (CUresult e = cx.backend().cuGreenCtxStreamCreate(&stream, green, flags, priority)) return e;
  // The stream lives in the green context's context and goes with it.
  out.put(cx.export_in_context(HandleKind::kStream, stream,
                               cx.export_handle(HandleKind::kContext, ctx, green_id)));
  return CUDA_SUCCESS;
}

}  // namespace cuwire::server
