// Texture and surface objects: a resource (a CUDA array, a mipmapped array, linear or pitched
// device memory) and sampling state turned into the view the PTX interpreter reads
// (ptx::TextureObject / SurfaceObject). Launches resolve the object values their kernels use
// (sim_launch.cc).

#include <cmath>
#include <cstring>

#include "protocol/array_format.h"
#include "server/backend/sim/sim_gpu.h"

namespace cuwire::server::sim {
namespace {

constexpr unsigned kKnownTextureFlags = CU_TRSF_READ_AS_INTEGER | CU_TRSF_NORMALIZED_COORDINATES |
                                        CU_TRSF_SRGB | CU_TRSF_DISABLE_TRILINEAR_OPTIMIZATION |
                                        CU_TRSF_SEAMLESS_CUBEMAP;
constexpr size_t kPitchAlignment = 32;  // CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT

bool texel_format(CUarray_format f, ptx::TexelFormat* out) {
  switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
      *out = ptx::TexelFormat::kU8;
      return true;
    case CU_AD_FORMAT_UNSIGNED_INT16:
      *out = ptx::TexelFormat::kU16;
      return true;
    case CU_AD_FORMAT_UNSIGNED_INT32:
      *out = ptx::TexelFormat::kU32;
      return true;
    case CU_AD_FORMAT_SIGNED_INT8:
      *out = ptx::TexelFormat::kS8;
      return true;
    case CU_AD_FORMAT_SIGNED_INT16:
      *out = ptx::TexelFormat::kS16;
      return true;
    case CU_AD_FORMAT_SIGNED_INT32:
      *out = ptx::TexelFormat::kS32;
      return true;
    case CU_AD_FORMAT_HALF:
      *out = ptx::TexelFormat::kF16;
      return true;
    case CU_AD_FORMAT_FLOAT:
      *out = ptx::TexelFormat::kF32;
      return true;
    default:
      return false;
  }
}

bool all_zero(const void* p, size_t n) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) {
    if (b[i]) return false;
  }
  return true;
}

// The texels of array `a` as the interpreter reads them, and the shape its flags give.
bool array_layout(const SimArray& a, ptx::TexelLayout* t, ptx::ResourceShape* shape) {
  const CUDA_ARRAY3D_DESCRIPTOR& d = a.desc;
  if (!texel_format(d.Format, &t->format)) return false;
  t->channels = static_cast<uint8_t>(d.NumChannels);
  t->data = a.texels();
  t->bytes = a.size;
  t->row_pitch = a.row_bytes;
  t->slice_pitch = a.row_bytes * a.rows;
  t->width = static_cast<uint32_t>(d.Width);
  t->height = static_cast<uint32_t>(a.rows);
  const bool layered = d.Flags & CUDA_ARRAY3D_LAYERED;
  if (d.Flags & CUDA_ARRAY3D_CUBEMAP) {
    *shape = layered ? ptx::ResourceShape::kCubeLayered : ptx::ResourceShape::kCube;
    t->layers = static_cast<uint32_t>(d.Depth);
  } else if (layered) {
    *shape = d.Height ? ptx::ResourceShape::k2DLayered : ptx::ResourceShape::k1DLayered;
    t->layers = static_cast<uint32_t>(d.Depth);
  } else if (d.Depth) {
    *shape = ptx::ResourceShape::k3D;
    t->depth = static_cast<uint32_t>(d.Depth);
  } else {
    *shape = d.Height ? ptx::ResourceShape::k2D : ptx::ResourceShape::k1D;
  }
  return true;
}

}  // namespace

CUresult SimGpu::resource_view(const CUDA_RESOURCE_DESC& r, bool surface, SimTexObject* o) {
  if (r.flags != 0) return CUDA_ERROR_INVALID_VALUE;
  ptx::TexelLayout& t = surface ? o->surf.texels : o->texture.texels;
  ptx::ResourceShape shape = ptx::ResourceShape::k2D;
  switch (r.resType) {
    case CU_RESOURCE_TYPE_ARRAY: {
      std::shared_ptr<SimArray> a;
      if (CUresult e = array_of(r.res.array.hArray, &a)) return e;
      if (surface && !(a->desc.Flags & CUDA_ARRAY3D_SURFACE_LDST)) return CUDA_ERROR_INVALID_VALUE;
      if (!array_layout(*a, &t, &shape)) return CUDA_ERROR_INVALID_VALUE;
      o->storage = a->storage;
      break;
    }
    case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY: {
      if (surface) return CUDA_ERROR_INVALID_VALUE;  // a surface is over one level's array
      std::shared_ptr<SimMipmap> m;
      if (CUresult e = mipmap_of(r.res.mipmap.hMipmappedArray, &m)) return e;
      std::vector<ptx::TexelLayout>& levels = o->texture.levels;
      for (const auto& level : m->levels) {
        if (!array_layout(*level, &levels.emplace_back(), &shape)) return CUDA_ERROR_INVALID_VALUE;
      }
      t = levels.front();
      o->storage = m->levels.front()->storage;
      o->mipmap = std::move(m);
      break;
    }
    case CU_RESOURCE_TYPE_LINEAR:
    case CU_RESOURCE_TYPE_PITCH2D: {
      if (surface) return CUDA_ERROR_INVALID_VALUE;  // surfaces are arrays only
      const bool linear = r.resType == CU_RESOURCE_TYPE_LINEAR;
      CUarray_format fmt = linear ? r.res.linear.format : r.res.pitch2D.format;
      unsigned channels = linear ? r.res.linear.numChannels : r.res.pitch2D.numChannels;
      size_t elem = array_element_bytes(fmt, channels);
      if (elem == 0 || !texel_format(fmt, &t.format)) return CUDA_ERROR_INVALID_VALUE;
      t.channels = static_cast<uint8_t>(channels);
      CUdeviceptr base;
      size_t extent;
      CtxPtr ctx;
      if (CUresult e = current(&ctx)) return e;
      auto attr = [&](CUdevice_attribute a) {
        int v = 0;
        device_attribute(a, ctx->device, &v);
        return static_cast<size_t>(v);
      };
      if (linear) {
        base = r.res.linear.devPtr;
        extent = r.res.linear.sizeInBytes;
        size_t width = extent / elem;
        if (width == 0 || width > attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LINEAR_WIDTH)) {
          return CUDA_ERROR_INVALID_VALUE;
        }
        shape = ptx::ResourceShape::kLinear;
        t.width = static_cast<uint32_t>(width);
        t.row_pitch = t.slice_pitch = extent;
      } else {
        const auto& p = r.res.pitch2D;
        base = p.devPtr;
        size_t row;
        if (p.width == 0 || p.height == 0 || __builtin_mul_overflow(p.width, elem, &row) ||
            p.pitchInBytes < row || p.pitchInBytes % kPitchAlignment != 0 ||
            p.width > attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_WIDTH) ||
            p.height > attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_HEIGHT) ||
            p.pitchInBytes > attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_PITCH)) {
          return CUDA_ERROR_INVALID_VALUE;
        }
        extent = p.pitchInBytes * (p.height - 1) + row;  // bounded by the limits above
        shape = ptx::ResourceShape::kPitch2D;
        t.width = static_cast<uint32_t>(p.width);
        t.height = static_cast<uint32_t>(p.height);
        t.row_pitch = p.pitchInBytes;
        t.slice_pitch = p.pitchInBytes * p.height;
      }
      CopySide side;
      if (CUresult e = copy_linear_side(base, extent, &side)) return e;
      t.data = side.p;
      t.bytes = extent;
      o->storage = std::move(side.keep);
      break;
    }
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  if (surface) {
    o->surf.shape = shape;
  } else {
    o->texture.shape = shape;
  }
  o->resource = r;
  return CUDA_SUCCESS;
}

CUresult SimGpu::create_object(std::shared_ptr<SimTexObject> o, unsigned long long* out) {
  CtxPtr ctx;
  if (CUresult e = current(&ctx)) return e;
  o->ctx = ctx.get();
  o->ctx_id = ctx->id;
  std::unique_lock lock(mu_);
  if (!ctx->alive) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  uint64_t h = next_object_++;
  ctx->tex_objects.insert(h);
  objects_.emplace(h, std::move(o));
  *out = h;
  return CUDA_SUCCESS;
}

CUresult SimGpu::object_of(uint64_t h, bool surface, std::shared_ptr<const SimTexObject>* out) {
  std::shared_lock lock(mu_);
  auto it = objects_.find(h);
  if (it == objects_.end() || it->second->surface != surface) return CUDA_ERROR_INVALID_VALUE;
  *out = it->second;
  return CUDA_SUCCESS;
}

std::shared_ptr<const SimTexObject> SimGpu::find_object(uint64_t h, bool surface) {
  std::shared_ptr<const SimTexObject> o;
  return object_of(h, surface, &o) == CUDA_SUCCESS ? o : nullptr;
}

CUresult SimGpu::destroy_object(uint64_t h, bool surface) {
  std::shared_ptr<const SimTexObject> gone;  // released after the lock
  std::unique_lock lock(mu_);
  auto it = objects_.find(h);
  if (it == objects_.end() || it->second->surface != surface) return CUDA_ERROR_INVALID_VALUE;
  gone = std::move(it->second);
  objects_.erase(it);
  gone->ctx->tex_objects.erase(h);
  return CUDA_SUCCESS;
}

void SimGpu::destroy_objects(Context& ctx) {
  std::vector<std::shared_ptr<const SimTexObject>> gone;
  std::unique_lock lock(mu_);
  for (uint64_t h : ctx.tex_objects) {
    auto it = objects_.find(h);
    if (it == objects_.end()) continue;
    gone.push_back(std::move(it->second));
    objects_.erase(it);
  }
  ctx.tex_objects.clear();
}

CUresult SimGpu::cuTexObjectCreate(CUtexObject* out, const CUDA_RESOURCE_DESC* r,
                                   const CUDA_TEXTURE_DESC* td, const CUDA_RESOURCE_VIEW_DESC* v) {
  if (!out || !r || !td) return CUDA_ERROR_INVALID_VALUE;
  // Resource views reinterpret formats and select mip levels or layers: not simulated.
  if (v && !all_zero(v, sizeof *v)) return CUDA_ERROR_NOT_SUPPORTED;
  auto o = std::make_shared<SimTexObject>();
  if (CUresult e = resource_view(*r, false, o.get())) return e;
  ptx::TextureObject& t = o->texture;
  for (int i = 0; i < 3; ++i) {
    if (td->addressMode[i] > CU_TR_ADDRESS_MODE_BORDER) return CUDA_ERROR_INVALID_VALUE;
    t.address[i] = static_cast<ptx::AddressMode>(td->addressMode[i]);
  }
  if (td->filterMode != CU_TR_FILTER_MODE_POINT && td->filterMode != CU_TR_FILTER_MODE_LINEAR) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (td->flags & ~kKnownTextureFlags) return CUDA_ERROR_INVALID_VALUE;
  t.linear_filter = td->filterMode == CU_TR_FILTER_MODE_LINEAR;
  t.normalized_coords = td->flags & CU_TRSF_NORMALIZED_COORDINATES;
  t.read_as_integer = td->flags & CU_TRSF_READ_AS_INTEGER;
  t.srgb = td->flags & CU_TRSF_SRGB;
  std::memcpy(t.border_color, td->borderColor, sizeof t.border_color);
  // Read as the integer the app wrote: an unknown value is refused, never loaded as the enum.
  unsigned mip_filter = 0;
  static_assert(sizeof mip_filter == sizeof td->mipmapFilterMode);
  std::memcpy(&mip_filter, &td->mipmapFilterMode, sizeof mip_filter);
  if (mip_filter != CU_TR_FILTER_MODE_POINT && mip_filter != CU_TR_FILTER_MODE_LINEAR) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // The level of detail's bias and clamps; NaN or infinite settings are refused.
  if (!std::isfinite(td->mipmapLevelBias) || !std::isfinite(td->minMipmapLevelClamp) ||
      !std::isfinite(td->maxMipmapLevelClamp)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  t.mip_linear = mip_filter == CU_TR_FILTER_MODE_LINEAR;
  t.lod_bias = td->mipmapLevelBias;
  t.min_lod = td->minMipmapLevelClamp;
  t.max_lod = td->maxMipmapLevelClamp;
  // Filtering interpolates floats: integer texels read as integers cannot be filtered, and
  // fetches from linear memory are never filtered.
  const bool integer_format =
      t.texels.format != ptx::TexelFormat::kF16 && t.texels.format != ptx::TexelFormat::kF32;
  if (t.linear_filter &&
      ((integer_format && t.read_as_integer) || t.shape == ptx::ResourceShape::kLinear)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  o->texture_desc = *td;
  if (v) o->view = *v;
  return create_object(std::move(o), out);
}

CUresult SimGpu::cuTexObjectDestroy(CUtexObject h) { return destroy_object(h, false); }

CUresult SimGpu::cuTexObjectGetResourceDesc(CUDA_RESOURCE_DESC* out, CUtexObject h) {
  return object_field(h, false, &SimTexObject::resource, out);
}

CUresult SimGpu::cuTexObjectGetTextureDesc(CUDA_TEXTURE_DESC* out, CUtexObject h) {
  return object_field(h, false, &SimTexObject::texture_desc, out);
}

CUresult SimGpu::cuTexObjectGetResourceViewDesc(CUDA_RESOURCE_VIEW_DESC* out, CUtexObject h) {
  return object_field(h, false, &SimTexObject::view, out);
}

CUresult SimGpu::cuSurfObjectCreate(CUsurfObject* out, const CUDA_RESOURCE_DESC* r) {
  if (!out || !r) return CUDA_ERROR_INVALID_VALUE;
  auto o = std::make_shared<SimTexObject>();
  o->surface = true;
  if (CUresult e = resource_view(*r, true, o.get())) return e;
  return create_object(std::move(o), out);
}

CUresult SimGpu::cuSurfObjectDestroy(CUsurfObject h) { return destroy_object(h, true); }

CUresult SimGpu::cuSurfObjectGetResourceDesc(CUDA_RESOURCE_DESC* out, CUsurfObject h) {
  return object_field(h, true, &SimTexObject::resource, out);
}

}  // namespace cuwire::server::sim
