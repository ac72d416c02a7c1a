// Memory: the simulated address space (device windows, host aliases), allocation with a
// per-device capacity, copies and memsets (1D/2D/3D, sync and async), pinned host memory,
// pointer attributes (stream-ordered pools: sim_memory_pools.cc).

#include <spdlog/spdlog.h>

#include <cstdlib>
#include <cstring>
#include <new>

#include "protocol/copy_descriptors.h"
#include "server/backend/sim/sim_gpu.h"

namespace cuwire::server::sim {
namespace {

constexpr size_t kAllocAlign = 256;
constexpr size_t kPitchAlign = 512;
constexpr size_t kHostPage = 4096;
constexpr CUdeviceptr kDeviceWindowSize = 0x0000'0100'0000'0000ull;
constexpr CUdeviceptr kHostAliasEnd = 0x0000'6f00'0000'0000ull;

size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

bool mul_add(size_t a, size_t b, size_t c, size_t* out) {
  size_t m;
  return !__builtin_mul_overflow(a, b, &m) && !__builtin_add_overflow(m, c, out);
}

// Bytes a strided region spans from its first byte: rows of `width` bytes `pitch` apart,
// `depth` slices of `height` rows each.
bool region_extent(size_t width, size_t rows, size_t depth, size_t pitch, size_t height,
                   size_t* out) {
  size_t slice, last;
  if (__builtin_mul_overflow(pitch, height, &slice)) return false;
  if (!mul_add(depth - 1, slice, 0, &last)) return false;
  if (!mul_add(rows - 1, pitch, last, &last)) return false;
  return !__builtin_add_overflow(last, width, out);
}

void strided_copy(const CopySide& dst, const CopySide& src, size_t width, size_t rows,
                  size_t depth) {
  for (size_t z = 0; z < depth; ++z)
    for (size_t y = 0; y < rows; ++y)
      std::memmove(dst.p + z * dst.slice + y * dst.pitch, src.p + z * src.slice + y * src.pitch,
                   width);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Address space

std::shared_ptr<Allocation> SimGpu::find(CUdeviceptr p, size_t n) {
  std::shared_lock lock(mem_mu_);
  auto it = allocations_.upper_bound(p);
  if (it == allocations_.begin()) return nullptr;
  --it;
  const Allocation& a = *it->second;
  size_t off = p - a.base;
  if (off >= a.size || n > a.size - off) return nullptr;
  return it->second;
}

std::shared_ptr<Allocation> SimGpu::find_host(const void* p, size_t n) {
  auto addr = reinterpret_cast<uintptr_t>(p);
  std::shared_lock lock(mem_mu_);
  auto it = host_ranges_.upper_bound(addr);
  if (it == host_ranges_.begin()) return nullptr;
  --it;
  const Allocation& a = *it->second;
  size_t off = addr - it->first;
  if (off >= a.size || n > a.size - off) return nullptr;
  return it->second;
}

CUresult SimGpu::allocate(Context& ctx, size_t bytes, MemKind kind, Pool* pool, CUdeviceptr* out,
                          size_t align) {
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (bytes > (size_t{1} << 48)) return CUDA_ERROR_OUT_OF_MEMORY;
  size_t charged = round_up(bytes, kAllocAlign);
  auto a = std::make_shared<Allocation>();
  a->size = bytes;
  a->charged = charged;
  a->kind = kind;
  a->device = ctx.device;
  a->ctx_id = ctx.id;
  a->ctx = reinterpret_cast<CUcontext>(&ctx);
  a->pool = pool;
  a->pool_serial = pool ? pool->serial : 0;
  a->session = ctx.session.load();
  std::unique_lock lock(mem_mu_);
  Device& d = devices_[ctx.device];
  if (align > kAllocAlign) d.next_address = round_up(d.next_address, align);
  CUdeviceptr window_end =
      (d.next_address & ~(kDeviceWindowSize - 1)) + kDeviceWindowSize;  // windows are aligned
  if (charged > d.total_bytes - d.used_bytes || charged > window_end - d.next_address)
    return CUDA_ERROR_OUT_OF_MEMORY;
  // A pool made with a maximum size (CUmemPoolProps::maxSize) holds no more than that.
  if (pool && pool->props.maxSize != 0 &&
      (pool->used > pool->props.maxSize || charged > pool->props.maxSize - pool->used)) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  // calloc leaves large blocks to lazily zeroed pages, so capacity is only paid when touched.
  a->bytes = static_cast<uint8_t*>(std::calloc(bytes, 1));
  if (!a->bytes) return CUDA_ERROR_OUT_OF_MEMORY;
  a->base = d.next_address;
  a->buffer_id = next_buffer_id_++;
  d.next_address += charged;
  d.used_bytes += charged;
  if (pool) pool->take(charged);
  *out = a->base;
  allocations_.emplace(a->base, std::move(a));
  return CUDA_SUCCESS;
}

void SimGpu::revive(const std::shared_ptr<Allocation>& a) {
  std::shared_lock plock(mu_);  // the pools
  std::unique_lock lock(mem_mu_);
  if (allocations_.count(a->base)) return;  // not freed since
  Device& d = devices_[a->device];
  d.used_bytes += a->charged;
  if (a->pool) {
    const bool live = pools_.count(a->pool) || d.default_pool.get() == a->pool;
    if (!live || a->pool->serial != a->pool_serial) a->pool = nullptr;  // its pool is gone
  }
  if (a->pool) a->pool->take(a->charged);
  a->free_queued = false;
  allocations_.emplace(a->base, a);
}

CUresult SimGpu::free_allocation(CUdeviceptr p, bool from_pool_free) {
  std::shared_ptr<Allocation> gone;
  {
    std::unique_lock lock(mem_mu_);
    auto it = allocations_.find(p);
    if (it == allocations_.end() || it->second->kind == MemKind::kHost)
      return CUDA_ERROR_INVALID_VALUE;
    if (!from_pool_free && it->second->free_queued) return CUDA_ERROR_INVALID_VALUE;
    gone = std::move(it->second);
    allocations_.erase(it);
    devices_[gone->device].used_bytes -= gone->charged;
    if (gone->pool) gone->pool->give(gone->charged);
  }
  // Queued copies and running kernels may still hold `gone`; its bytes go with the last one.
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// Linear device memory

CUresult SimGpu::cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytes) {
  if (!dptr) return CUDA_ERROR_INVALID_VALUE;
  CtxPtr ctx;
  if (CUresult e = current(&ctx)) return e;
  return allocate(*ctx, bytes, MemKind::kDevice, nullptr, dptr);
}

CUresult SimGpu::cuGraphConditionalHandleCreate(CUgraphConditionalHandle* out, CUgraph graph,
                                                CUcontext ctx, unsigned value, unsigned flags) {
  if (!out || graph || ctx || (flags & ~unsigned{CU_GRAPH_COND_ASSIGN_DEFAULT})) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  CUdeviceptr cell = 0;
  if (CUresult e = cuMemAlloc_v2(&cell, sizeof(uint32_t))) return e;
  if (CUresult e = cuMemsetD32_v2(cell, value, 1)) {
    cuMemFree_v2(cell);
    return e;
  }
  *out = cell;
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height,
                                    unsigned elem) {
  if (!dptr || !pitch) return CUDA_ERROR_INVALID_VALUE;
  if (elem != 4 && elem != 8 && elem != 16) return CUDA_ERROR_INVALID_VALUE;
  if (width == 0 || height == 0) return CUDA_ERROR_INVALID_VALUE;
  CtxPtr ctx;
  if (CUresult e = current(&ctx)) return e;
  if (width > (size_t{1} << 40)) return CUDA_ERROR_INVALID_VALUE;
  // Rows start on the device's pitch alignment so each row is a whole number of transactions.
  size_t p = round_up(width, kPitchAlign), bytes;
  if (__builtin_mul_overflow(p, height, &bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
  if (CUresult e = allocate(*ctx, bytes, MemKind::kDevice, nullptr, dptr)) return e;
  *pitch = p;
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuMemAllocManaged(CUdeviceptr* dptr, size_t bytes, unsigned flags) {
  if (!dptr) return CUDA_ERROR_INVALID_VALUE;
  if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST) return CUDA_ERROR_INVALID_VALUE;
  CtxPtr ctx;
  if (CUresult e = current(&ctx)) return e;
  // Managed memory starts on a host page: a client maps it at the same address (and a GPU
  // migrates it by pages), whatever smaller allocations came before it.
  return allocate(*ctx, bytes, MemKind::kManaged, nullptr, dptr, kHostPage);
}

CUresult SimGpu::cuMemFree_v2(CUdeviceptr p) {
  CtxPtr ctx;
  if (CUresult e = current(&ctx, true)) return e;
  if (p == 0) return CUDA_SUCCESS;
  // As the driver's, the free waits for the context's queued work: launches and copies queued
  // before it may still use the memory (thrust frees its temporary storage right after
  // queueing the kernels that use it).
  sync_context(*ctx);
  switch (free_of(p, *ctx)) {
    case FreeOf::kImport:
      // An allocation imported from another process's pool: the free ends the import (false:
      // ended meanwhile by another thread of the context, as a second free).
      if (!release_pool_import(p, ctx->id)) return CUDA_ERROR_INVALID_VALUE;
      return ctx->sticky.load();
    case FreeOf::kAnother:
      // Another session's memory is never this one's to free, whatever it imported of it.
      return CUDA_ERROR_INVALID_VALUE;
    case FreeOf::kOwn:
      break;
  }
  if (CUresult e = free_allocation(p, false)) return e;
  // A faulted context still gives its memory back (so a server can reclaim a crashed
  // client's allocations), but the call reports the fault as the driver does.
  return ctx->sticky.load();
}

CUresult SimGpu::cuMemGetInfo_v2(size_t* free, size_t* total) {
  if (!free || !total) return CUDA_ERROR_INVALID_VALUE;
  CtxPtr ctx;
  if (CUresult e = current(&ctx)) return e;
  std::shared_lock lock(mem_mu_);
  const Device& d = devices_[ctx->device];
  *total = d.total_bytes;
  *free = d.total_bytes - d.used_bytes;
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuMemGetAddressRange_v2(CUdeviceptr* base, size_t* size, CUdeviceptr p) {
  CtxPtr ctx;
  if (CUresult e = current(&ctx)) return e;
  auto a = find(p, 0);
  if (!a) return CUDA_ERROR_NOT_FOUND;
  if (base) *base = a->base;
  if (size) *size = a->size;
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// Interprocess handles. A handle names an allocation by its base and a nonce drawn when it was
// first exported: after the allocation is freed no live allocation has that base (addresses
// are never handed out twice), so a stale handle opens nothing. Which sessions may open a
// handle is the server's to decide (server/calls/ipc.cc).

namespace {
constexpr char kIpcMagic[8] = {'c', 'u', 'w', 'i', 'p', 'c', '1', 0};
struct IpcMemNames {
  uint64_t base;
  uint64_t nonce;
  uint64_t size;
  uint64_t device;
};

// Ends one of the opens context ctx_id holds of a (cuIpcOpenMemHandle, cuMemPoolImportPointer);
// false when it holds none. The caller holds mem_mu_.
bool drop_open(Allocation& a, uint64_t ctx_id) {
  auto opened = a.ipc_contexts.find(ctx_id);
  if (opened == a.ipc_contexts.end()) return false;
  if (--opened->second == 0) a.ipc_contexts.erase(opened);
  return true;
}
}  // namespace

bool SimGpu::reachable_by(const Allocation& a, const std::vector<uint64_t>& contexts, int device,
                          uint64_t session) {
  std::shared_lock lock(mem_mu_);
  for (uint64_t c : contexts) {
    if (a.ipc_contexts.count(c)) return true;
  }
  // A pool's grant is for one process's contexts on the device: here, one session's, which
  // made the allocation (a live allocation's pool is live: a->pool is cleared with its pool).
  // Untagged (session 0) is no one's.
  return session != 0 && a.session == session && a.pool && a.pool->session == session &&
         a.pool->peer_access.count(device);
}

std::vector<SimAddressRange> SimGpu::address_ranges() {
  std::shared_lock lock(mem_mu_);
  std::vector<SimAddressRange> out;
  out.reserve(allocations_.size());
  for (const auto& [base, a] : allocations_) {
    out.push_back({base, a->size, a->kind == MemKind::kHost});
  }
  return out;
}

uint64_t SimGpu::used_bytes(int device) {
  std::shared_lock lock(mem_mu_);
  return device >= 0 && static_cast<size_t>(device) < devices_.size() ? devices_[device].used_bytes
                                                                      : 0;
}

void SimGpu::set_pool_session(CUmemoryPool h, uint64_t session) {
  std::shared_lock lock(mu_);  // keeps the pool from going meanwhile
  auto* p = reinterpret_cast<Pool*>(h);
  if (!pools_.count(p)) return;  // a device's default pool is no session's
  std::unique_lock mem(mem_mu_);
  p->session = session;
}

CUresult SimGpu::cuIpcGetMemHandle(CUipcMemHandle* out, CUdeviceptr p) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  CtxPtr ctx;
  if (CUresult e = current(&ctx)) return e;
  IpcMemNames h{};
  {
    std::unique_lock lock(mem_mu_);
    auto it = allocations_.find(p);
    if (it == allocations_.end() || it->second->kind != MemKind::kDevice)
      return CUDA_ERROR_INVALID_VALUE;
    Allocation& a = *it->second;
    if (a.ipc_nonce == 0) a.ipc_nonce = draw_nonce();
    h.base = a.base;
    h.nonce = a.ipc_nonce;
    h.size = a.size;
    h.device = static_cast<uint64_t>(a.device);
  }
  pack_ipc_handle(out, kIpcMagic, h);
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuIpcOpenMemHandle_v2(CUdeviceptr* out, CUipcMemHandle handle, unsigned flags) {
  if (!out || (flags & ~unsigned{CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS}))
    return CUDA_ERROR_INVALID_VALUE;
  CtxPtr ctx;
  if (CUresult e = current(&ctx)) return e;
  IpcMemNames h;
  if (!unpack_ipc_handle(handle, kIpcMagic, &h)) return CUDA_ERROR_INVALID_VALUE;
  std::unique_lock lock(mem_mu_);
  auto it = allocations_.find(h.base);
  if (it == allocations_.end() || it->second->ipc_nonce == 0 || it->second->ipc_nonce != h.nonce) {
    return CUDA_ERROR_INVALID_VALUE;  // freed since, or never exported
  }
  Allocation& a = *it->second;
  // As the driver refuses a handle in the process that exported it.
  if (a.ctx_id == ctx->id) return CUDA_ERROR_INVALID_CONTEXT;
  // Opened again in this context: the same pointer, one more close to come, as the driver does.
  ++a.ipc_contexts[ctx->id];
  *out = a.base;
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuIpcCloseMemHandle(CUdeviceptr p) {
  CtxPtr ctx;
  if (CUresult e = current(&ctx)) return e;
  sync_context(*ctx);  // work queued before the close may still use the memory
  std::unique_lock lock(mem_mu_);
  auto it = allocations_.find(p);
  if (it == allocations_.end()) return CUDA_SUCCESS;  // the exporter freed it: nothing to close
  return drop_open(*it->second, ctx->id) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

bool SimGpu::release_pool_import(CUdeviceptr p, uint64_t ctx_id) {
  std::unique_lock lock(mem_mu_);
  auto it = allocations_.find(p);
  return it != allocations_.end() && it->second->kind == MemKind::kPool &&
         drop_open(*it->second, ctx_id);
}

SimGpu::FreeOf SimGpu::free_of(CUdeviceptr p, const Context& ctx) {
  const uint64_t session = ctx.session.load();
  std::shared_lock lock(mem_mu_);
  auto it = allocations_.find(p);
  if (it == allocations_.end()) return FreeOf::kOwn;
  const Allocation& a = *it->second;
  if (a.kind == MemKind::kPool && a.ipc_contexts.count(ctx.id)) return FreeOf::kImport;
  if (session != 0 && a.session != 0 && a.session != session) return FreeOf::kAnother;
  return FreeOf::kOwn;
}

// ---------------------------------------------------------------------------------------------
// Host memory

namespace {
// Pinned host memory of ctx at `bytes`, allocated here (`owned`) or registered, yet without
// its device alias and buffer id. Portable memory reaches the contexts of ctx's session alone.
std::shared_ptr<Allocation> host_allocation(Context& ctx, uint8_t* bytes, bool owned, size_t size,
                                            unsigned flags) {
  auto a = std::make_shared<Allocation>();
  a->bytes = bytes;
  a->owned = owned;
  a->size = size;
  a->kind = MemKind::kHost;
  a->device = ctx.device;
  a->ctx_id = ctx.id;
  a->ctx = reinterpret_cast<CUcontext>(&ctx);
  a->host_flags = flags;
  a->session = ctx.session.load();
  return a;
}
}  // namespace

CUresult SimGpu::host_alloc(void** pp, size_t bytes, unsigned flags) {
  if (!pp) return CUDA_ERROR_INVALID_VALUE;
  constexpr unsigned kKnown =
      CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED;
  if (flags & ~kKnown) return CUDA_ERROR_INVALID_VALUE;
  if (bytes == 0 || bytes > (size_t{1} << 40)) return CUDA_ERROR_INVALID_VALUE;
  CtxPtr ctx;
  if (CUresult e = current(&ctx)) return e;
  size_t span = round_up(bytes, kHostPage);
  auto* pinned = static_cast<uint8_t*>(std::aligned_alloc(kHostPage, span));
  if (!pinned) return CUDA_ERROR_OUT_OF_MEMORY;
  std::memset(pinned, 0, span);
  std::shared_ptr<Allocation> a = host_allocation(*ctx, pinned, true, bytes, flags);
  std::unique_lock lock(mem_mu_);
  if (span > kHostAliasEnd - next_host_alias_) return CUDA_ERROR_OUT_OF_MEMORY;
  a->base = next_host_alias_;
  next_host_alias_ += span;
  a->buffer_id = next_buffer_id_++;
  host_ranges_[reinterpret_cast<uintptr_t>(a->bytes)] = a;
  allocations_[a->base] = a;
  *pp = a->bytes;
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuMemAllocHost_v2(void** pp, size_t bytes) { return host_alloc(pp, bytes, 0); }

CUresult SimGpu::cuMemHostAlloc(void** pp, size_t bytes, unsigned flags) {
  return host_alloc(pp, bytes, flags);
}

CUresult SimGpu::cuMemFreeHost(void* p) {
  CtxPtr ctx;
  if (CUresult e = current(&ctx, true)) return e;
  std::unique_lock lock(mem_mu_);
  auto it = host_ranges_.find(reinterpret_cast<uintptr_t>(p));
  if (it == host_ranges_.end() || !it->second->owned) return CUDA_ERROR_INVALID_VALUE;
  allocations_.erase(it->second->base);
  host_ranges_.erase(it);
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuMemHostRegister_v2(void* p, size_t bytes, unsigned flags) {
  constexpr unsigned kKnown = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |
                              CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY;
  if (!p || bytes == 0 || (flags & ~kKnown)) return CUDA_ERROR_INVALID_VALUE;
  if (flags & CU_MEMHOSTREGISTER_IOMEMORY) return CUDA_ERROR_NOT_SUPPORTED;
  CtxPtr ctx;
  if (CUresult e = current(&ctx)) return e;
  auto addr = reinterpret_cast<uintptr_t>(p);
  if (bytes > UINTPTR_MAX - addr) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<Allocation> a =
      host_allocation(*ctx, static_cast<uint8_t*>(p), false, bytes, flags);
  std::unique_lock lock(mem_mu_);
  // Overlap with an existing range in either direction.
  auto next = host_ranges_.lower_bound(addr);
  if (next != host_ranges_.end() && next->first < addr + bytes)
    return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  if (next != host_ranges_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second->size > addr) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  }
  size_t span = round_up(bytes + (addr % kHostPage), kHostPage);
  if (span > kHostAliasEnd - next_host_alias_) return CUDA_ERROR_OUT_OF_MEMORY;
  // Keep the alias congruent with the host address modulo the page size.
  a->base = next_host_alias_ + addr % kHostPage;
  next_host_alias_ += span;
  a->buffer_id = next_buffer_id_++;
  host_ranges_[addr] = a;
  allocations_[a->base] = a;
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuMemHostUnregister(void* p) {
  CtxPtr ctx;
  if (CUresult e = current(&ctx, true)) return e;
  std::unique_lock lock(mem_mu_);
  auto it = host_ranges_.find(reinterpret_cast<uintptr_t>(p));
  if (it == host_ranges_.end() || it->second->owned) return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  allocations_.erase(it->second->base);
  host_ranges_.erase(it);
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuMemHostGetDevicePointer_v2(CUdeviceptr* dptr, void* p, unsigned flags) {
  if (!dptr || !p || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  CtxPtr ctx;
  if (CUresult e = current(&ctx)) return e;
  auto a = find_host(p, 0);
  if (!a) return CUDA_ERROR_INVALID_VALUE;
  *dptr = a->base + (static_cast<uint8_t*>(p) - a->bytes);
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// Copies

bool SimGpu::across_mappings(CUdeviceptr p, size_t n,
                             std::vector<std::pair<CUdeviceptr, size_t>>* out) {
  out->clear();
  CUdeviceptr end;
  if (n == 0 || __builtin_add_overflow(p, n, &end) || find(p, n)) return false;
  for (CUdeviceptr at = p; at < end;) {
    std::shared_ptr<Allocation> a = find(at, 1);
    if (!a || !a->keep) return false;  // a hole, or not a mapping
    const size_t piece = std::min<CUdeviceptr>(end, a->base + a->size) - at;
    out->emplace_back(at, piece);
    at += piece;
  }
  return out->size() > 1;
}

bool SimGpu::addressable_in_one_piece(CUdeviceptr p, size_t n) {
  std::vector<std::pair<CUdeviceptr, size_t>> pieces;
  return !across_mappings(p, n, &pieces);
}

uint8_t* SimGpu::managed_host_view(CUdeviceptr p, size_t n, std::shared_ptr<void>* keep) {
  auto a = find(p, n);
  if (!a || a->kind != MemKind::kManaged) return nullptr;
  uint8_t* host = a->bytes + (p - a->base);
  *keep = std::move(a);
  return host;
}

CUresult SimGpu::copy_linear_side(CUdeviceptr p, size_t n, CopySide* out) {
  out->extent = n;
  if (auto a = find(p, n)) {
    out->p = a->bytes + (p - a->base);
    out->keep = std::move(a);
    return CUDA_SUCCESS;
  }
  // Unified addressing: a registered or pinned host pointer is as good as its alias.
  if (auto a = find_host(reinterpret_cast<const void*>(p), n)) {
    out->p = reinterpret_cast<uint8_t*>(p);
    out->keep = std::move(a);
    return CUDA_SUCCESS;
  }
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult SimGpu::copy_side(CUmemorytype type, const void* host, CUdeviceptr dev, CUarray array,
                           size_t x, size_t y, size_t z, size_t pitch, size_t height, size_t width,
                           size_t rows, size_t depth, CopySide* out) {
  // An array has its own layout; the pitch and height of the description do not apply.
  if (type == CU_MEMORYTYPE_ARRAY) return array_side(array, x, y, z, width, rows, depth, out);
  if (rows > 1 || depth > 1) {
    if (pitch < width) return CUDA_ERROR_INVALID_VALUE;
  } else if (pitch == 0) {
    pitch = width;
  }
  if (depth > 1 && height < rows) return CUDA_ERROR_INVALID_VALUE;
  size_t origin, extent;
  size_t slice_bytes;
  if (__builtin_mul_overflow(pitch, height, &slice_bytes)) return CUDA_ERROR_INVALID_VALUE;
  if (!mul_add(y, pitch, x, &origin) || !mul_add(z, slice_bytes, origin, &origin))
    return CUDA_ERROR_INVALID_VALUE;
  if (!region_extent(width, rows, depth, pitch, height, &extent)) return CUDA_ERROR_INVALID_VALUE;
  out->pitch = pitch;
  out->slice = slice_bytes;
  out->extent = extent;
  switch (type) {
    case CU_MEMORYTYPE_HOST: {
      if (!host) return CUDA_ERROR_INVALID_VALUE;
      out->p = const_cast<uint8_t*>(static_cast<const uint8_t*>(host)) + origin;
      out->host = true;
      // Pinned memory is stable; anything else is the caller's and must be staged.
      if (auto a = find_host(out->p, extent)) out->keep = std::move(a);
      return CUDA_SUCCESS;
    }
    case CU_MEMORYTYPE_DEVICE:
    case CU_MEMORYTYPE_UNIFIED: {
      CUdeviceptr p;
      if (__builtin_add_overflow(dev, origin, &p)) return CUDA_ERROR_INVALID_VALUE;
      CopySide s;
      if (CUresult e = copy_linear_side(p, extent, &s)) return e;
      out->p = s.p;
      out->keep = std::move(s.keep);
      out->extent = extent;
      return CUDA_SUCCESS;
    }
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

namespace {
// A captured copy's node label.
std::string copy_label(size_t width, size_t rows, size_t depth) {
  std::string s = "memcpy " + std::to_string(width) + " bytes";
  if (rows > 1 || depth > 1) {
    s += " x " + std::to_string(rows) + " rows x " + std::to_string(depth) + " slices";
  }
  return s;
}
}  // namespace

CUresult SimGpu::enqueue_copy(CopySide dst, CopySide src, size_t width, size_t rows, size_t depth,
                              CUstream hstream, bool async) {
  CtxPtr ctx;
  if (CUresult e = current(&ctx)) return e;
  if (width == 0 || rows == 0 || depth == 0) return CUDA_SUCCESS;
  if (!async) {
    return run_sync(ctx, [&] {
      strided_copy(dst, src, width, rows, depth);
      return CUDA_SUCCESS;
    });
  }
  std::shared_ptr<Stream> s;
  CtxPtr sctx;
  if (CUresult e = stream_of(hstream, &sctx, &s)) return e;
  // A graph cannot replay a copy from or to the caller's memory (it is gone after this call).
  if ((src.host || dst.host) && capture_of(*s)) {
    invalidate_capture(*s);
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  // Pageable source bytes may change or vanish once the call returns (the server's bulk
  // buffer does): stage them now, as the driver does for pageable memory.
  std::shared_ptr<std::vector<uint8_t>> staged;
  if (src.host && !src.keep) {
    // Up to the size of one allocation (and of the call's bulk bytes): the host may lack it.
    try {
      staged = std::make_shared<std::vector<uint8_t>>(src.p, src.p + src.extent);
    } catch (const std::bad_alloc&) {
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    src.p = staged->data();
  }
  bool wait = dst.host && !dst.keep;  // pageable destination: the copy completes before return
  MarkerPtr m = submit(
      *sctx, *s,
      [dst, src, staged, width, rows, depth](CUresult sticky) {
        if (sticky == CUDA_SUCCESS) strided_copy(dst, src, width, rows, depth);
      },
      {}, NodeDesc(CU_GRAPH_NODE_TYPE_MEMCPY, [&] { return copy_label(width, rows, depth); }));
  if (wait) {
    m->wait();
    return sctx->sticky.load();
  }
  return CUDA_SUCCESS;
}

CUresult SimGpu::host_copy(const void* host, size_t n, bool to_host, CUstream s, bool async,
                           const std::function<CUresult(CopySide*)>& device_side) {
  if (n == 0) return CUDA_SUCCESS;
  if (!host) return CUDA_ERROR_INVALID_VALUE;
  CopySide d, h;
  if (CUresult e = device_side(&d)) return e;
  if (CUresult e = copy_side(CU_MEMORYTYPE_HOST, host, 0, nullptr, 0, 0, 0, n, 1, n, 1, 1, &h))
    return e;
  if (to_host) return enqueue_copy(std::move(h), std::move(d), n, 1, 1, s, async);
  return enqueue_copy(std::move(d), std::move(h), n, 1, 1, s, async);
}

CUresult SimGpu::htod(CUdeviceptr dst, const void* src, size_t n, CUstream s, bool async) {
  std::vector<std::pair<CUdeviceptr, size_t>> pieces;
  if (src && across_mappings(dst, n, &pieces)) {
    for (auto [at, len] : pieces) {
      if (CUresult e = htod(at, static_cast<const uint8_t*>(src) + (at - dst), len, s, async))
        return e;
    }
    return CUDA_SUCCESS;
  }
  return host_copy(src, n, false, s, async, [&](CopySide* d) {
    return copy_side(CU_MEMORYTYPE_DEVICE, nullptr, dst, nullptr, 0, 0, 0, n, 1, n, 1, 1, d);
  });
}

CUresult SimGpu::dtoh(void* dst, CUdeviceptr src, size_t n, CUstream s, bool async) {
  std::vector<std::pair<CUdeviceptr, size_t>> pieces;
  if (dst && across_mappings(src, n, &pieces)) {
    for (auto [at, len] : pieces) {
      if (CUresult e = dtoh(static_cast<uint8_t*>(dst) + (at - src), at, len, s, async)) return e;
    }
    return CUDA_SUCCESS;
  }
  return host_copy(dst, n, true, s, async, [&](CopySide* d) {
    return copy_side(CU_MEMORYTYPE_DEVICE, nullptr, src, nullptr, 0, 0, 0, n, 1, n, 1, 1, d);
  });
}

CUresult SimGpu::memcpy_common(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s, bool async) {
  if (n == 0) return CUDA_SUCCESS;
  // Across virtual-memory mappings of a reservation: a copy per piece, in order.
  std::vector<std::pair<CUdeviceptr, size_t>> pieces;
  const bool by_dst = across_mappings(dst, n, &pieces);
  if (by_dst || across_mappings(src, n, &pieces)) {
    for (auto [at, len] : pieces) {
      const size_t off = at - (by_dst ? dst : src);
      if (CUresult e = memcpy_common(dst + off, src + off, len, s, async)) return e;
    }
    return CUDA_SUCCESS;
  }
  CopySide d, r;
  if (CUresult e = copy_linear_side(dst, n, &d)) return e;
  if (CUresult e = copy_linear_side(src, n, &r)) return e;
  d.pitch = r.pitch = n;
  return enqueue_copy(std::move(d), std::move(r), n, 1, 1, s, async);
}

CUresult SimGpu::device_memory_io(CUdeviceptr p, size_t n, CUstream hstream,
                                  const std::function<CUresult(uint8_t*)>& io) {
  CtxPtr ctx;
  if (CUresult e = current(&ctx)) return e;
  CopySide d;
  if (CUresult e = copy_linear_side(p, n, &d)) return e;
  uint8_t* at = d.p;
  if (!hstream) return run_sync(ctx, [&] { return io(at); });
  std::shared_ptr<Stream> s;
  CtxPtr sctx;
  if (CUresult e = stream_of(hstream, &sctx, &s)) return e;
  if (capture_of(*s)) {
    invalidate_capture(*s);
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  // On the stream's own thread, in its order; this thread waits, so io may use what the caller
  // holds (its connection) while it runs there.
  auto result = std::make_shared<CUresult>(CUDA_SUCCESS);
  MarkerPtr m = submit(*sctx, *s, [result, &io, at, keep = d.keep](CUresult sticky) {
    *result = sticky ? sticky : io(at);
  });
  m->wait();
  return *result;
}

CUresult SimGpu::cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) {
  return htod(dst, src, n, nullptr, false);
}
CUresult SimGpu::cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) {
  return dtoh(dst, src, n, nullptr, false);
}
CUresult SimGpu::cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return memcpy_common(dst, src, n, nullptr, false);
}
CUresult SimGpu::cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return memcpy_common(dst, src, n, nullptr, false);
}
CUresult SimGpu::cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, CUstream s) {
  return htod(dst, src, n, s, true);
}
CUresult SimGpu::cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, CUstream s) {
  return dtoh(dst, src, n, s, true);
}
CUresult SimGpu::cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  return memcpy_common(dst, src, n, s, true);
}
CUresult SimGpu::cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  return memcpy_common(dst, src, n, s, true);
}

CUresult SimGpu::cuMemcpyPeer(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx,
                              size_t n) {
  CtxPtr a, b;
  if (CUresult e = context_of(dctx, &a)) return e;
  if (CUresult e = context_of(sctx, &b)) return e;
  return memcpy_common(dst, src, n, nullptr, false);
}

CUresult SimGpu::cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx,
                                   size_t n, CUstream s) {
  CtxPtr a, b;
  if (CUresult e = context_of(dctx, &a)) return e;
  if (CUresult e = context_of(sctx, &b)) return e;
  return memcpy_common(dst, src, n, s, true);
}

CUresult SimGpu::copy2d(const CUDA_MEMCPY2D* c, CUstream s, bool async, bool aligned) {
  if (!c) return CUDA_ERROR_INVALID_VALUE;
  // The aligned variant shares the driver's pitch limit (CU_DEVICE_ATTRIBUTE_MAX_PITCH).
  if (aligned && (c->srcPitch > 2147483647u || c->dstPitch > 2147483647u))
    return CUDA_ERROR_INVALID_VALUE;
  if (c->WidthInBytes == 0 || c->Height == 0) {
    CtxPtr ctx;
    return current(&ctx);
  }
  CopySide d, r;
  if (CUresult e =
          copy_side(c->dstMemoryType, c->dstHost, c->dstDevice, c->dstArray, c->dstXInBytes,
                    c->dstY, 0, c->dstPitch, c->Height, c->WidthInBytes, c->Height, 1, &d))
    return e;
  if (CUresult e =
          copy_side(c->srcMemoryType, c->srcHost, c->srcDevice, c->srcArray, c->srcXInBytes,
                    c->srcY, 0, c->srcPitch, c->Height, c->WidthInBytes, c->Height, 1, &r))
    return e;
  return enqueue_copy(std::move(d), std::move(r), c->WidthInBytes, c->Height, 1, s, async);
}

CUresult SimGpu::copy3d(const CUDA_MEMCPY3D_PEER* c, CUstream s, bool async) {
  if (!c) return CUDA_ERROR_INVALID_VALUE;
  if (c->srcLOD != 0 || c->dstLOD != 0) return CUDA_ERROR_INVALID_VALUE;
  if (c->WidthInBytes == 0 || c->Height == 0 || c->Depth == 0) {
    CtxPtr ctx;
    return current(&ctx);
  }
  CopySide d, r;
  size_t dh = c->dstHeight ? c->dstHeight : c->Height;
  size_t sh = c->srcHeight ? c->srcHeight : c->Height;
  if (c->Depth > 1 && ((c->dstMemoryType != CU_MEMORYTYPE_ARRAY && c->dstHeight < c->Height) ||
                       (c->srcMemoryType != CU_MEMORYTYPE_ARRAY && c->srcHeight < c->Height)))
    return CUDA_ERROR_INVALID_VALUE;
  if (CUresult e =
          copy_side(c->dstMemoryType, c->dstHost, c->dstDevice, c->dstArray, c->dstXInBytes,
                    c->dstY, c->dstZ, c->dstPitch, dh, c->WidthInBytes, c->Height, c->Depth, &d))
    return e;
  if (CUresult e =
          copy_side(c->srcMemoryType, c->srcHost, c->srcDevice, c->srcArray, c->srcXInBytes,
                    c->srcY, c->srcZ, c->srcPitch, sh, c->WidthInBytes, c->Height, c->Depth, &r))
    return e;
  return enqueue_copy(std::move(d), std::move(r), c->WidthInBytes, c->Height, c->Depth, s, async);
}

namespace {
CUDA_MEMCPY3D_PEER as_peer(const CUDA_MEMCPY3D& c) {
  CUDA_MEMCPY3D_PEER p{};
  copy_3d_fields(c, &p);
  return p;
}
}  // namespace

CUresult SimGpu::cuMemcpy2D_v2(const CUDA_MEMCPY2D* c) { return copy2d(c, nullptr, false, true); }
CUresult SimGpu::cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D* c) {
  return copy2d(c, nullptr, false, false);
}
CUresult SimGpu::cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D* c, CUstream s) {
  return copy2d(c, s, true, true);
}
CUresult SimGpu::cuMemcpy3D_v2(const CUDA_MEMCPY3D* c) {
  if (!c) return CUDA_ERROR_INVALID_VALUE;
  CUDA_MEMCPY3D_PEER p = as_peer(*c);
  return copy3d(&p, nullptr, false);
}
CUresult SimGpu::cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D* c, CUstream s) {
  if (!c) return CUDA_ERROR_INVALID_VALUE;
  CUDA_MEMCPY3D_PEER p = as_peer(*c);
  return copy3d(&p, s, true);
}
namespace {
// A peer copy's contexts, each checked and held (held[0] source, held[1] destination) for as
// long as the caller keeps `held`.
template <typename Ctx, typename ContextOf>
CUresult hold_peer_contexts(const CUDA_MEMCPY3D_PEER* c, Ctx (&held)[2], ContextOf&& context_of) {
  if (!c) return CUDA_ERROR_INVALID_VALUE;
  if (c->srcContext) {
    if (CUresult e = context_of(c->srcContext, &held[0])) return e;
  }
  if (c->dstContext) {
    if (CUresult e = context_of(c->dstContext, &held[1])) return e;
  }
  return CUDA_SUCCESS;
}
}  // namespace

CUresult SimGpu::cuMemcpy3DPeer(const CUDA_MEMCPY3D_PEER* c) {
  CtxPtr held[2];
  auto ctx_of = [this](CUcontext h, CtxPtr* out) { return context_of(h, out); };
  if (CUresult e = hold_peer_contexts(c, held, ctx_of)) return e;
  return copy3d(c, nullptr, false);
}
CUresult SimGpu::cuMemcpy3DPeerAsync(const CUDA_MEMCPY3D_PEER* c, CUstream s) {
  CtxPtr held[2];
  auto ctx_of = [this](CUcontext h, CtxPtr* out) { return context_of(h, out); };
  if (CUresult e = hold_peer_contexts(c, held, ctx_of)) return e;
  return copy3d(c, s, true);
}

// ---------------------------------------------------------------------------------------------
// Memsets

CUresult SimGpu::memset_common(CUdeviceptr dst, size_t pitch, uint32_t value, unsigned elem,
                               size_t width, size_t height, CUstream hstream, bool async) {
  CtxPtr ctx;
  if (CUresult e = current(&ctx)) return e;
  if (dst % elem != 0) return CUDA_ERROR_INVALID_VALUE;
  size_t row_bytes;
  if (__builtin_mul_overflow(width, size_t{elem}, &row_bytes)) return CUDA_ERROR_INVALID_VALUE;
  if (row_bytes == 0 || height == 0) return CUDA_SUCCESS;
  if (height > 1 && pitch < row_bytes) return CUDA_ERROR_INVALID_VALUE;
  if (height == 1) pitch = row_bytes;
  size_t extent;
  if (!region_extent(row_bytes, height, 1, pitch, height, &extent)) return CUDA_ERROR_INVALID_VALUE;
  std::vector<std::pair<CUdeviceptr, size_t>> pieces;
  if (height == 1 && across_mappings(dst, extent, &pieces)) {
    // Across virtual-memory mappings of a reservation: a memset per piece, in order.
    for (auto [at, len] : pieces) {
      if (len % elem != 0) return CUDA_ERROR_INVALID_VALUE;
      if (CUresult e = memset_common(at, 0, value, elem, len / elem, 1, hstream, async)) return e;
    }
    return CUDA_SUCCESS;
  }
  CopySide d;
  if (CUresult e = copy_linear_side(dst, extent, &d)) return e;
  auto fill = [d, pitch, value, elem, width, height] {
    for (size_t y = 0; y < height; ++y) {
      uint8_t* row = d.p + y * pitch;
      if (elem == 1) {
        std::memset(row, static_cast<int>(value & 0xff), width);
      } else if (elem == 2) {
        auto v = static_cast<uint16_t>(value);
        for (size_t i = 0; i < width; ++i) std::memcpy(row + 2 * i, &v, 2);
      } else {
        for (size_t i = 0; i < width; ++i) std::memcpy(row + 4 * i, &value, 4);
      }
    }
  };
  if (!async) {
    return run_sync(ctx, [&] {
      fill();
      return CUDA_SUCCESS;
    });
  }
  std::shared_ptr<Stream> s;
  CtxPtr sctx;
  if (CUresult e = stream_of(hstream, &sctx, &s)) return e;
  submit(
      *sctx, *s,
      [fill](CUresult sticky) {
        if (sticky == CUDA_SUCCESS) fill();
      },
      {}, NodeDesc(CU_GRAPH_NODE_TYPE_MEMSET));
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n) {
  return memset_common(d, 0, v, 1, n, 1, nullptr, false);
}
CUresult SimGpu::cuMemsetD16_v2(CUdeviceptr d, unsigned short v, size_t n) {
  return memset_common(d, 0, v, 2, n, 1, nullptr, false);
}
CUresult SimGpu::cuMemsetD32_v2(CUdeviceptr d, unsigned int v, size_t n) {
  return memset_common(d, 0, v, 4, n, 1, nullptr, false);
}
CUresult SimGpu::cuMemsetD2D8_v2(CUdeviceptr d, size_t pitch, unsigned char v, size_t w, size_t h) {
  return memset_common(d, pitch, v, 1, w, h, nullptr, false);
}
CUresult SimGpu::cuMemsetD2D16_v2(CUdeviceptr d, size_t pitch, unsigned short v, size_t w,
                                  size_t h) {
  return memset_common(d, pitch, v, 2, w, h, nullptr, false);
}
CUresult SimGpu::cuMemsetD2D32_v2(CUdeviceptr d, size_t pitch, unsigned int v, size_t w, size_t h) {
  return memset_common(d, pitch, v, 4, w, h, nullptr, false);
}
CUresult SimGpu::cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream s) {
  return memset_common(d, 0, v, 1, n, 1, s, true);
}
CUresult SimGpu::cuMemsetD16Async(CUdeviceptr d, unsigned short v, size_t n, CUstream s) {
  return memset_common(d, 0, v, 2, n, 1, s, true);
}
CUresult SimGpu::cuMemsetD32Async(CUdeviceptr d, unsigned int v, size_t n, CUstream s) {
  return memset_common(d, 0, v, 4, n, 1, s, true);
}
CUresult SimGpu::cuMemsetD2D8Async(CUdeviceptr d, size_t pitch, unsigned char v, size_t w, size_t h,
                                   CUstream s) {
  return memset_common(d, pitch, v, 1, w, h, s, true);
}
CUresult SimGpu::cuMemsetD2D16Async(CUdeviceptr d, size_t pitch, unsigned short v, size_t w,
                                    size_t h, CUstream s) {
  return memset_common(d, pitch, v, 2, w, h, s, true);
}
CUresult SimGpu::cuMemsetD2D32Async(CUdeviceptr d, size_t pitch, unsigned int v, size_t w, size_t h,
                                    CUstream s) {
  return memset_common(d, pitch, v, 4, w, h, s, true);
}

// ---------------------------------------------------------------------------------------------
// Pointer attributes

CUresult SimGpu::pointer_attribute(void* data, CUpointer_attribute attr, CUdeviceptr p) {
  if (!data) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<Allocation> a = find(p, 0);
  bool by_host = false;  // p is a host address of pinned memory rather than its device alias
  CUdeviceptr dev = p;
  if (!a) {
    a = find_host(reinterpret_cast<const void*>(p), 0);
    if (!a) return CUDA_ERROR_INVALID_VALUE;
    by_host = true;
    dev = a->base + (reinterpret_cast<uint8_t*>(p) - a->bytes);
  }
  CUdeviceptr start = by_host ? reinterpret_cast<CUdeviceptr>(a->bytes) : a->base;
  switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
      *static_cast<CUcontext*>(data) = a->ctx;
      break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      *static_cast<unsigned*>(data) =
          a->kind == MemKind::kHost ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
      break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
      *static_cast<CUdeviceptr*>(data) = dev;
      break;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
      if (a->kind == MemKind::kHost) {
        *static_cast<void**>(data) = a->bytes + (dev - a->base);
      } else if (a->kind == MemKind::kManaged) {
        *static_cast<void**>(data) = reinterpret_cast<void*>(p);
      } else {
        return CUDA_ERROR_INVALID_VALUE;
      }
      break;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
    case CU_POINTER_ATTRIBUTE_MAPPED:
      *static_cast<bool*>(data) = true;
      break;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE:
      *static_cast<bool*>(data) = false;
      break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
      *static_cast<unsigned long long*>(data) = a->buffer_id;
      break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
      *static_cast<bool*>(data) = a->kind == MemKind::kManaged;
      break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
      *static_cast<int*>(data) = a->device;
      break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
      *static_cast<CUdeviceptr*>(data) = start;
      break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
      *static_cast<size_t*>(data) = a->size;
      break;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
      *static_cast<unsigned long long*>(data) = 0;
      break;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
      *static_cast<int*>(data) = CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE;
      break;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
      *static_cast<CUmemoryPool*>(data) = reinterpret_cast<CUmemoryPool>(a->pool);
      break;
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
      *static_cast<void**>(data) = reinterpret_cast<void*>(a->base);
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuPointerGetAttribute(void* data, CUpointer_attribute attr, CUdeviceptr p) {
  if (!initialized_) return CUDA_ERROR_NOT_INITIALIZED;
  return pointer_attribute(data, attr, p);
}

CUresult SimGpu::cuPointerGetAttributes(unsigned n, CUpointer_attribute* attrs, void** data,
                                        CUdeviceptr p) {
  if (!initialized_) return CUDA_ERROR_NOT_INITIALIZED;
  if (n > 0 && (!attrs || !data)) return CUDA_ERROR_INVALID_VALUE;
  bool known = find(p, 0) || find_host(reinterpret_cast<const void*>(p), 0);
  for (unsigned i = 0; i < n; ++i) {
    if (!data[i]) continue;
    // Unlike cuPointerGetAttribute, an unknown pointer is not an error: values stay zero.
    if (!known || pointer_attribute(data[i], attrs[i], p) != CUDA_SUCCESS) {
      switch (attrs[i]) {
        case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
          *static_cast<unsigned*>(data[i]) = 0;
          break;
        case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
          *static_cast<int*>(data[i]) = -2;
          break;
        case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
        case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        case CU_POINTER_ATTRIBUTE_MAPPED:
        case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
        case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
        case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE:
          *static_cast<bool*>(data[i]) = false;
          break;
        default:
          *static_cast<void**>(data[i]) = nullptr;
          break;
      }
    }
  }
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuPointerSetAttribute(const void* value, CUpointer_attribute attr, CUdeviceptr p) {
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  if (attr != CU_POINTER_ATTRIBUTE_SYNC_MEMOPS) return CUDA_ERROR_INVALID_VALUE;
  return find(p, 0) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult SimGpu::cuMemPrefetchAsync_v2(CUdeviceptr p, size_t n, CUmemLocation loc, unsigned flags,
                                       CUstream s) {
  auto a = find(p, n);
  if (!a || a->kind != MemKind::kManaged || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (loc.type == CU_MEM_LOCATION_TYPE_DEVICE && !valid_device(loc.id))
    return CUDA_ERROR_INVALID_DEVICE;
  // Managed memory has one copy here; a prefetch only takes its place in stream order.
  return stream_wait_marker(s, nullptr);
}

CUresult SimGpu::cuMemAdvise_v2(CUdeviceptr p, size_t n, CUmem_advise advice, CUmemLocation loc) {
  auto a = find(p, n);
  if (!a || a->kind != MemKind::kManaged) return CUDA_ERROR_INVALID_VALUE;
  if (advice < CU_MEM_ADVISE_SET_READ_MOSTLY || advice > CU_MEM_ADVISE_UNSET_ACCESSED_BY)
    return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

}  // namespace cuwire::server::sim
