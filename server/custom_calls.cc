// Server side of the calls whose wire format is hand-written (manifest `server=custom`); the
// formats are defined in protocol/custom_calls.h, which the client side shares.
//
// Contexts: every session gets its own contexts. What the app sees as a device's primary
// context is a context this session created on the backend (cuCtxCreate), never the backend's
// real primary context, which all sessions would share.

#include <cuda.h>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend.h"
#include "custom_calls.h"
#include "dispatch.h"
#include "image.h"

namespace cuwire::server {

namespace {

// Creates a context for `device` without disturbing this thread's current context: the
// session switches contexts itself, by each call's context id.
CUresult create_context(CallContext& cx, const custom::ContextArgs& a) {
  DriverApi& api = cx.api();
  CUcontext prev = nullptr;
  api.cuCtxGetCurrent(&prev);
  CUcontext ctx = nullptr;
  CUresult rc = cx.make_context(a.device, a.flags, &ctx);
  if (rc != CUDA_SUCCESS) return rc;
  // What the context spends of its own is its tenant's (design decision 13), on its device.
  CallContext::Charge footprint;
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

CUresult read_context_args(CallContext& cx, ArgReader& in, custom::ContextArgs* a) {
  if (!in.get(a) || !in.at_end()) return in.malformed();
  CUdevice dev = a->device;
  if (CUresult e = cx.device_in(&dev)) return e;
  a->device = dev;
  return CUDA_SUCCESS;
}

// Bytes a strided region spans: `rows` rows of `width` bytes, `pitch` apart.
bool region_bytes(size_t width, size_t rows, size_t pitch, size_t* out) {
  if (rows == 0 || width == 0) {
    *out = 0;
    return true;
  }
  if (rows > 1 && pitch < width) return false;
  if (rows - 1 > (SIZE_MAX - width) / (pitch ? pitch : 1)) return false;
  *out = (rows - 1) * pitch + width;
  return true;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Module images: a client-sent image must be exactly what its headers say, before any driver
// parses it (a real driver trusts the pointer it is given).

namespace {

// Code that calls device printf names vprintf: an extern declaration in PTX, an undefined
// symbol in a cubin's string table.
bool names_vprintf(std::span<const uint8_t> code) {
  static constexpr char kName[] = "vprintf";
  return memmem(code.data(), code.size(), kName, sizeof kName - 1) != nullptr;
}

}  // namespace

CUresult check_image(CallContext& cx, std::span<const uint8_t> bytes) {
  cx.set_image_globals(0);
  std::string error;
  uint64_t globals = 0;
  switch (image::classify(bytes)) {
    case image::Kind::kPtx: {
      // PTX travels with its NUL; nothing after it.
      const void* nul = std::memchr(bytes.data(), 0, bytes.size());
      if (!nul || static_cast<const uint8_t*>(nul) != bytes.data() + bytes.size() - 1) {
        return CUDA_ERROR_INVALID_IMAGE;
      }
      globals = image::ptx_global_bytes(
          {reinterpret_cast<const char*>(bytes.data()), bytes.size() - 1});
      break;
    }
    case image::Kind::kFatbin: {
      std::vector<image::FatbinEntry> entries;
      if (!image::parse_fatbin(bytes, &entries, &error)) return CUDA_ERROR_INVALID_IMAGE;
      for (const auto& e : entries) {
        if (names_vprintf(e.payload)) cx.note_may_print();
      }
      if (!image::entries_global_bytes(entries, &globals, &error)) return CUDA_ERROR_INVALID_IMAGE;
      cx.set_image_globals(globals);
      return CUDA_SUCCESS;
    }
    case image::Kind::kElf: {
      std::vector<image::ElfKernel> kernels;
      if (!image::elf_kernels(bytes, &kernels, &error)) return CUDA_ERROR_INVALID_IMAGE;
      if (!image::elf_global_bytes(bytes, &globals, &error)) return CUDA_ERROR_INVALID_IMAGE;
      break;
    }
    default:
      return CUDA_ERROR_INVALID_IMAGE;  // wrappers are resolved by the client
  }
  if (names_vprintf(bytes)) cx.note_may_print();
  cx.set_image_globals(globals);
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// Memory that handles hold (manifest: holds=), charged to the tenant before the backend makes
// them.

namespace {

// Bytes of one element of an array format, per channel for the formats whose channel count is
// the descriptor's, and 0 for block-compressed formats (array_texels charges them by block).
// Formats without a plain layout (YUV planar and packed ones) are charged 4 bytes a channel,
// more than any of them takes: a cap is never passed by a format counted short.
uint64_t format_bytes(unsigned f) {
  switch (f) {
    case enum_value(CU_AD_FORMAT_UNSIGNED_INT8):
    case enum_value(CU_AD_FORMAT_SIGNED_INT8):
    case enum_value(CU_AD_FORMAT_UNORM_INT8X1):
    case enum_value(CU_AD_FORMAT_UNORM_INT8X2):
    case enum_value(CU_AD_FORMAT_UNORM_INT8X4):
    case enum_value(CU_AD_FORMAT_SNORM_INT8X1):
    case enum_value(CU_AD_FORMAT_SNORM_INT8X2):
    case enum_value(CU_AD_FORMAT_SNORM_INT8X4):
      return 1;
    case enum_value(CU_AD_FORMAT_UNSIGNED_INT16):
    case enum_value(CU_AD_FORMAT_SIGNED_INT16):
    case enum_value(CU_AD_FORMAT_HALF):
    case enum_value(CU_AD_FORMAT_UNORM_INT16X1):
    case enum_value(CU_AD_FORMAT_UNORM_INT16X2):
    case enum_value(CU_AD_FORMAT_UNORM_INT16X4):
    case enum_value(CU_AD_FORMAT_SNORM_INT16X1):
    case enum_value(CU_AD_FORMAT_SNORM_INT16X2):
    case enum_value(CU_AD_FORMAT_SNORM_INT16X4):
      return 2;
    case enum_value(CU_AD_FORMAT_UNSIGNED_INT32):
    case enum_value(CU_AD_FORMAT_SIGNED_INT32):
    case enum_value(CU_AD_FORMAT_FLOAT):
      return 4;
    case enum_value(CU_AD_FORMAT_UNORM_INT_101010_2):
      return 1;  // four channels of one byte each: 32 bits a texel
    default:
      return 4;
  }
}

// BC1 and BC4 keep a 4x4 block in 8 bytes, the other block-compressed formats in 16; 0: not
// block-compressed.
uint64_t block_bytes(unsigned f) {
  switch (f) {
    case enum_value(CU_AD_FORMAT_BC1_UNORM):
    case enum_value(CU_AD_FORMAT_BC1_UNORM_SRGB):
    case enum_value(CU_AD_FORMAT_BC4_UNORM):
    case enum_value(CU_AD_FORMAT_BC4_SNORM):
      return 8;
    case enum_value(CU_AD_FORMAT_BC2_UNORM):
    case enum_value(CU_AD_FORMAT_BC2_UNORM_SRGB):
    case enum_value(CU_AD_FORMAT_BC3_UNORM):
    case enum_value(CU_AD_FORMAT_BC3_UNORM_SRGB):
    case enum_value(CU_AD_FORMAT_BC5_UNORM):
    case enum_value(CU_AD_FORMAT_BC5_SNORM):
    case enum_value(CU_AD_FORMAT_BC6H_UF16):
    case enum_value(CU_AD_FORMAT_BC6H_SF16):
    case enum_value(CU_AD_FORMAT_BC7_UNORM):
    case enum_value(CU_AD_FORMAT_BC7_UNORM_SRGB):
      return 16;
    default:
      return 0;
  }
}

// An array of width x height x depth (0 as 1: a 1D array has height 0; depth is the layer
// count of a layered array, 6 for a cube map).
CheckedSize array_texels(size_t width, size_t height, size_t depth, unsigned format,
                         unsigned channels) {
  const CheckedSize h = height ? CheckedSize(height) : CheckedSize(1);
  const CheckedSize d = depth ? CheckedSize(depth) : CheckedSize(1);
  if (uint64_t block = block_bytes(format)) {
    return (CheckedSize(width) + 3) / 4 * ((h + 3) / 4) * d * block;
  }
  return CheckedSize(width) * h * d * CheckedSize(channels) * format_bytes(format);
}

}  // namespace

CheckedSize array_bytes(CallContext&, CUarray*, const CUDA_ARRAY_DESCRIPTOR* desc) {
  if (!desc) return CheckedSize(0);
  return array_texels(desc->Width, desc->Height, 0, wire_enum(desc->Format),
                      desc->NumChannels);
}

CheckedSize array3d_bytes(CallContext&, CUarray*, const CUDA_ARRAY3D_DESCRIPTOR* desc) {
  if (!desc) return CheckedSize(0);
  return array_texels(desc->Width, desc->Height, desc->Depth, wire_enum(desc->Format),
                      desc->NumChannels);
}

CheckedSize module_globals_bytes(CallContext& cx, CUmodule*, const void*) {
  return cx.image_globals_bytes();
}

// ---------------------------------------------------------------------------------------------
// Devices as the session sees them (CallContext::set_devices): a CUdevice is an ordinal.

CUresult custom_cuDeviceGetCount(CallContext& cx, ArgReader& in, ReplyWriter& out) {
  if (!in.at_end()) return in.malformed();
  int count = 0;
  if (CUresult e = cx.api().cuDeviceGetCount(&count)) return e;
  count = cx.device_count(count);
  out.put_bytes(&count, sizeof count);
  return CUDA_SUCCESS;
}

CUresult custom_cuDeviceGet(CallContext& cx, ArgReader& in, ReplyWriter& out) {
  int ordinal = 0;
  if (!in.get(&ordinal) || !in.at_end()) return in.malformed();
  int count = 0;
  if (CUresult e = cx.api().cuDeviceGetCount(&count)) return e;
  if (ordinal < 0 || ordinal >= cx.device_count(count)) return CUDA_ERROR_INVALID_DEVICE;
  CUdevice dev = ordinal;
  if (CUresult e = cx.device_in(&dev)) return e;
  CUdevice got = 0;
  if (CUresult e = cx.api().cuDeviceGet(&got, dev)) return e;
  if (CUresult e = cx.device_out(&got)) return e;
  out.put_bytes(&got, sizeof got);
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// Memory as the session's tenant sees it (tenants.h): a capped tenant's cap is its total.

CUresult custom_cuMemGetInfo_v2(CallContext& cx, ArgReader& in, ReplyWriter& out) {
  if (!in.at_end()) return in.malformed();
  size_t free = 0, total = 0;
  if (CUresult e = cx.api().cuMemGetInfo_v2(&free, &total)) return e;
  CUdevice dev = 0;
  if (CUresult e = cx.api().cuCtxGetDevice(&dev)) return e;
  cx.memory_view(dev, &free, &total);
  out.put_bytes(&free, sizeof free);
  out.put_bytes(&total, sizeof total);
  return CUDA_SUCCESS;
}

CUresult custom_cuDeviceTotalMem_v2(CallContext& cx, ArgReader& in, ReplyWriter& out) {
  CUdevice dev = 0;
  if (!in.get(&dev) || !in.at_end()) return in.malformed();
  if (CUresult e = cx.device_in(&dev)) return e;
  size_t total = 0;
  if (CUresult e = cx.api().cuDeviceTotalMem_v2(&total, dev)) return e;
  size_t free = total;
  cx.memory_view(dev, &free, &total);
  out.put_bytes(&total, sizeof total);
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// Device attributes: the whole table at once.

CUresult custom_cuDeviceGetAttribute(CallContext& cx, ArgReader& in, ReplyWriter& out) {
  CUdevice dev = 0;
  if (!in.get(&dev) || !in.at_end()) return in.malformed();
  if (CUresult e = cx.device_in(&dev)) return e;
  // Asking for an attribute every device has tells an invalid device from an unknown attribute.
  int probe = 0;
  if (CUresult e = cx.api().cuDeviceGetAttribute(&probe, CU_DEVICE_ATTRIBUTE_WARP_SIZE, dev)) {
    return e;
  }
  static_assert(CU_DEVICE_ATTRIBUTE_MAX <= custom::kMaxAttributes);
  std::vector<custom::AttributeValue> table(CU_DEVICE_ATTRIBUTE_MAX);
  for (int a = 0; a < CU_DEVICE_ATTRIBUTE_MAX; ++a) {
    int v = 0;
    CUresult rc = cx.api().cuDeviceGetAttribute(&v, static_cast<CUdevice_attribute>(a), dev);
    table[a] = {rc == CUDA_SUCCESS ? v : 0, static_cast<int32_t>(rc)};
  }
  // A tenant with SMs of its own sees them as the device's: grids sized by the SM count (a
  // cooperative launch's) fit its partition.
  if (const SmShare* share = cx.partition(dev)) {
    table[CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT].value = static_cast<int32_t>(share->sms);
  }
  out.put(static_cast<uint32_t>(table.size()));
  out.put_bytes(table.data(), table.size() * sizeof(custom::AttributeValue));
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// SM resources and green contexts. The driver-internal part of a CUdevResource never leaves
// the server: a client gets the type and the SM figures, and a ResourceRef naming the
// backend's resource, which the session keeps (CallContext::keep_resource). A tenant with SMs
// of its own (sm_partition.h) sees its partition as the device's resource, so whatever it
// splits and makes green contexts of stays inside it.

namespace {

void put_resource(CallContext& cx, ReplyWriter& out, const CUdevResource& backend) {
  CUdevResource r;
  std::memset(&r, 0, sizeof r);
  r.type = CU_DEV_RESOURCE_TYPE_SM;
  r.sm = backend.sm;
  const custom::ResourceRef ref{custom::kResourceMagic, 0, cx.keep_resource(backend)};
  std::memcpy(r._internal_padding, &ref, sizeof ref);
  out.put_bytes(&r, sizeof r);
}

// The backend's resource a client's copy names: CUDA_ERROR_INVALID_VALUE for one the session
// was not handed, or whose figures were changed.
CUresult resource_in(CallContext& cx, const CUdevResource& client, CUdevResource* out) {
  if (wire_enum(client.type) != CU_DEV_RESOURCE_TYPE_SM) return CUDA_ERROR_INVALID_RESOURCE_TYPE;
  custom::ResourceRef ref{};
  std::memcpy(&ref, client._internal_padding, sizeof ref);
  if (ref.magic != custom::kResourceMagic || ref.reserved != 0) return CUDA_ERROR_INVALID_VALUE;
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

}  // namespace

CUresult custom_cuDeviceGetDevResource(CallContext& cx, ArgReader& in, ReplyWriter& out) {
  CUdevice dev = 0;
  if (!in.get(&dev)) return in.malformed();
  CUdevResourceType type{};
  if (CUresult e = read_resource_type(in, &type)) return e;
  if (CUresult e = cx.device_in(&dev)) return e;
  CUdevResource r{};
  if (const SmShare* share = cx.partition(dev)) {
    if (CUresult e = share->resource->get(cx.api(), share->desc, dev, &r)) return e;
  } else if (CUresult e = cx.api().cuDeviceGetDevResource(dev, &r, type)) {
    return e;
  }
  put_resource(cx, out, r);
  return CUDA_SUCCESS;
}

CUresult custom_cuCtxGetDevResource(CallContext& cx, ArgReader& in, ReplyWriter& out) {
  uint64_t ctx_id = 0;
  if (!in.get(&ctx_id)) return in.malformed();
  CUdevResourceType type{};
  if (CUresult e = read_resource_type(in, &type)) return e;
  CUcontext ctx = nullptr;
  if (CUresult e = cx.lookup(HandleKind::kContext, ctx_id, &ctx)) return e;
  CUdevResource r{};
  if (CUresult e = cx.api().cuCtxGetDevResource(ctx, &r, type)) return e;
  put_resource(cx, out, r);
  return CUDA_SUCCESS;
}

CUresult custom_cuGreenCtxGetDevResource(CallContext& cx, ArgReader& in, ReplyWriter& out) {
  uint64_t green_id = 0;
  if (!in.get(&green_id)) return in.malformed();
  CUdevResourceType type{};
  if (CUresult e = read_resource_type(in, &type)) return e;
  CUgreenCtx green = nullptr;
  if (CUresult e = cx.lookup(HandleKind::kGreenContext, green_id, &green)) return e;
  if (!green) return CUDA_ERROR_INVALID_CONTEXT;
  CUdevResource r{};
  if (CUresult e = cx.api().cuGreenCtxGetDevResource(green, &r, type)) return e;
  put_resource(cx, out, r);
  return CUDA_SUCCESS;
}

CUresult custom_cuDevSmResourceSplitByCount(CallContext& cx, ArgReader& in, ReplyWriter& out) {
  custom::SplitArgs a{};
  CUdevResource client{};
  if (!in.get(&a) || !in.get(&client) || !in.at_end()) return in.malformed();
  if (a.want_result > 1 || a.want_remaining > 1 || a.reserved) return in.malformed();
  CUdevResource input{};
  if (CUresult e = resource_in(cx, client, &input)) return e;
  if (a.want_result && a.groups == 0) return CUDA_ERROR_INVALID_VALUE;
  unsigned n = std::min(a.groups, kMaxSplitGroups);
  std::vector<CUdevResource> result(a.want_result ? n : 0);
  CUdevResource remaining{};
  if (CUresult e = cx.api().cuDevSmResourceSplitByCount(
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

CUresult custom_cuDevResourceGenerateDesc(CallContext& cx, ArgReader& in, ReplyWriter& out) {
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
  if (CUresult e = cx.api().cuDevResourceGenerateDesc(&desc, resources.data(), nb)) {
    cx.give_back_descriptor();
    return e;
  }
  out.put(cx.export_handle(HandleKind::kDevResourceDesc, desc));
  return CUDA_SUCCESS;
}

CUresult custom_cuGreenCtxCreate(CallContext& cx, ArgReader& in, ReplyWriter& out) {
  custom::GreenContextArgs a{};
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
  CallContext::Charge footprint;
  if (CUresult e = cx.precharge_on(dev, CheckedSize(cx.context_footprint()), &footprint)) return e;
  CUgreenCtx green = nullptr;
  CUcontext ctx = nullptr;
  if (CUresult e = cx.make_green_context(desc, dev, &green, &ctx)) {
    cx.refund(&footprint);
    return e;
  }
  custom::GreenContextIds ids{};
  ids.green_id = cx.export_handle(HandleKind::kGreenContext, green);
  // The context is the green context's: releasing the green context's id releases it too.
  ids.ctx_id = cx.export_handle(HandleKind::kContext, ctx, ids.green_id);
  cx.hold(HandleKind::kContext, ctx, &footprint);
  out.put(ids);
  return CUDA_SUCCESS;
}

CUresult custom_cuGreenCtxDestroy(CallContext& cx, ArgReader& in, ReplyWriter& out) {
  uint64_t green_id = 0;
  if (!in.get(&green_id) || !in.at_end()) return in.malformed();
  CUgreenCtx green = nullptr;
  if (cx.lookup_owned(HandleKind::kGreenContext, green_id, &green) != CUDA_SUCCESS) {
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  if (!green) return CUDA_ERROR_INVALID_CONTEXT;
  CUcontext ctx = nullptr;
  if (CUresult e = cx.api().cuCtxFromGreenCtx(&ctx, green)) return e;
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
CUresult custom_cuStreamGetCtx_v2(CallContext& cx, ArgReader& in, ReplyWriter& out) {
  uint64_t stream_id = 0;
  uint8_t want_green = 0;  // the client passed pGreenCtx
  if (!in.get(&stream_id) || !in.get(&want_green) || !in.at_end()) return in.malformed();
  CUstream stream = nullptr;
  if (CUresult e = cx.lookup(HandleKind::kStream, stream_id, &stream)) return e;
  CUcontext ctx = nullptr;
  CUgreenCtx green = nullptr;
  if (CUresult e = cx.api().cuStreamGetCtx_v2(stream, &ctx, &green)) return e;
  if (green) {
    if (CUresult e = cx.api().cuCtxFromGreenCtx(&ctx, green)) return e;
  }
  const uint64_t ctx_id = cx.known_id(HandleKind::kContext, ctx);
  if (ctx && !ctx_id) return CUDA_ERROR_INVALID_CONTEXT;  // not a context of this session
  out.put(ctx_id);
  if (want_green) out.put(green ? cx.known_id(HandleKind::kGreenContext, green) : uint64_t{0});
  return CUDA_SUCCESS;
}

CUresult custom_cuStreamGetGreenCtx(CallContext& cx, ArgReader& in, ReplyWriter& out) {
  uint64_t stream_id = 0;
  if (!in.get(&stream_id) || !in.at_end()) return in.malformed();
  CUstream stream = nullptr;
  if (CUresult e = cx.lookup(HandleKind::kStream, stream_id, &stream)) return e;
  CUgreenCtx green = nullptr;
  if (CUresult e = cx.api().cuStreamGetGreenCtx(stream, &green)) return e;
  // A green context the server made for the session (an SM partition) is the session's
  // ordinary context as far as the client knows: none.
  out.put(green ? cx.known_id(HandleKind::kGreenContext, green) : uint64_t{0});
  return CUDA_SUCCESS;
}

CUresult custom_cuGreenCtxStreamCreate(CallContext& cx, ArgReader& in, ReplyWriter& out) {
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
  if (CUresult e = cx.api().cuCtxFromGreenCtx(&ctx, green)) return e;
  if (CUresult e = cx.check_room(HandleKind::kStream)) return e;
  CUstream stream = nullptr;
  if (CUresult e = cx.api().cuGreenCtxStreamCreate(&stream, green, flags, priority)) return e;
  // The stream lives in the green context's context and goes with it.
  out.put(cx.export_in_context(HandleKind::kStream, stream,
                               cx.export_handle(HandleKind::kContext, ctx, green_id)));
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// Contexts

CUresult custom_cuDevicePrimaryCtxRetain(CallContext& cx, ArgReader& in, ReplyWriter& out) {
  custom::ContextArgs a{};
  if (CUresult e = read_context_args(cx, in, &a)) return e;
  CUcontext existing = nullptr;
  if (cx.lookup(HandleKind::kContext, a.ctx_id, &existing) == CUDA_SUCCESS && existing) {
    return CUDA_SUCCESS;
  }
  if (CUresult e = cx.check_room(HandleKind::kContext)) return e;
  return create_context(cx, a);
}

CUresult custom_cuDevicePrimaryCtxReset_v2(CallContext& cx, ArgReader& in, ReplyWriter& out) {
  custom::ContextArgs a{};
  if (CUresult e = read_context_args(cx, in, &a)) return e;
  CUcontext old = nullptr;
  if (CUresult e = cx.lookup(HandleKind::kContext, a.ctx_id, &old)) return e;
  if (cx.is_green_context_ctx(a.ctx_id)) return CUDA_ERROR_INVALID_CONTEXT;
  if (old) {
    cx.release_context_contents(a.ctx_id);
    CUcontext current = nullptr;
    cx.api().cuCtxGetCurrent(&current);
    if (current == old) cx.api().cuCtxSetCurrent(nullptr);  // never left dangling
    cx.destroy_context(old);
    cx.release(a.ctx_id);
  }
  if (CUresult e = create_context(cx, a)) return e;
  // The id stays the same, so the session will not switch to it again: when it was the
  // session thread's current context, the fresh one takes its place.
  if (old && cx.current_context() == a.ctx_id) {
    CUcontext fresh = nullptr;
    if (CUresult e = cx.lookup(HandleKind::kContext, a.ctx_id, &fresh)) return e;
    return cx.api().cuCtxSetCurrent(fresh);
  }
  return CUDA_SUCCESS;
}

CUresult custom_cuCtxCreate_v4(CallContext& cx, ArgReader& in, ReplyWriter& out) {
  custom::ContextArgs a{};
  if (CUresult e = read_context_args(cx, in, &a)) return e;
  if (CUresult e = cx.check_mint(a.ctx_id, HandleKind::kContext)) return e;
  return create_context(cx, a);
}

// Limits that reserve device memory for the context (design decision 13): the per-thread stack
// for every thread the device can hold at once, the device heap and the printf FIFO. What the
// context reserves beyond its first figures is charged to the tenant before the backend
// reserves it.
CUresult custom_cuCtxSetLimit(CallContext& cx, ArgReader& in, ReplyWriter&) {
  CUlimit limit{};
  size_t value = 0;
  if (!in.get(&limit) || !in.get(&value) || !in.at_end()) return in.malformed();
  DriverApi& api = cx.api();
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
      if (CUresult e = api.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev)) return e;
      if (CUresult e = api.cuDeviceGetAttribute(
              &threads, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, dev)) {
        return e;
      }
      per_unit = static_cast<uint64_t>(std::max(sms, 1)) * static_cast<uint64_t>(std::max(threads, 1));
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

CUresult custom_cuCtxDestroy_v2(CallContext& cx, ArgReader& in, ReplyWriter& out) {
  uint64_t id = 0;
  if (!in.get(&id) || !in.at_end()) return in.malformed();
  CUcontext ctx = nullptr;
  if (CUresult e = cx.lookup(HandleKind::kContext, id, &ctx)) return e;
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

// ---------------------------------------------------------------------------------------------
// Libraries

CUresult custom_cuLibraryLoadData(CallContext& cx, ArgReader& in, ReplyWriter& out) {
  std::span<const uint8_t> code;
  if (!in.get_bulk(&code) || !in.at_end()) return in.malformed();
  if (CUresult e = check_image(cx, code)) return e;
  if (CUresult e = cx.check_room(HandleKind::kLibrary)) return e;
  CallContext::Charge held;
  if (CUresult e = cx.precharge(cx.image_globals_bytes(), &held)) return e;
  CUlibrary lib = nullptr;
  if (CUresult e = cx.api().cuLibraryLoadData(&lib, code.data(), nullptr, nullptr, 0, nullptr,
                                              nullptr, 0)) {
    cx.refund(&held);
    return e;
  }
  out.put(cx.export_handle(HandleKind::kLibrary, lib));
  cx.hold(HandleKind::kLibrary, lib, &held);
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// Kernel parameter layouts and names

namespace {
// The one argument of the calls below: u64 id of a kernel or function of the session.
CUresult read_kernel_id(ArgReader& in, uint64_t* id) {
  if (!in.get(id) || !in.at_end()) return in.malformed();
  return *id == 0 ? CUDA_ERROR_INVALID_HANDLE : CUDA_SUCCESS;
}

// The session's kernel (*kernel set) or function (*func set) of that id; cudart passes CUkernel
// handles wherever a CUfunction goes.
CUresult kernel_or_function(CallContext& cx, uint64_t id, CUkernel* kernel, CUfunction* func) {
  if (cx.lookup(HandleKind::kKernel, id, kernel) == CUDA_SUCCESS) return CUDA_SUCCESS;
  *kernel = nullptr;
  return cx.lookup(HandleKind::kFunction, id, func);
}

// A kernel's parameter sizes, from the backend once per function handle.
CUresult kernel_layout(CallContext& cx, uint64_t id, const std::vector<custom::ParamSlot>** out) {
  if (const auto* known = cx.params_of(id)) {
    *out = known;
    return CUDA_SUCCESS;
  }
  CUkernel kernel = nullptr;
  CUfunction func = nullptr;
  if (CUresult e = kernel_or_function(cx, id, &kernel, &func)) return e;
  const bool is_kernel = kernel != nullptr;
  std::vector<custom::ParamSlot> slots;
  for (size_t i = 0; i < custom::kMaxParams; ++i) {
    size_t off = 0, size = 0;
    CUresult rc = is_kernel ? cx.api().cuKernelGetParamInfo(kernel, i, &off, &size)
                            : cx.api().cuFuncGetParamInfo(func, i, &off, &size);
    if (rc == CUDA_ERROR_INVALID_VALUE) break;  // past the last parameter
    if (rc != CUDA_SUCCESS) return rc;
    if (off > UINT32_MAX || size > UINT32_MAX) return CUDA_ERROR_INVALID_VALUE;
    slots.push_back({static_cast<uint32_t>(off), static_cast<uint32_t>(size)});
  }
  *out = cx.remember_params(id, std::move(slots));
  return CUDA_SUCCESS;
}

CUresult param_layout(CallContext& cx, ArgReader& in, ReplyWriter& out) {
  uint64_t id = 0;
  if (CUresult e = read_kernel_id(in, &id)) return e;
  const std::vector<custom::ParamSlot>* slots = nullptr;
  if (CUresult e = kernel_layout(cx, id, &slots)) return e;
  out.put(static_cast<uint32_t>(slots->size()));
  out.put_bytes(slots->data(), slots->size() * sizeof(custom::ParamSlot));
  return CUDA_SUCCESS;
}

// Kernel names. in: u64 id of a kernel or function of the session. out: u32 n, n name bytes.

constexpr size_t kMaxNameBytes = 64 << 10;

CUresult kernel_name(CallContext& cx, ArgReader& in, ReplyWriter& out) {
  uint64_t id = 0;
  if (CUresult e = read_kernel_id(in, &id)) return e;
  CUkernel kernel = nullptr;
  CUfunction func = nullptr;
  if (CUresult e = kernel_or_function(cx, id, &kernel, &func)) return e;
  const char* name = nullptr;
  if (CUresult e = kernel ? cx.api().cuKernelGetName(&name, kernel)
                          : cx.api().cuFuncGetName(&name, func)) {
    return e;
  }
  if (!name) return CUDA_ERROR_INVALID_VALUE;
  const size_t n = strnlen(name, kMaxNameBytes + 1);
  if (n > kMaxNameBytes) return CUDA_ERROR_INVALID_VALUE;  // no name the client would take
  out.put(static_cast<uint32_t>(n));
  out.put_bytes(name, n);
  return CUDA_SUCCESS;
}
}  // namespace

CUresult custom_cuFuncGetParamInfo(CallContext& cx, ArgReader& in, ReplyWriter& out) {
  return param_layout(cx, in, out);
}

CUresult custom_cuKernelGetParamInfo(CallContext& cx, ArgReader& in, ReplyWriter& out) {
  return param_layout(cx, in, out);
}

CUresult custom_cuFuncGetName(CallContext& cx, ArgReader& in, ReplyWriter& out) {
  return kernel_name(cx, in, out);
}

CUresult custom_cuKernelGetName(CallContext& cx, ArgReader& in, ReplyWriter& out) {
  return kernel_name(cx, in, out);
}

// ---------------------------------------------------------------------------------------------
// Launches

namespace {
enum class LaunchKind { kPlain, kCooperative, kEx };


CUresult launch(CallContext& cx, ArgReader& in, LaunchKind kind) {
  custom::LaunchArgs a{};
  std::span<const uint8_t> slots_raw, attrs_raw, params;
  if (!in.get(&a) || !in.get_array(&slots_raw, sizeof(custom::ParamSlot)) ||
      !in.get_array(&attrs_raw, sizeof(CUlaunchAttribute)) || !in.get_bulk(&params) ||
      !in.at_end()) {
    return in.malformed();
  }
  if (slots_raw.size() != size_t{a.num_params} * sizeof(custom::ParamSlot) ||
      attrs_raw.size() != size_t{a.num_attrs} * sizeof(CUlaunchAttribute) ||
      a.num_params > custom::kMaxParams || (kind != LaunchKind::kEx && a.num_attrs != 0)) {
    return in.malformed();
  }
  CUfunction f = nullptr;
  if (CUresult e = cx.lookup(HandleKind::kFunction, a.function, &f)) return e;
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  // The backend reads one pointer per kernel parameter and as many bytes as each parameter
  // has: the launch must carry exactly the kernel's parameters, each of its size.
  const std::vector<custom::ParamSlot>* layout = nullptr;
  if (CUresult e = kernel_layout(cx, a.function, &layout)) return e;
  if (layout->size() != a.num_params) return CUDA_ERROR_INVALID_VALUE;
  CUstream stream = nullptr;
  if (CUresult e = cx.lookup(HandleKind::kStream, a.stream, &stream)) return e;
  // The parameter bytes, 16-byte aligned, and a pointer per parameter into them.
  std::vector<uint64_t> store((params.size() + 15) / 8 + 1);
  if (!params.empty()) std::memcpy(store.data(), params.data(), params.size());
  auto* base = reinterpret_cast<uint8_t*>(store.data());
  std::vector<void*> ptrs(a.num_params);
  for (uint32_t i = 0; i < a.num_params; ++i) {
    custom::ParamSlot s;
    std::memcpy(&s, slots_raw.data() + i * sizeof s, sizeof s);
    if (size_t{s.offset} + s.size > params.size()) return in.malformed();
    if (s.size != (*layout)[i].size) return CUDA_ERROR_INVALID_VALUE;
    ptrs[i] = base + s.offset;
  }
  void** kp = ptrs.empty() ? nullptr : ptrs.data();
  // What the client sent, so a backend that reads parameters itself (sim) checks the kernel's
  // layout against it as well, instead of reading past it.
  LaunchParamsScope param_scope(ptrs, {base, params.size()});
  // Launch attributes are checked before the launch waits for its turn on the GPU.
  std::vector<CUlaunchAttribute> attrs(a.num_attrs);
  if (!attrs.empty()) std::memcpy(attrs.data(), attrs_raw.data(), attrs_raw.size());
  for (const CUlaunchAttribute& at : attrs) {
    if (CUresult e = check_attribute(cx, at.id, at.value, /*launch=*/true)) return e;
  }
  DriverApi& api = cx.api();
  return cx.submit_work(stream, [&]() -> CUresult {
    switch (kind) {
      case LaunchKind::kPlain:
        return api.cuLaunchKernel(f, a.grid[0], a.grid[1], a.grid[2], a.block[0], a.block[1],
                                  a.block[2], a.shared_mem_bytes, stream, kp, nullptr);
      case LaunchKind::kCooperative:
        return api.cuLaunchCooperativeKernel(f, a.grid[0], a.grid[1], a.grid[2], a.block[0],
                                             a.block[1], a.block[2], a.shared_mem_bytes, stream,
                                             kp);
      case LaunchKind::kEx: {
        CUlaunchConfig cfg{};
        cfg.gridDimX = a.grid[0];
        cfg.gridDimY = a.grid[1];
        cfg.gridDimZ = a.grid[2];
        cfg.blockDimX = a.block[0];
        cfg.blockDimY = a.block[1];
        cfg.blockDimZ = a.block[2];
        cfg.sharedMemBytes = a.shared_mem_bytes;
        cfg.hStream = stream;
        cfg.attrs = attrs.empty() ? nullptr : attrs.data();
        cfg.numAttrs = a.num_attrs;
        return api.cuLaunchKernelEx(&cfg, f, kp, nullptr);
      }
    }
    return CUDA_ERROR_INVALID_VALUE;
  });
}
}  // namespace

CUresult custom_cuLaunchKernel(CallContext& cx, ArgReader& in, ReplyWriter& out) {
  return launch(cx, in, LaunchKind::kPlain);
}

CUresult custom_cuLaunchCooperativeKernel(CallContext& cx, ArgReader& in, ReplyWriter& out) {
  return launch(cx, in, LaunchKind::kCooperative);
}

CUresult custom_cuLaunchKernelEx(CallContext& cx, ArgReader& in, ReplyWriter& out) {
  return launch(cx, in, LaunchKind::kEx);
}

// ---------------------------------------------------------------------------------------------
// Copies

namespace {
// The device side of a 2D/3D copy: `d` planes of `h` rows of `w` bytes at (x, y, z) in a volume
// of rows `pitch` apart and planes `height` rows apart must lie in one session allocation.
// A 2D copy uses neither z nor height: the caller passes 0 and 1 for them, whatever the
// client's descriptor holds, so the region checked is the region copied.
CUresult check_region(CallContext& cx, CUdeviceptr base, size_t x, size_t y, size_t z,
                      size_t pitch, size_t height, size_t w, size_t h, size_t d) {
  size_t plane = 0, span = 0;
  if (d > 1 && height < h) return CUDA_ERROR_INVALID_VALUE;
  const CheckedSize plane_pitch = CheckedSize(pitch) * (d > 1 ? height : 1);
  if (!plane_pitch.ok() || !region_bytes(w, h, pitch, &plane) ||
      !region_bytes(plane, d, plane_pitch.value(), &span)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const CheckedSize offset = CheckedSize(x) + (CheckedSize(y) + CheckedSize(z) * height) * pitch;
  const CheckedSize start = CheckedSize(base) + offset;
  if (!start.ok() || span == 0) return start.ok() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  return cx.check_range(start.value(), span);
}

CUresult copy(CallContext& cx, ArgReader& in, ReplyWriter& out) {
  custom::CopyArgs a{};
  if (!in.get(&a)) return in.malformed();
  CUDA_MEMCPY3D c = a.desc;
  const auto kind = static_cast<custom::CopyKind>(a.kind);
  if (a.kind > 2) return in.malformed();
  if (kind != custom::CopyKind::k3D) {
    // What a 2D copy ignores is neither checked nor passed on.
    c.Depth = 1;
    c.srcZ = c.dstZ = c.srcLOD = c.dstLOD = 0;
    c.srcHeight = c.dstHeight = 1;
  }
  const size_t w = c.WidthInBytes, h = c.Height, d = c.Depth ? c.Depth : 1;
  if (h != 0 && d > SIZE_MAX / h) return CUDA_ERROR_INVALID_VALUE;
  const size_t rows = h * d;
  if (rows != 0 && w > SIZE_MAX / rows) return CUDA_ERROR_INVALID_VALUE;
  const size_t packed = w * rows;
  CUstream stream = nullptr;
  if (CUresult e = cx.lookup(HandleKind::kStream, a.stream, &stream)) return e;
  c.srcArray = c.dstArray = nullptr;
  c.reserved0 = c.reserved1 = nullptr;
  // Source.
  if (c.srcMemoryType == CU_MEMORYTYPE_HOST) {
    std::span<const uint8_t> rows_in;
    if (!in.get_bulk(&rows_in) || rows_in.size() != packed) return in.malformed();
    c.srcHost = rows_in.data();
    c.srcXInBytes = c.srcY = c.srcZ = 0;
    c.srcPitch = w;
    c.srcHeight = h;
  } else if (c.srcMemoryType == CU_MEMORYTYPE_DEVICE) {
    if (CUresult e = check_region(cx, c.srcDevice, c.srcXInBytes, c.srcY, c.srcZ, c.srcPitch,
                                  c.srcHeight, w, h, d)) {
      return e;
    }
    c.srcHost = nullptr;
  } else if (c.srcMemoryType == CU_MEMORYTYPE_ARRAY) {
    // The array is the session's (the lookup); the backend checks the region against it.
    if (CUresult e = cx.lookup(HandleKind::kArray, reinterpret_cast<uintptr_t>(a.desc.srcArray),
                               &c.srcArray)) {
      return e;
    }
    if (!c.srcArray) return CUDA_ERROR_INVALID_HANDLE;
    c.srcHost = nullptr;
  } else {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (!in.at_end()) return in.malformed();
  // Destination.
  bool dst_host = c.dstMemoryType == CU_MEMORYTYPE_HOST;
  if (dst_host) {
    if (!out.reserve_bulk_ok(packed)) return CUDA_ERROR_INVALID_VALUE;
    c.dstHost = out.add_bulk(packed);
    c.dstXInBytes = c.dstY = c.dstZ = 0;
    c.dstPitch = w;
    c.dstHeight = h;
  } else if (c.dstMemoryType == CU_MEMORYTYPE_DEVICE) {
    if (CUresult e = check_region(cx, c.dstDevice, c.dstXInBytes, c.dstY, c.dstZ, c.dstPitch,
                                  c.dstHeight, w, h, d)) {
      return e;
    }
    c.dstHost = nullptr;
  } else if (c.dstMemoryType == CU_MEMORYTYPE_ARRAY) {
    if (CUresult e = cx.lookup(HandleKind::kArray, reinterpret_cast<uintptr_t>(a.desc.dstArray),
                               &c.dstArray)) {
      return e;
    }
    if (!c.dstArray) return CUDA_ERROR_INVALID_HANDLE;
    c.dstHost = nullptr;
  } else {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (packed == 0) return CUDA_SUCCESS;
  DriverApi& api = cx.api();
  CUresult rc = cx.submit_work(stream, [&]() -> CUresult {
    if (kind == custom::CopyKind::k3D) {
      return a.async ? api.cuMemcpy3DAsync_v2(&c, stream) : api.cuMemcpy3D_v2(&c);
    } else {
      CUDA_MEMCPY2D p{};
      p.srcXInBytes = c.srcXInBytes;
      p.srcY = c.srcY;
      p.srcMemoryType = c.srcMemoryType;
      p.srcHost = c.srcHost;
      p.srcDevice = c.srcDevice;
      p.srcArray = c.srcArray;
      p.srcPitch = c.srcPitch;
      p.dstXInBytes = c.dstXInBytes;
      p.dstY = c.dstY;
      p.dstMemoryType = c.dstMemoryType;
      p.dstHost = c.dstHost;
      p.dstDevice = c.dstDevice;
      p.dstArray = c.dstArray;
      p.dstPitch = c.dstPitch;
      p.WidthInBytes = c.WidthInBytes;
      p.Height = c.Height;
      if (kind == custom::CopyKind::k2DUnaligned) return api.cuMemcpy2DUnaligned_v2(&p);
      return a.async ? api.cuMemcpy2DAsync_v2(&p, stream) : api.cuMemcpy2D_v2(&p);
    }
  });
  if (rc != CUDA_SUCCESS) return rc;
  // The reply carries the bytes: they must be final before it leaves.
  if (a.async && dst_host) return api.cuStreamSynchronize(stream);
  return CUDA_SUCCESS;
}
}  // namespace

CUresult custom_cuMemcpy2D_v2(CallContext& cx, ArgReader& in, ReplyWriter& out) {
  return copy(cx, in, out);
}
CUresult custom_cuMemcpy2DUnaligned_v2(CallContext& cx, ArgReader& in, ReplyWriter& out) {
  return copy(cx, in, out);
}
CUresult custom_cuMemcpy3D_v2(CallContext& cx, ArgReader& in, ReplyWriter& out) {
  return copy(cx, in, out);
}
CUresult custom_cuMemcpy2DAsync_v2(CallContext& cx, ArgReader& in, ReplyWriter& out) {
  return copy(cx, in, out);
}
CUresult custom_cuMemcpy3DAsync_v2(CallContext& cx, ArgReader& in, ReplyWriter& out) {
  return copy(cx, in, out);
}

// cuMemcpyAtoHAsync_v2: the generated wire format (u64 array id, u64 srcOffset, u64 ByteCount,
// u64 stream id; reply bulk: the bytes), answered once the bytes are final, as for DtoHAsync.
CUresult custom_cuMemcpyAtoHAsync_v2(CallContext& cx, ArgReader& in, ReplyWriter& out) {
  uint64_t array_id = 0, stream_id = 0;
  size_t offset = 0, n = 0;
  if (!in.get(&array_id) || !in.get(&offset) || !in.get(&n) || !in.get(&stream_id) ||
      !in.at_end()) {
    return in.malformed();
  }
  CUarray array = nullptr;
  if (CUresult e = cx.lookup(HandleKind::kArray, array_id, &array)) return e;
  CUstream stream = nullptr;
  if (CUresult e = cx.lookup(HandleKind::kStream, stream_id, &stream)) return e;
  if (!out.reserve_bulk_ok(n)) return CUDA_ERROR_INVALID_VALUE;
  uint8_t* buf = out.add_bulk(n);
  if (CUresult e = cx.submit_work(stream, [&] {
        return cx.api().cuMemcpyAtoHAsync_v2(buf, array, offset, n, stream);
      })) {
    return e;
  }
  return cx.api().cuStreamSynchronize(stream);
}

// cuMemcpyHtoD_v2, cuMemcpyDtoH_v2 and their async forms: streamed_copy.cc.

}  // namespace cuwire::server

// ---------------------------------------------------------------------------------------------
// Module globals: the generated wire format (u8 dptr present, u8 bytes present, u64 handle id,
// string name; reply: the present outputs). A global's range becomes memory the session may copy
// to and from (cudaMemcpyToSymbol passes the range checks), never memory it may free.

namespace cuwire::server {
namespace {
template <typename H, typename Fn>
CUresult get_global(CallContext& cx, ArgReader& in, ReplyWriter& out, HandleKind kind, Fn&& query) {
  uint8_t want_ptr = 0, want_size = 0;
  uint64_t id = 0;
  const char* name = nullptr;
  if (!in.get(&want_ptr) || !in.get(&want_size) || !in.get(&id) || !in.get_string(&name) ||
      !in.at_end()) {
    return in.malformed();
  }
  H h = nullptr;
  if (CUresult e = cx.lookup(kind, id, &h)) return e;
  if (!name) return CUDA_ERROR_INVALID_VALUE;
  CUdeviceptr p = 0;
  size_t n = 0;
  if (CUresult e = query(&p, &n, h, name)) return e;
  cx.on_global(p, n, id);
  if (want_ptr) out.put(p);
  if (want_size) out.put(n);
  return CUDA_SUCCESS;
}
}  // namespace

CUresult custom_cuModuleGetGlobal_v2(CallContext& cx, ArgReader& in, ReplyWriter& out) {
  return get_global<CUmodule>(cx, in, out, HandleKind::kModule,
                              [&](CUdeviceptr* p, size_t* n, CUmodule m, const char* name) {
                                return cx.api().cuModuleGetGlobal_v2(p, n, m, name);
                              });
}

// Same wire format: the range of a __managed__ variable is memory the session copies to and from
// (the client keeps a host mirror of it), as a global's is.
CUresult custom_cuLibraryGetManaged(CallContext& cx, ArgReader& in, ReplyWriter& out) {
  return get_global<CUlibrary>(cx, in, out, HandleKind::kLibrary,
                               [&](CUdeviceptr* p, size_t* n, CUlibrary l, const char* name) {
                                 return cx.api().cuLibraryGetManaged(p, n, l, name);
                               });
}

CUresult custom_cuLibraryGetGlobal(CallContext& cx, ArgReader& in, ReplyWriter& out) {
  return get_global<CUlibrary>(cx, in, out, HandleKind::kLibrary,
                               [&](CUdeviceptr* p, size_t* n, CUlibrary l, const char* name) {
                                 return cx.api().cuLibraryGetGlobal(p, n, l, name);
                               });
}

}  // namespace cuwire::server

// ---------------------------------------------------------------------------------------------
// Graphs

namespace cuwire::server {

// cuStreamBeginCapture_v2 (generated wire format: u64 stream id, u32 mode). The mode's rule is
// about the app's threads (which calls a thread may make while a capture is open), and the
// client, which sees them, applies it (check_unsafe_in_capture in client-lib). On the server
// every call of a session comes from one thread: the driver would take that thread for the
// capturing one and refuse the session's calls that the app made, legally, from other threads
// or through the client's own staging; in global mode it would refuse other sessions' calls
// too. So the backend captures in relaxed mode; the rules about streams (no synchronisation of
// a capturing stream, no implicit dependency through the legacy stream) are the driver's.
CUresult custom_cuStreamBeginCapture_v2(CallContext& cx, ArgReader& in, ReplyWriter&) {
  uint64_t stream_id = 0;
  CUstreamCaptureMode mode{};
  if (!in.get(&stream_id) || !in.get(&mode) || !in.at_end()) return in.malformed();
  CUstream stream = nullptr;
  if (CUresult e = cx.lookup(HandleKind::kStream, stream_id, &stream)) return e;
  if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      mode != CU_STREAM_CAPTURE_MODE_RELAXED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return cx.api().cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_RELAXED);
}

// cuStreamEndCapture (generated wire format: u64 stream id -> u64 graph id): the capture's
// graph-owned allocations become the graph's (CallContext::note_stream_alloc).
CUresult custom_cuStreamEndCapture(CallContext& cx, ArgReader& in, ReplyWriter& out) {
  uint64_t stream_id = 0;
  if (!in.get(&stream_id) || !in.at_end()) return in.malformed();
  CUstream stream = nullptr;
  if (CUresult e = cx.lookup(HandleKind::kStream, stream_id, &stream)) return e;
  if (CUresult e = cx.check_room(HandleKind::kGraph, 1)) return e;
  const uint64_t capture = cx.capture_id(stream);
  CUgraph graph = nullptr;
  const CUresult rc = cx.api().cuStreamEndCapture(stream, &graph);
  const uint64_t graph_id = rc == CUDA_SUCCESS ? cx.export_handle(HandleKind::kGraph, graph) : 0;
  // The capture is over, made or not (an invalidated capture ends too).
  if (capture) cx.end_capture_allocs(capture, graph_id);
  if (rc != CUDA_SUCCESS) return rc;
  out.put(graph_id);
  return CUDA_SUCCESS;
}

// cuGraphInstantiateWithFlags (generated wire format: u64 graph id, u64 flags -> u64 exec id).
CUresult custom_cuGraphInstantiateWithFlags(CallContext& cx, ArgReader& in, ReplyWriter& out) {
  uint64_t graph_id = 0;
  unsigned long long flags = 0;
  if (!in.get(&graph_id) || !in.get(&flags) || !in.at_end()) return in.malformed();
  CUgraph graph = nullptr;
  if (CUresult e = cx.lookup(HandleKind::kGraph, graph_id, &graph)) return e;
  if (CUresult e = cx.check_room(HandleKind::kGraphExec, 1)) return e;
  CUgraphExec exec = nullptr;
  if (CUresult e = cx.api().cuGraphInstantiateWithFlags(&exec, graph, flags)) return e;
  const uint64_t exec_id = cx.export_handle(HandleKind::kGraphExec, exec);
  cx.instantiate_allocs(graph_id, exec_id, flags & CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH);
  out.put(exec_id);
  return CUDA_SUCCESS;
}

// cuGraphLaunch (generated wire format: u64 exec id, u64 stream id): graph-owned memory the
// app freed since the last launch is the session's again (and charged) before the launch.
CUresult custom_cuGraphLaunch(CallContext& cx, ArgReader& in, ReplyWriter&) {
  uint64_t exec_id = 0, stream_id = 0;
  if (!in.get(&exec_id) || !in.get(&stream_id) || !in.at_end()) return in.malformed();
  CUgraphExec exec = nullptr;
  CUstream stream = nullptr;
  if (CUresult e = cx.lookup(HandleKind::kGraphExec, exec_id, &exec)) return e;
  if (CUresult e = cx.lookup(HandleKind::kStream, stream_id, &stream)) return e;
  if (CUresult e = cx.revive_graph_allocs(exec_id)) return e;
  return cx.submit_work(stream, [&] { return cx.api().cuGraphLaunch(exec, stream); });
}

// in: u64 exec id, u64 graph id (both captured graphs). out: u32 the update's result.
CUresult custom_cuGraphExecUpdate_v2(CallContext& cx, ArgReader& in, ReplyWriter& out) {
  uint64_t exec_id = 0, graph_id = 0;
  if (!in.get(&exec_id) || !in.get(&graph_id) || !in.at_end()) return in.malformed();
  CUgraphExec x = nullptr;
  CUgraph g = nullptr;
  if (CUresult e = cx.lookup_owned(HandleKind::kGraphExec, exec_id, &x)) return e;
  if (CUresult e = cx.lookup(HandleKind::kGraph, graph_id, &g)) return e;
  if (!x || !g) return CUDA_ERROR_INVALID_VALUE;
  CUgraphExecUpdateResultInfo info{};
  if (CUresult e = cx.api().cuGraphExecUpdate_v2(x, g, &info)) return e;
  out.put(static_cast<uint32_t>(info.result));
  return CUDA_SUCCESS;
}

// Conditional handles of the client's graphs (client-lib/graphs.cc). in: u32 default value, u32
// flags. out: u64 the handle. The backend makes it without a graph (the sim: a 4-byte cell of
// device memory, sim_gpu.h; a real driver refuses a null graph), and the session may then
// copy to and from it, and free it, like an allocation of its own: the client sets and reads
// the value that way.
CUresult custom_cuGraphConditionalHandleCreate(CallContext& cx, ArgReader& in, ReplyWriter& out) {
  uint32_t value = 0, flags = 0;
  if (!in.get(&value) || !in.get(&flags) || !in.at_end()) return in.malformed();
  CUgraphConditionalHandle h = 0;
  if (CUresult e = cx.api().cuGraphConditionalHandleCreate(&h, nullptr, nullptr, value, flags)) {
    return e;
  }
  if (CUresult e = cx.on_alloc(static_cast<CUdeviceptr>(h), sizeof(uint32_t))) return e;
  out.put(static_cast<uint64_t>(h));
  return CUDA_SUCCESS;
}

// The largest captured graph whose shape a session gets: its reply (4 bytes a node, 8 an edge)
// stays well inside one message, beside what else a reply may carry (device printf text).
constexpr size_t kMaxShapeNodes = size_t{1} << 15;
constexpr size_t kMaxShapeEdges = size_t{1} << 16;

// cuGraphGetNodes of a captured graph. in: u64 graph id [, u32 1: the shape too]. out: u64
// node count [, then each node's u32 type, u64 edge count, and each edge as u32 indexes of
// its two nodes]. The backend's node handles name its own objects and never leave the server:
// the client makes handles of its own for the nodes (client-lib/graphs.cc).
CUresult custom_cuGraphGetNodes(CallContext& cx, ArgReader& in, ReplyWriter& out) {
  uint64_t id = 0;
  uint32_t shape = 0;
  if (!in.get(&id)) return in.malformed();
  if (!in.at_end() && !in.get(&shape)) return in.malformed();
  if (!in.at_end() || shape > 1) return in.malformed();
  CUgraph g = nullptr;
  if (CUresult e = cx.lookup(HandleKind::kGraph, id, &g)) return e;
  if (!g) return CUDA_ERROR_INVALID_VALUE;
  DriverApi& api = cx.api();
  size_t n = 0;
  if (CUresult e = api.cuGraphGetNodes(g, nullptr, &n)) return e;
  if (!shape) {
    out.put(static_cast<uint64_t>(n));
    return CUDA_SUCCESS;
  }
  if (n > kMaxShapeNodes) return CUDA_ERROR_NOT_SUPPORTED;
  std::vector<CUgraphNode> nodes(n);
  size_t got = n;
  if (CUresult e = api.cuGraphGetNodes(g, nodes.data(), &got)) return e;
  if (got != n) return CUDA_ERROR_UNKNOWN;  // the graph changed under the call
  std::unordered_map<CUgraphNode, uint32_t> index;
  std::vector<uint32_t> types(n);
  for (size_t i = 0; i < n; ++i) {
    CUgraphNodeType t{};
    if (CUresult e = api.cuGraphNodeGetType(nodes[i], &t)) return e;
    types[i] = static_cast<uint32_t>(t);
    index.emplace(nodes[i], static_cast<uint32_t>(i));
  }
  size_t ne = 0;
  if (CUresult e = api.cuGraphGetEdges_v2(g, nullptr, nullptr, nullptr, &ne)) return e;
  if (ne > kMaxShapeEdges) return CUDA_ERROR_NOT_SUPPORTED;
  std::vector<CUgraphNode> from(ne), to(ne);
  size_t got_edges = ne;
  if (ne) {
    if (CUresult e = api.cuGraphGetEdges_v2(g, from.data(), to.data(), nullptr, &got_edges)) {
      return e;
    }
  }
  if (got_edges != ne) return CUDA_ERROR_UNKNOWN;  // the graph changed under the call
  std::vector<uint32_t> edges;
  edges.reserve(2 * ne);
  for (size_t i = 0; i < ne; ++i) {
    auto f = index.find(from[i]), d = index.find(to[i]);
    if (f == index.end() || d == index.end()) return CUDA_ERROR_UNKNOWN;
    edges.push_back(f->second);
    edges.push_back(d->second);
  }
  out.put(static_cast<uint64_t>(n));
  for (uint32_t t : types) out.put(t);
  out.put(static_cast<uint64_t>(ne));
  for (uint32_t e : edges) out.put(e);
  return CUDA_SUCCESS;
}

// The DOT flags whose output names only what the session may see: not node, function or event
// handles, nor the host pointers of copy and host nodes (the server's staging buffers and
// callbacks). VERBOSE stands for all of them.
constexpr unsigned kSafeDotFlags =
    CU_GRAPH_DEBUG_DOT_FLAGS_RUNTIME_TYPES | CU_GRAPH_DEBUG_DOT_FLAGS_MEMSET_NODE_PARAMS |
    CU_GRAPH_DEBUG_DOT_FLAGS_KERNEL_NODE_ATTRIBUTES | CU_GRAPH_DEBUG_DOT_FLAGS_MEM_ALLOC_NODE_PARAMS |
    CU_GRAPH_DEBUG_DOT_FLAGS_MEM_FREE_NODE_PARAMS | CU_GRAPH_DEBUG_DOT_FLAGS_EXTRA_TOPO_INFO;
// The largest DOT text a session gets back.
constexpr size_t kMaxDotBytes = size_t{64} << 20;

CUresult custom_cuGraphDebugDotPrint(CallContext& cx, ArgReader& in, ReplyWriter& out) {
  uint64_t id = 0, want = 0;
  uint32_t flags = 0;
  if (!in.get(&id) || !in.get(&flags) || !in.get(&want) || !in.at_end()) return in.malformed();
  CUgraph g = nullptr;
  if (CUresult e = cx.lookup(HandleKind::kGraph, id, &g)) return e;
  if (!g) return CUDA_ERROR_INVALID_VALUE;
  if (flags & CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE) flags = kSafeDotFlags;
  flags &= kSafeDotFlags;
  // A file only this process can read, gone once read.
  const char* tmp = std::getenv("TMPDIR");
  std::string path = std::string(tmp && *tmp ? tmp : "/tmp") + "/cuwire-dot-XXXXXX";
  const int fd = mkstemp(path.data());
  if (fd < 0) return CUDA_ERROR_OPERATING_SYSTEM;
  close(fd);
  std::string text;
  CUresult rc = cx.api().cuGraphDebugDotPrint(g, path.c_str(), flags);
  if (rc == CUDA_SUCCESS) {
    std::ifstream f(path, std::ios::binary);
    text.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    if (!f.good() && !f.eof()) rc = CUDA_ERROR_OPERATING_SYSTEM;
  }
  unlink(path.c_str());
  if (rc != CUDA_SUCCESS) return rc;
  if (text.size() > kMaxDotBytes) return CUDA_ERROR_OUT_OF_MEMORY;
  if (want == 0) {
    out.put(static_cast<uint64_t>(text.size()));
    return CUDA_SUCCESS;
  }
  if (want != text.size() || !out.reserve_bulk_ok(want)) return CUDA_ERROR_INVALID_VALUE;
  std::memcpy(out.add_bulk(want), text.data(), want);
  return CUDA_SUCCESS;
}

}  // namespace cuwire::server

// ---------------------------------------------------------------------------------------------
// Launch and stream attributes, and pool properties: only values a session may set reach the
// backend. Attributes that carry a handle (programmatic and completion events) or an address the
// driver writes (device-updatable kernel nodes) are not supported through the server.

namespace cuwire::server {

CUresult check_attribute(CallContext& cx, CUlaunchAttributeID id, const CUlaunchAttributeValue& v,
                         bool launch) {
  switch (id) {
    case CU_LAUNCH_ATTRIBUTE_IGNORE:
    case CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY:
    case CU_LAUNCH_ATTRIBUTE_PRIORITY:
    case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP:
    case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
      return CUDA_SUCCESS;
    case CU_LAUNCH_ATTRIBUTE_COOPERATIVE:
    case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
    case CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
    case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION:
    case CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION:
    case CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
      return launch ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW: {
      // A cache hint over memory: it must be the session's.
      const CUaccessPolicyWindow& w = v.accessPolicyWindow;
      if (w.num_bytes == 0) return CUDA_SUCCESS;
      return cx.check_range(reinterpret_cast<CUdeviceptr>(w.base_ptr), w.num_bytes);
    }
    default:
      return CUDA_ERROR_NOT_SUPPORTED;
  }
}

CUresult verify_stream_attribute(CallContext& cx, CUstream, CUstreamAttrID attr,
                                 const CUstreamAttrValue* value) {
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  return check_attribute(cx, attr, *value, /*launch=*/false);
}

// A pool's grant of another device (cuMemPoolSetAccess) is for every context of the process on
// that device, and on the driver every session's contexts are the server's: another session's
// kernels there could reach the pool's memory. The sim honours a grant for the pool's own
// session only (SessionObjects), and a relay session with an upstream session of its own is
// kept apart by its upstream; on the driver, and on a relay whose sessions share one upstream
// session (a client library without session connections), a grant of a device the pool does
// not reach yet is refused (a revocation, or a grant it has, passes). Unverified without a GPU.
CUresult verify_pool_access(CallContext& cx, CUmemoryPool pool, const CUmemAccessDesc* map,
                            size_t count) {
  if (cx.backend_keeps_sessions_apart()) return CUDA_SUCCESS;
  for (size_t i = 0; i < count; ++i) {
    if (map[i].flags == CU_MEM_ACCESS_FLAGS_PROT_NONE) continue;
    CUmemLocation where = map[i].location;
    CUmemAccess_flags has = CU_MEM_ACCESS_FLAGS_PROT_NONE;
    if (CUresult e = cx.api().cuMemPoolGetAccess(&has, pool, &where)) return e;
    if (has == CU_MEM_ACCESS_FLAGS_PROT_NONE) return CUDA_ERROR_NOT_SUPPORTED;
  }
  return CUDA_SUCCESS;
}

CUresult verify_pool_props(CallContext&, CUmemoryPool*, const CUmemPoolProps* props) {
  if (!props) return CUDA_ERROR_INVALID_VALUE;
  // A pool may be exported as a POSIX descriptor, which stays in the server: another session
  // of the tenant gets it through shareable_calls.cc, never the descriptor itself. Other
  // handle types would hand the memory (and the server's process identity) out of the server.
  if (props->win32SecurityAttributes != nullptr ||
      (props->handleTypes != CU_MEM_HANDLE_TYPE_NONE &&
       props->handleTypes != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  return CUDA_SUCCESS;
}

}  // namespace cuwire::server

// ---------------------------------------------------------------------------------------------
// A device's current memory pool, per session (generated wire formats: cuDeviceSetMemPool u32
// dev, u64 pool id; cuDeviceGetMemPool u32 dev -> u64 pool id; cuMemSetMemPool/cuMemGetMemPool
// CUmemLocation[1], u32 type[, u64 pool id]; cuMemAllocAsync u64 bytes, u64 stream id ->
// u64 address). The backend's current pool is process-wide: a session that set its own pool
// there would make every other session's cuMemAllocAsync allocate from a pool it can trim,
// reconfigure and destroy. So the session's choice lives in the session, and cuMemAllocAsync
// allocates from it.

namespace cuwire::server {
namespace {
CUresult set_pool(CallContext& cx, CUdevice dev, uint64_t pool_id) {
  CUmemoryPool pool = nullptr;
  if (CUresult e = cx.lookup(HandleKind::kMemoryPool, pool_id, &pool)) return e;
  if (!pool) return CUDA_ERROR_INVALID_VALUE;
  // The device must exist and the pool must serve it.
  CUmemoryPool backend_current = nullptr;
  if (CUresult e = cx.api().cuDeviceGetMemPool(&backend_current, dev)) return e;
  CUmemLocation where{CU_MEM_LOCATION_TYPE_DEVICE, dev};
  CUmemAccess_flags access{};
  if (CUresult e = cx.api().cuMemPoolGetAccess(&access, pool, &where)) return e;
  if (access != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) return CUDA_ERROR_INVALID_VALUE;
  cx.set_current_pool(dev, pool_id);
  return CUDA_SUCCESS;
}

// The session's default pool of backend device `dev` (CallContext::default_pool), made now if
// it is not yet: a pool of the device's memory that the session owns.
CUresult session_default_pool(CallContext& cx, CUdevice dev, uint64_t* id_out,
                              CUmemoryPool* pool_out) {
  CUmemoryPool pool = nullptr;
  if (uint64_t id = cx.default_pool(dev);
      id && cx.lookup(HandleKind::kMemoryPool, id, &pool) == CUDA_SUCCESS && pool) {
    *id_out = id;
    *pool_out = pool;
    return CUDA_SUCCESS;
  }
  // The device exists and has pools.
  if (CUresult e = cx.api().cuDeviceGetDefaultMemPool(&pool, dev)) return e;
  if (CUresult e = cx.check_room(HandleKind::kMemoryPool)) return e;
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = dev;
  if (CUresult e = cx.api().cuMemPoolCreate(&pool, &props)) return e;
  const uint64_t id = cx.export_handle(HandleKind::kMemoryPool, pool);
  cx.set_default_pool(dev, id);
  *id_out = id;
  *pool_out = pool;
  return CUDA_SUCCESS;
}

CUresult get_pool(CallContext& cx, CUdevice dev, ReplyWriter& out) {
  CUmemoryPool pool = nullptr;
  uint64_t id = cx.current_pool(dev);
  if (!id || cx.lookup(HandleKind::kMemoryPool, id, &pool) != CUDA_SUCCESS || !pool) {
    if (CUresult e = session_default_pool(cx, dev, &id, &pool)) return e;
  }
  out.put(id);
  return CUDA_SUCCESS;
}

CUresult read_location(ArgReader& in, CUmemLocation* loc, CUmemAllocationType* type) {
  std::span<const uint8_t> raw;
  if (!in.get_array(&raw, sizeof(CUmemLocation)) || raw.size() != sizeof(CUmemLocation) ||
      !in.get(type)) {
    return in.malformed();
  }
  std::memcpy(loc, raw.data(), sizeof *loc);
  // Host and host-NUMA pools are not served: the server's host memory is not the client's.
  if (loc->type != CU_MEM_LOCATION_TYPE_DEVICE || *type != CU_MEM_ALLOCATION_TYPE_PINNED) {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  return CUDA_SUCCESS;
}
}  // namespace

CUresult custom_cuDeviceSetMemPool(CallContext& cx, ArgReader& in, ReplyWriter&) {
  CUdevice dev = 0;
  uint64_t pool_id = 0;
  if (!in.get(&dev) || !in.get(&pool_id) || !in.at_end()) return in.malformed();
  if (CUresult e = cx.device_in(&dev)) return e;
  return set_pool(cx, dev, pool_id);
}

CUresult custom_cuDeviceGetMemPool(CallContext& cx, ArgReader& in, ReplyWriter& out) {
  CUdevice dev = 0;
  if (!in.get(&dev) || !in.at_end()) return in.malformed();
  if (CUresult e = cx.device_in(&dev)) return e;
  return get_pool(cx, dev, out);
}

CUresult custom_cuMemSetMemPool(CallContext& cx, ArgReader& in, ReplyWriter&) {
  CUmemLocation loc{};
  CUmemAllocationType type{};
  uint64_t pool_id = 0;
  if (CUresult e = read_location(in, &loc, &type)) return e;
  if (!in.get(&pool_id) || !in.at_end()) return in.malformed();
  CUdevice dev = loc.id;
  if (CUresult e = cx.device_in(&dev)) return e;
  return set_pool(cx, dev, pool_id);
}

CUresult custom_cuMemGetMemPool(CallContext& cx, ArgReader& in, ReplyWriter& out) {
  CUmemLocation loc{};
  CUmemAllocationType type{};
  if (CUresult e = read_location(in, &loc, &type)) return e;
  if (!in.at_end()) return in.malformed();
  CUdevice dev = loc.id;
  if (CUresult e = cx.device_in(&dev)) return e;
  return get_pool(cx, dev, out);
}

// cuDeviceGetDefaultMemPool (u32 dev -> u64 pool id), cuMemGetDefaultMemPool (CUmemLocation[1],
// u32 type -> u64 pool id): the session's own default pool.
namespace {
// out: the id of the session's default pool of backend device `dev`.
CUresult put_default_pool(CallContext& cx, CUdevice dev, ReplyWriter& out) {
  uint64_t id = 0;
  CUmemoryPool pool = nullptr;
  if (CUresult e = session_default_pool(cx, dev, &id, &pool)) return e;
  out.put(id);
  return CUDA_SUCCESS;
}
}  // namespace

CUresult custom_cuDeviceGetDefaultMemPool(CallContext& cx, ArgReader& in, ReplyWriter& out) {
  CUdevice dev = 0;
  if (!in.get(&dev) || !in.at_end()) return in.malformed();
  if (CUresult e = cx.device_in(&dev)) return e;
  return put_default_pool(cx, dev, out);
}

CUresult custom_cuMemGetDefaultMemPool(CallContext& cx, ArgReader& in, ReplyWriter& out) {
  CUmemLocation loc{};
  CUmemAllocationType type{};
  if (CUresult e = read_location(in, &loc, &type)) return e;
  if (!in.at_end()) return in.malformed();
  CUdevice dev = loc.id;
  if (CUresult e = cx.device_in(&dev)) return e;
  return put_default_pool(cx, dev, out);
}

// cuMemPoolDestroy (u64 pool id): a default pool cannot be destroyed; a destroyed current pool
// gives its place back to the default one.
CUresult custom_cuMemPoolDestroy(CallContext& cx, ArgReader& in, ReplyWriter&) {
  uint64_t pool_id = 0;
  if (!in.get(&pool_id) || !in.at_end()) return in.malformed();
  CUmemoryPool pool = nullptr;
  if (CUresult e = cx.lookup_owned(HandleKind::kMemoryPool, pool_id, &pool)) return e;
  if (cx.is_default_pool(pool_id)) return CUDA_ERROR_INVALID_VALUE;
  // Its exports end first: no import may name a pool on its way out.
  shareable_forget(&cx, ShareableKind::kPool, reinterpret_cast<uintptr_t>(pool));
  if (CUresult e = cx.api().cuMemPoolDestroy(pool)) return e;
  cx.forget_pool(pool_id);
  cx.release(pool_id);
  return CUDA_SUCCESS;
}

CUresult custom_cuMemAllocAsync(CallContext& cx, ArgReader& in, ReplyWriter& out) {
  size_t bytes = 0;
  uint64_t stream_id = 0;
  if (!in.get(&bytes) || !in.get(&stream_id) || !in.at_end()) return in.malformed();
  CUstream stream = nullptr;
  if (CUresult e = cx.lookup(HandleKind::kStream, stream_id, &stream)) return e;
  CUdevice dev = 0;
  if (CUresult e = cx.api().cuCtxGetDevice(&dev)) return e;
  CUdeviceptr p = 0;
  CUmemoryPool pool = nullptr;
  const uint64_t mine = cx.current_pool(dev);
  CUresult rc;
  if (mine && cx.lookup(HandleKind::kMemoryPool, mine, &pool) == CUDA_SUCCESS && pool) {
    rc = cx.api().cuMemAllocFromPoolAsync(&p, bytes, pool, stream);
  } else {
    // In a capture the allocation is the graph's (an allocation node), from no pool of the
    // session's; otherwise it comes from the session's default pool.
    CUstreamCaptureStatus capturing = CU_STREAM_CAPTURE_STATUS_NONE;
    if (CUresult e = cx.api().cuStreamIsCapturing(stream, &capturing)) return e;
    uint64_t id = 0;
    if (capturing != CU_STREAM_CAPTURE_STATUS_NONE) {
      rc = cx.api().cuMemAllocAsync(&p, bytes, stream);
    } else if ((rc = session_default_pool(cx, dev, &id, &pool)) == CUDA_SUCCESS) {
      rc = cx.api().cuMemAllocFromPoolAsync(&p, bytes, pool, stream);
    }
  }
  if (rc != CUDA_SUCCESS) return rc;
  if (CUresult e = cx.on_alloc(p, bytes)) return e;
  cx.note_stream_alloc(stream, p, bytes);
  out.put(p);
  return CUDA_SUCCESS;
}

// cuMemAllocFromPoolAsync (generated wire format: u64 bytes, u64 pool id, u64 stream id ->
// u64 address), as cuMemAllocAsync.
CUresult custom_cuMemAllocFromPoolAsync(CallContext& cx, ArgReader& in, ReplyWriter& out) {
  size_t bytes = 0;
  uint64_t pool_id = 0, stream_id = 0;
  if (!in.get(&bytes) || !in.get(&pool_id) || !in.get(&stream_id) || !in.at_end()) {
    return in.malformed();
  }
  CUmemoryPool pool = nullptr;
  CUstream stream = nullptr;
  if (CUresult e = cx.lookup(HandleKind::kMemoryPool, pool_id, &pool)) return e;
  if (CUresult e = cx.lookup(HandleKind::kStream, stream_id, &stream)) return e;
  CUdeviceptr p = 0;
  if (CUresult e = cx.api().cuMemAllocFromPoolAsync(&p, bytes, pool, stream)) return e;
  if (CUresult e = cx.on_alloc(p, bytes)) return e;
  cx.note_stream_alloc(stream, p, bytes);
  out.put(p);
  return CUDA_SUCCESS;
}

}  // namespace cuwire::server
