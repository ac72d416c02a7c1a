// Texture and surface objects (server side of the generated wire format: the descriptions as
// fixed-size records, an optional resource view after a u8 presence flag; objects travel as
// their u64 values). The resource's handles are the session's ids and its memory must be the
// session's: both are resolved and checked here before the backend sees them.

#include <cuda.h>

#include <cstring>
#include <type_traits>

#include "protocol/array_format.h"
#include "server/session/dispatch.h"

namespace cuwire::server {
namespace {

template <typename T>
bool get_record(ArgReader& in, T* out) {
  std::span<const uint8_t> raw;
  if (!in.get_array(&raw, sizeof(T)) || raw.size() != sizeof(T)) return false;
  std::memcpy(out, raw.data(), sizeof(T));
  return true;
}

// The resource's array id becomes the backend's array; linear and pitched memory must lie in
// one allocation of this session.
CUresult resolve_resource(SessionContext& cx, CUDA_RESOURCE_DESC* r) {
  switch (r->resType) {
    case CU_RESOURCE_TYPE_ARRAY: {
      auto id = reinterpret_cast<uintptr_t>(r->res.array.hArray);
      if (id == 0) return CUDA_ERROR_INVALID_VALUE;
      return cx.lookup(HandleKind::kArray, id, &r->res.array.hArray);
    }
    case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY: {
      auto id = reinterpret_cast<uintptr_t>(r->res.mipmap.hMipmappedArray);
      if (id == 0) return CUDA_ERROR_INVALID_VALUE;
      return cx.lookup(HandleKind::kMipmappedArray, id, &r->res.mipmap.hMipmappedArray);
    }
    case CU_RESOURCE_TYPE_LINEAR:
      if (r->res.linear.sizeInBytes == 0) return CUDA_ERROR_INVALID_VALUE;
      return cx.check_range(r->res.linear.devPtr, r->res.linear.sizeInBytes);
    case CU_RESOURCE_TYPE_PITCH2D: {
      const auto& p = r->res.pitch2D;
      size_t elem = array_element_bytes(p.format, p.numChannels), row, span;
      if (elem == 0 || p.width == 0 || p.height == 0 ||
          __builtin_mul_overflow(p.width, elem, &row) || p.pitchInBytes < row ||
          __builtin_mul_overflow(p.pitchInBytes, p.height - 1, &span) ||
          __builtin_add_overflow(span, row, &span)) {
        return CUDA_ERROR_INVALID_VALUE;
      }
      return cx.check_range(p.devPtr, span);
    }
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

// Back to the session's names for a description the backend returns.
void export_resource(SessionContext& cx, CUDA_RESOURCE_DESC* r) {
  if (r->resType == CU_RESOURCE_TYPE_ARRAY) {
    r->res.array.hArray =
        reinterpret_cast<CUarray>(cx.export_handle(HandleKind::kArray, r->res.array.hArray));
  } else if (r->resType == CU_RESOURCE_TYPE_MIPMAPPED_ARRAY) {
    r->res.mipmap.hMipmappedArray = reinterpret_cast<CUmipmappedArray>(
        cx.export_handle(HandleKind::kMipmappedArray, r->res.mipmap.hMipmappedArray));
  }
}

// Reads the object value of a Destroy/Get call and checks that the session created it.
CUresult owned_object(SessionContext& cx, ArgReader& in, bool surface, uint64_t* value) {
  if (!in.get(value) || !in.at_end()) return in.malformed();
  return cx.owns_object(surface, *value) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// A Get call: the description `get` gives of an object the session created, a resource's
// handles back in the session's names.
template <typename Desc>
CUresult describe(SessionContext& cx, ArgReader& in, ReplyWriter& out, bool surface,
                  CUresult (DriverApi::*get)(Desc*, unsigned long long)) {
  uint64_t value = 0;
  if (CUresult e = owned_object(cx, in, surface, &value)) return e;
  Desc d{};
  if (CUresult e = (cx.backend().*get)(&d, value)) return e;
  if constexpr (std::is_same_v<Desc, CUDA_RESOURCE_DESC>) export_resource(cx, &d);
  out.put_bytes(&d, sizeof d);
  return CUDA_SUCCESS;
}

// A Destroy call, of an object the session created.
CUresult destroy(SessionContext& cx, ArgReader& in, bool surface,
                 CUresult (DriverApi::*destroy_object)(unsigned long long)) {
  uint64_t value = 0;
  if (CUresult e = owned_object(cx, in, surface, &value)) return e;
  cx.forget_object(surface, value);
  return (cx.backend().*destroy_object)(value);
}

// A Create call's reply: the new object, now the session's.
CUresult reply_created(SessionContext& cx, ReplyWriter& out, bool surface, uint64_t obj) {
  cx.on_object(surface, obj);
  out.put_bytes(&obj, sizeof obj);
  return CUDA_SUCCESS;
}

}  // namespace

CUresult verify_array_destroy(SessionContext& cx, CUarray array) {
  const uint64_t id = cx.known_id(HandleKind::kArray, array);
  return cx.derived_from(id, HandleKind::kMipmappedArray) ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

CUresult custom_cuTexObjectCreate(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  CUDA_RESOURCE_DESC r{};
  CUDA_TEXTURE_DESC t{};
  CUDA_RESOURCE_VIEW_DESC v{};
  uint8_t has_view = 0;
  if (!get_record(in, &r) || !get_record(in, &t) || !in.get(&has_view)) return in.malformed();
  if (has_view && !get_record(in, &v)) return in.malformed();
  if (!in.at_end()) return in.malformed();
  if (CUresult e = resolve_resource(cx, &r)) return e;
  CUtexObject obj = 0;
  if (CUresult e = cx.backend().cuTexObjectCreate(&obj, &r, &t, has_view ? &v : nullptr)) return e;
  return reply_created(cx, out, false, obj);
}

CUresult custom_cuTexObjectDestroy(SessionContext& cx, ArgReader& in, ReplyWriter&) {
  return destroy(cx, in, false, &DriverApi::cuTexObjectDestroy);
}

CUresult custom_cuTexObjectGetResourceDesc(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  return describe(cx, in, out, false, &DriverApi::cuTexObjectGetResourceDesc);
}

CUresult custom_cuTexObjectGetTextureDesc(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  return describe(cx, in, out, false, &DriverApi::cuTexObjectGetTextureDesc);
}

CUresult custom_cuTexObjectGetResourceViewDesc(SessionContext& cx, ArgReader& in,
                                               ReplyWriter& out) {
  return describe(cx, in, out, false, &DriverApi::cuTexObjectGetResourceViewDesc);
}

CUresult custom_cuSurfObjectCreate(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  CUDA_RESOURCE_DESC r{};
  if (!get_record(in, &r) || !in.at_end()) return in.malformed();
  if (CUresult e = resolve_resource(cx, &r)) return e;
  CUsurfObject obj = 0;
  if (CUresult e = cx.backend().cuSurfObjectCreate(&obj, &r)) return e;
  return reply_created(cx, out, true, obj);
}

CUresult custom_cuSurfObjectDestroy(SessionContext& cx, ArgReader& in, ReplyWriter&) {
  return destroy(cx, in, true, &DriverApi::cuSurfObjectDestroy);
}

CUresult custom_cuSurfObjectGetResourceDesc(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  return describe(cx, in, out, true, &DriverApi::cuSurfObjectGetResourceDesc);
}

}  // namespace cuwire::server
