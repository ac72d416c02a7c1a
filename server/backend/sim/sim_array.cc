// CUDA arrays: creation with the driver's descriptor rules and limits, storage charged to the
// device, the 1D array copies, and the array side of 2D/3D copies.

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "protocol/array_format.h"
#include "server/backend/sim/sim_gpu.h"

namespace cuwire::server::sim {
namespace {

constexpr size_t kChargeAlign = 256;

constexpr unsigned kKnownArrayFlags = CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_SURFACE_LDST |
                                      CUDA_ARRAY3D_CUBEMAP | CUDA_ARRAY3D_TEXTURE_GATHER |
                                      CUDA_ARRAY3D_DEPTH_TEXTURE | CUDA_ARRAY3D_COLOR_ATTACHMENT;

bool add_within(size_t a, size_t b, size_t limit) {
  size_t sum;
  return !__builtin_add_overflow(a, b, &sum) && sum <= limit;
}

}  // namespace

CUresult SimGpu::array_of(CUarray h, std::shared_ptr<SimArray>* out) {
  if (!h) return CUDA_ERROR_INVALID_VALUE;
  std::shared_lock lock(mu_);
  auto it = arrays_.find(reinterpret_cast<SimArray*>(h));
  if (it == arrays_.end()) return CUDA_ERROR_INVALID_HANDLE;
  *out = it->second;
  return CUDA_SUCCESS;
}

CUresult SimGpu::check_array(const CUDA_ARRAY3D_DESCRIPTOR& d, int device, bool mipmapped,
                             size_t* elem) {
  if (d.Flags & (CUDA_ARRAY3D_SPARSE | CUDA_ARRAY3D_DEFERRED_MAPPING)) {
    return CUDA_ERROR_NOT_SUPPORTED;  // no virtual memory management here
  }
  if (d.Flags & ~kKnownArrayFlags) return CUDA_ERROR_INVALID_VALUE;
  *elem = array_element_bytes(d.Format, d.NumChannels);
  if (*elem == 0 || d.Width == 0) return CUDA_ERROR_INVALID_VALUE;
  const bool layered = d.Flags & CUDA_ARRAY3D_LAYERED;
  const bool cube = d.Flags & CUDA_ARRAY3D_CUBEMAP;
  auto attr = [&](CUdevice_attribute a) {
    int v = 0;
    device_attribute(a, device, &v);
    return static_cast<size_t>(v);
  };
  // Shape rules and limits as cuArray3DCreate documents them.
  bool ok;
  if (cube) {
    ok = d.Width == d.Height && (layered ? d.Depth != 0 && d.Depth % 6 == 0 : d.Depth == 6) &&
         d.Width <= attr(layered ? CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_WIDTH
                                 : CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_WIDTH) &&
         (!layered ||
          d.Depth / 6 <= attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_LAYERS));
  } else if (layered) {
    ok = d.Depth != 0 &&
         (d.Height == 0
              ? d.Width <= attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_WIDTH) &&
                    d.Depth <= attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_LAYERS)
              : d.Width <= attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_WIDTH) &&
                    d.Height <= attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_HEIGHT) &&
                    d.Depth <= attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_LAYERS));
  } else if (d.Depth != 0) {
    ok = d.Height != 0 && d.Width <= attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH) &&
         d.Height <= attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT) &&
         d.Depth <= attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH);
  } else if (d.Height != 0) {
    ok = d.Width <= attr(mipmapped ? CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_MIPMAPPED_WIDTH
                                   : CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_WIDTH) &&
         d.Height <= attr(mipmapped ? CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_MIPMAPPED_HEIGHT
                                    : CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_HEIGHT);
  } else {
    ok = d.Width <= attr(mipmapped ? CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_MIPMAPPED_WIDTH
                                   : CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH);
  }
  if (!ok) return CUDA_ERROR_INVALID_VALUE;
  if ((d.Flags & CUDA_ARRAY3D_TEXTURE_GATHER) && (d.Height == 0 || d.Depth != 0 || layered)) {
    return CUDA_ERROR_INVALID_VALUE;  // gather is for 2D arrays only
  }
  return CUDA_SUCCESS;
}

CUresult SimGpu::new_storage(size_t bytes, Context& ctx, std::shared_ptr<Allocation>* out) {
  size_t charged = (bytes + kChargeAlign - 1) / kChargeAlign * kChargeAlign;
  auto storage = std::make_shared<Allocation>();
  storage->size = bytes;
  storage->charged = charged;
  storage->device = ctx.device;
  storage->ctx_id = ctx.id;
  storage->ctx = reinterpret_cast<CUcontext>(&ctx);
  {
    std::unique_lock lock(mem_mu_);
    Device& dev = devices_[ctx.device];
    if (charged > dev.total_bytes - dev.used_bytes) return CUDA_ERROR_OUT_OF_MEMORY;
    storage->bytes = static_cast<uint8_t*>(std::calloc(bytes, 1));
    if (!storage->bytes) return CUDA_ERROR_OUT_OF_MEMORY;
    storage->buffer_id = next_buffer_id_++;
    dev.used_bytes += charged;
  }
  *out = std::move(storage);
  return CUDA_SUCCESS;
}

void SimGpu::uncharge_storage(const Allocation& storage) {
  std::unique_lock lock(mem_mu_);
  devices_[storage.device].used_bytes -= storage.charged;
}

namespace {

// An array of checked descriptor `d`, its size worked out; its storage and offset are the
// caller's to give.
std::shared_ptr<SimArray> array_shape(const CUDA_ARRAY3D_DESCRIPTOR& d, size_t elem, Context& ctx) {
  auto a = std::make_shared<SimArray>();
  a->desc = d;
  a->elem = elem;
  a->row_bytes = d.Width * elem;
  a->rows = d.Height ? d.Height : 1;
  a->slices = d.Depth ? d.Depth : 1;
  a->size = a->row_bytes * a->rows * a->slices;  // bounded by check_array's limits
  a->ctx = &ctx;
  return a;
}

}  // namespace

CUresult SimGpu::create_array(const CUDA_ARRAY3D_DESCRIPTOR& d, CUarray* out) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  CtxPtr ctx;
  if (CUresult e = current(&ctx)) return e;
  size_t elem = 0;
  if (CUresult e = check_array(d, ctx->device, false, &elem)) return e;
  std::shared_ptr<SimArray> a = array_shape(d, elem, *ctx);
  if (CUresult e = new_storage(a->size, *ctx, &a->storage)) return e;
  std::unique_lock lock(mu_);
  if (!ctx->alive) {
    uncharge_storage(*a->storage);
    return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  }
  SimArray* key = a.get();
  ctx->arrays.insert(key);
  arrays_.emplace(key, std::move(a));
  *out = reinterpret_cast<CUarray>(key);
  return CUDA_SUCCESS;
}

void SimGpu::destroy_arrays(Context& ctx) {
  std::vector<std::shared_ptr<SimArray>> gone;
  {
    std::unique_lock lock(mu_);
    for (SimArray* a : ctx.arrays) {
      auto it = arrays_.find(a);
      if (it == arrays_.end()) continue;
      gone.push_back(std::move(it->second));
      arrays_.erase(it);
    }
    ctx.arrays.clear();
    for (SimMipmap* m : ctx.mipmaps) {
      auto it = mipmaps_.find(m);
      if (it == mipmaps_.end()) continue;
      for (auto& level : it->second->levels) arrays_.erase(level.get());
      gone.push_back(it->second->levels.front());  // their storage, charged once
      mipmaps_.erase(it);
    }
    ctx.mipmaps.clear();
  }
  std::unique_lock lock(mem_mu_);
  for (auto& a : gone) devices_[a->storage->device].used_bytes -= a->storage->charged;
}

// ---------------------------------------------------------------------------------------------
// Mipmapped arrays

CUresult SimGpu::mipmap_of(CUmipmappedArray h, std::shared_ptr<SimMipmap>* out) {
  if (!h) return CUDA_ERROR_INVALID_VALUE;
  std::shared_lock lock(mu_);
  auto it = mipmaps_.find(reinterpret_cast<SimMipmap*>(h));
  if (it == mipmaps_.end()) return CUDA_ERROR_INVALID_HANDLE;
  *out = it->second;
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuMipmappedArrayCreate(CUmipmappedArray* out, const CUDA_ARRAY3D_DESCRIPTOR* d,
                                        unsigned int num_levels) {
  if (!out || !d) return CUDA_ERROR_INVALID_VALUE;
  CtxPtr ctx;
  if (CUresult e = current(&ctx)) return e;
  size_t elem = 0;
  if (CUresult e = check_array(*d, ctx->device, true, &elem)) return e;
  num_levels = mipmap_levels(*d, num_levels);
  // One block holds every level, level 0 first, as one allocation is charged for it.
  auto m = std::make_shared<SimMipmap>();
  m->desc = *d;
  m->ctx = ctx.get();
  size_t total = 0;
  for (unsigned i = 0; i < num_levels; ++i) {
    auto level = array_shape(mipmap_level(*d, i), elem, *ctx);
    level->offset = total;
    level->mipmap = m.get();
    total += level->size;  // bounded: each level is at most level 0, at most 32 levels
    m->levels.push_back(std::move(level));
  }
  std::shared_ptr<Allocation> storage;
  if (CUresult e = new_storage(total, *ctx, &storage)) return e;
  for (auto& level : m->levels) level->storage = storage;
  std::unique_lock lock(mu_);
  if (!ctx->alive) {
    uncharge_storage(*storage);
    return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  }
  for (auto& level : m->levels) arrays_.emplace(level.get(), level);
  SimMipmap* key = m.get();
  ctx->mipmaps.insert(key);
  mipmaps_.emplace(key, std::move(m));
  *out = reinterpret_cast<CUmipmappedArray>(key);
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuMipmappedArrayGetLevel(CUarray* out, CUmipmappedArray h, unsigned int level) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<SimMipmap> m;
  if (CUresult e = mipmap_of(h, &m)) return e;
  if (level >= m->levels.size()) return CUDA_ERROR_INVALID_VALUE;
  *out = reinterpret_cast<CUarray>(m->levels[level].get());
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuMipmappedArrayDestroy(CUmipmappedArray h) {
  if (!h) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<SimMipmap> gone;
  {
    std::unique_lock lock(mu_);
    auto it = mipmaps_.find(reinterpret_cast<SimMipmap*>(h));
    if (it == mipmaps_.end()) return CUDA_ERROR_INVALID_HANDLE;
    gone = std::move(it->second);
    mipmaps_.erase(it);
    gone->ctx->mipmaps.erase(gone.get());
    for (auto& level : gone->levels) arrays_.erase(level.get());
  }
  uncharge_storage(*gone->levels.front()->storage);
  // Texture objects and queued copies still holding the storage finish with it.
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuArray3DCreate_v2(CUarray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR* d) {
  if (!d) return CUDA_ERROR_INVALID_VALUE;
  return create_array(*d, pHandle);
}

CUresult SimGpu::cuArrayCreate_v2(CUarray* pHandle, const CUDA_ARRAY_DESCRIPTOR* d) {
  if (!d) return CUDA_ERROR_INVALID_VALUE;
  CUDA_ARRAY3D_DESCRIPTOR d3{};
  d3.Width = d->Width;
  d3.Height = d->Height;
  d3.Format = d->Format;
  d3.NumChannels = d->NumChannels;
  return create_array(d3, pHandle);
}

CUresult SimGpu::cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR* out, CUarray h) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<SimArray> a;
  if (CUresult e = array_of(h, &a)) return e;
  *out = a->desc;
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR* out, CUarray h) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<SimArray> a;
  if (CUresult e = array_of(h, &a)) return e;
  out->Width = a->desc.Width;
  out->Height = a->desc.Height;
  out->Format = a->desc.Format;
  out->NumChannels = a->desc.NumChannels;
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuArrayDestroy(CUarray h) {
  if (!h) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<SimArray> gone;
  {
    std::unique_lock lock(mu_);
    auto it = arrays_.find(reinterpret_cast<SimArray*>(h));
    if (it == arrays_.end()) return CUDA_ERROR_INVALID_HANDLE;
    // A mipmap's level goes with its mipmap (cuMipmappedArrayDestroy), not on its own.
    if (it->second->mipmap) return CUDA_ERROR_INVALID_VALUE;
    gone = std::move(it->second);
    arrays_.erase(it);
    gone->ctx->arrays.erase(gone.get());
  }
  uncharge_storage(*gone->storage);
  // Queued copies still holding the storage finish with it; its bytes go with the last one.
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// Copies

CUresult SimGpu::array_side(CUarray h, size_t x, size_t y, size_t z, size_t width, size_t rows,
                            size_t depth, CopySide* out) {
  std::shared_ptr<SimArray> a;
  if (CUresult e = array_of(h, &a)) return e;
  if (!add_within(x, width, a->row_bytes) || !add_within(y, rows, a->rows) ||
      !add_within(z, depth, a->slices)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  out->pitch = a->row_bytes;
  out->slice = a->row_bytes * a->rows;
  out->p = a->texels() + z * out->slice + y * out->pitch + x;
  out->extent = (depth - 1) * out->slice + (rows - 1) * out->pitch + width;
  out->host = false;
  out->keep = a->storage;
  return CUDA_SUCCESS;
}

CUresult SimGpu::array_linear_side(CUarray h, size_t offset, size_t n, CopySide* out) {
  std::shared_ptr<SimArray> a;
  if (CUresult e = array_of(h, &a)) return e;
  if (!add_within(offset, n, a->size)) return CUDA_ERROR_INVALID_VALUE;
  out->p = a->texels() + offset;
  out->pitch = n;
  out->slice = n;
  out->extent = n;
  out->host = false;
  out->keep = a->storage;
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuMemcpyDtoA_v2(CUarray dst, size_t off, CUdeviceptr src, size_t n) {
  if (n == 0) return CUDA_SUCCESS;
  CopySide d, s;
  if (CUresult e = array_linear_side(dst, off, n, &d)) return e;
  if (CUresult e = copy_linear_side(src, n, &s)) return e;
  s.pitch = n;
  return enqueue_copy(std::move(d), std::move(s), n, 1, 1, nullptr, false);
}

CUresult SimGpu::cuMemcpyAtoD_v2(CUdeviceptr dst, CUarray src, size_t off, size_t n) {
  if (n == 0) return CUDA_SUCCESS;
  CopySide d, s;
  if (CUresult e = copy_linear_side(dst, n, &d)) return e;
  if (CUresult e = array_linear_side(src, off, n, &s)) return e;
  d.pitch = n;
  return enqueue_copy(std::move(d), std::move(s), n, 1, 1, nullptr, false);
}

CUresult SimGpu::cuMemcpyAtoA_v2(CUarray dst, size_t doff, CUarray src, size_t soff, size_t n) {
  if (n == 0) return CUDA_SUCCESS;
  CopySide d, s;
  if (CUresult e = array_linear_side(dst, doff, n, &d)) return e;
  if (CUresult e = array_linear_side(src, soff, n, &s)) return e;
  return enqueue_copy(std::move(d), std::move(s), n, 1, 1, nullptr, false);
}

CUresult SimGpu::htoa(CUarray dst, size_t off, const void* src, size_t n, CUstream s, bool async) {
  return host_copy(src, n, false, s, async,
                   [&](CopySide* d) { return array_linear_side(dst, off, n, d); });
}

CUresult SimGpu::atoh(void* dst, CUarray src, size_t off, size_t n, CUstream s, bool async) {
  return host_copy(dst, n, true, s, async,
                   [&](CopySide* d) { return array_linear_side(src, off, n, d); });
}

CUresult SimGpu::cuMemcpyHtoA_v2(CUarray dst, size_t off, const void* src, size_t n) {
  return htoa(dst, off, src, n, nullptr, false);
}
CUresult SimGpu::cuMemcpyAtoH_v2(void* dst, CUarray src, size_t off, size_t n) {
  return atoh(dst, src, off, n, nullptr, false);
}
CUresult SimGpu::cuMemcpyHtoAAsync_v2(CUarray dst, size_t off, const void* src, size_t n,
                                      CUstream s) {
  return htoa(dst, off, src, n, s, true);
}
CUresult SimGpu::cuMemcpyAtoHAsync_v2(void* dst, CUarray src, size_t off, size_t n, CUstream s) {
  return atoh(dst, src, off, n, s, true);
}

}  // namespace cuwire::server::sim
