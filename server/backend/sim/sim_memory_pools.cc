// Stream-ordered allocation (cuMemAllocAsync, cuMemFreeAsync) and memory pools: their
// attributes and access, and pools and their allocations shared between processes.

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "server/backend/sim/sim_gpu.h"

namespace cuwire::server::sim {

// ---------------------------------------------------------------------------------------------
// Stream-ordered allocation and pools

Pool* SimGpu::pool_of(CUmemoryPool h) {
  auto* p = reinterpret_cast<Pool*>(h);
  if (!p) return nullptr;
  for (const Device& d : devices_)
    if (d.default_pool.get() == p) return p;
  std::shared_lock lock(mu_);
  return pools_.count(p) ? p : nullptr;
}

void SimGpu::release_pool_memory(uint64_t session) {
  std::shared_lock lock(mu_);  // the pools
  std::unique_lock mem(mem_mu_);
  auto release = [&](Pool& p) {
    if (p.session == session || p.session == 0) p.trim_to(p.release_threshold);
  };
  for (Device& d : devices_) release(*d.default_pool);
  for (auto& [raw, p] : pools_) release(*p);
}

CUresult SimGpu::cuMemAllocAsync(CUdeviceptr* dptr, size_t bytes, CUstream s) {
  if (!dptr) return CUDA_ERROR_INVALID_VALUE;
  CtxPtr ctx;
  std::shared_ptr<Stream> st;
  if (CUresult e = current(&ctx)) return e;
  if (CUresult e = stream_of(s, &ctx, &st)) return e;
  Pool* pool;
  {
    std::shared_lock lock(mu_);
    pool = devices_[ctx->device].current_pool;
  }
  return cuMemAllocFromPoolAsync(dptr, bytes, reinterpret_cast<CUmemoryPool>(pool), s);
}

CUresult SimGpu::cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytes, CUmemoryPool h,
                                         CUstream s) {
  if (!dptr) return CUDA_ERROR_INVALID_VALUE;
  Pool* pool = pool_of(h);
  if (!pool || pool->source_serial) return CUDA_ERROR_INVALID_VALUE;  // an import holds none
  CtxPtr ctx;
  std::shared_ptr<Stream> st;
  if (CUresult e = current(&ctx)) return e;
  if (CUresult e = stream_of(s, &ctx, &st)) return e;
  if (pool->device != ctx->device) return CUDA_ERROR_INVALID_VALUE;
  // The memory exists from now on, which is valid for every use ordered after this call.
  if (CUresult e = allocate(*ctx, bytes, MemKind::kPool, pool, dptr)) return e;
  if (std::shared_ptr<Capture> c = capture_of(*st)) {
    // Captured: the graph's allocation, at this address and with these bytes at every launch
    // (copies the graph holds name the block itself). A free captured after it ends it at
    // each launch; the allocation node makes it live again at the next.
    std::shared_ptr<Allocation> a = find(*dptr, 1);
    if (!a) return CUDA_ERROR_OUT_OF_MEMORY;
    {
      std::lock_guard glock(c->graph->mu);
      c->allocations[a->base] = a;
      c->graph->allocations.push_back(a);
    }
    submit(
        *ctx, *st, [this, a](CUresult) { revive(a); }, {},
        NodeDesc(CU_GRAPH_NODE_TYPE_MEM_ALLOC, [&] { return std::to_string(bytes) + " bytes"; }));
  }
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuMemFreeAsync(CUdeviceptr p, CUstream s) {
  CtxPtr ctx;
  std::shared_ptr<Stream> st;
  if (CUresult e = current(&ctx)) return e;
  if (CUresult e = stream_of(s, &ctx, &st)) return e;
  const std::shared_ptr<Capture> capturing = capture_of(*st);
  switch (free_of(p, *ctx)) {
    case FreeOf::kImport:
      // Another process's allocation this one imported: the free ends the import, in stream
      // order, never the allocation (and not in a graph, whose launches would end it again).
      if (capturing) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
      submit(
          *ctx, *st, [this, p, id = ctx->id](CUresult) { release_pool_import(p, id); }, {},
          NodeDesc(CU_GRAPH_NODE_TYPE_MEM_FREE));
      return CUDA_SUCCESS;
    case FreeOf::kAnother:
      return CUDA_ERROR_INVALID_VALUE;
    case FreeOf::kOwn:
      break;
  }
  if (const std::shared_ptr<Capture>& c = capturing) {
    bool graphs = false;
    {
      std::lock_guard glock(c->graph->mu);
      graphs = c->allocations.count(p) > 0;
    }
    if (graphs) {
      // The capture's own allocation: gone from here on outside launches, and at each launch
      // from this point of the graph on.
      if (CUresult e = free_allocation(p, false)) return e;
      submit(
          *ctx, *st, [this, p](CUresult) { free_allocation(p, true); }, {},
          NodeDesc(CU_GRAPH_NODE_TYPE_MEM_FREE));
      return CUDA_SUCCESS;
    }
  }
  {
    std::shared_lock lock(mem_mu_);
    auto it = allocations_.find(p);
    if (it == allocations_.end() || it->second->kind == MemKind::kHost)
      return CUDA_ERROR_INVALID_VALUE;
    bool expected = false;
    if (!it->second->free_queued.compare_exchange_strong(expected, true))
      return CUDA_ERROR_INVALID_VALUE;
  }
  submit(
      *ctx, *st, [this, p](CUresult) { free_allocation(p, true); }, {},
      NodeDesc(CU_GRAPH_NODE_TYPE_MEM_FREE));
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuMemPoolCreate(CUmemoryPool* out, const CUmemPoolProps* props) {
  if (!out || !props) return CUDA_ERROR_INVALID_VALUE;
  if (!initialized_) return CUDA_ERROR_NOT_INITIALIZED;
  if (props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
  if (props->location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_NOT_SUPPORTED;
  if (!valid_device(props->location.id)) return CUDA_ERROR_INVALID_DEVICE;
  if (props->handleTypes != CU_MEM_HANDLE_TYPE_NONE &&
      props->handleTypes != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  auto p = std::make_unique<Pool>();
  p->device = props->location.id;
  p->props = *props;
  std::unique_lock lock(mu_);
  *out = reinterpret_cast<CUmemoryPool>(p.get());
  pools_[p.get()] = std::move(p);
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuMemPoolDestroy(CUmemoryPool h) {
  std::unique_lock lock(mu_);
  auto it = pools_.find(reinterpret_cast<Pool*>(h));
  if (it == pools_.end()) return CUDA_ERROR_INVALID_VALUE;  // default pools included
  Pool* p = it->first;
  for (Device& d : devices_)
    if (d.current_pool == p) d.current_pool = d.default_pool.get();
  {
    // Allocations still out live on; they just stop counting against the pool.
    std::unique_lock mlock(mem_mu_);
    for (auto& [base, a] : allocations_)
      if (a->pool == p) a->pool = nullptr;
  }
  pools_.erase(it);
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuMemPoolTrimTo(CUmemoryPool h, size_t keep) {
  Pool* p = pool_of(h);
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  std::unique_lock lock(mem_mu_);
  p->trim_to(keep);
  return CUDA_SUCCESS;
}

namespace {
// The pool's field behind one of the reuse policy attributes (int values); null for any other
// attribute.
int* reuse_flag(Pool& p, CUmemPool_attribute attr) {
  switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
      return &p.reuse_follow_events;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
      return &p.reuse_opportunistic;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
      return &p.reuse_internal_deps;
    default:
      return nullptr;
  }
}
}  // namespace

CUresult SimGpu::cuMemPoolSetAttribute(CUmemoryPool h, CUmemPool_attribute attr, void* value) {
  Pool* p = pool_of(h);
  if (!p || !value) return CUDA_ERROR_INVALID_VALUE;
  std::unique_lock lock(mem_mu_);
  if (int* flag = reuse_flag(*p, attr)) {
    *flag = *static_cast<int*>(value);
    return CUDA_SUCCESS;
  }
  switch (attr) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      p->release_threshold = *static_cast<cuuint64_t*>(value);
      break;
    // Only a reset (to zero) is allowed; the mark restarts at the current value.
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
      if (*static_cast<cuuint64_t*>(value) != 0) return CUDA_ERROR_INVALID_VALUE;
      p->reserved_high = p->reserved;
      break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      if (*static_cast<cuuint64_t*>(value) != 0) return CUDA_ERROR_INVALID_VALUE;
      p->used_high = p->used;
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuMemPoolGetAttribute(CUmemoryPool h, CUmemPool_attribute attr, void* value) {
  Pool* p = pool_of(h);
  if (!p || !value) return CUDA_ERROR_INVALID_VALUE;
  std::shared_lock lock(mem_mu_);
  if (const int* flag = reuse_flag(*p, attr)) {
    *static_cast<int*>(value) = *flag;
    return CUDA_SUCCESS;
  }
  switch (attr) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      *static_cast<cuuint64_t*>(value) = p->release_threshold;
      break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
      *static_cast<cuuint64_t*>(value) = p->reserved;
      break;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
      *static_cast<cuuint64_t*>(value) = p->used;
      break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
      *static_cast<cuuint64_t*>(value) = p->reserved_high;
      break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      *static_cast<cuuint64_t*>(value) = p->used_high;
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuMemPoolSetAccess(CUmemoryPool h, const CUmemAccessDesc* map, size_t count) {
  Pool* p = pool_of(h);
  if (!p || (count && !map)) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < count; ++i) {
    if (map[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_device(map[i].location.id)) return CUDA_ERROR_INVALID_DEVICE;
    if (map[i].location.id == p->device && map[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
      return CUDA_ERROR_INVALID_VALUE;
  }
  std::unique_lock lock(mem_mu_);
  for (size_t i = 0; i < count; ++i) {
    if (map[i].location.id == p->device) continue;
    if (map[i].flags == CU_MEM_ACCESS_FLAGS_PROT_NONE) {
      p->peer_access.erase(map[i].location.id);
    } else {
      p->peer_access.insert(map[i].location.id);
    }
  }
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuMemPoolGetAccess(CUmemAccess_flags* flags, CUmemoryPool h, CUmemLocation* loc) {
  Pool* p = pool_of(h);
  if (!p || !flags || !loc) return CUDA_ERROR_INVALID_VALUE;
  if (loc->type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(loc->id)) return CUDA_ERROR_INVALID_DEVICE;
  std::shared_lock lock(mem_mu_);
  *flags = loc->id == p->device || p->peer_access.count(loc->id)
               ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE
               : CU_MEM_ACCESS_FLAGS_PROT_NONE;
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuMemGetDefaultMemPool(CUmemoryPool* out, CUmemLocation* loc,
                                        CUmemAllocationType type) {
  if (!out || !loc || type != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
  if (loc->type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_NOT_SUPPORTED;
  return cuDeviceGetDefaultMemPool(out, loc->id);
}

CUresult SimGpu::cuMemGetMemPool(CUmemoryPool* out, CUmemLocation* loc, CUmemAllocationType type) {
  if (!out || !loc || type != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
  if (loc->type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_NOT_SUPPORTED;
  return cuDeviceGetMemPool(out, loc->id);
}

CUresult SimGpu::cuMemSetMemPool(CUmemLocation* loc, CUmemAllocationType type, CUmemoryPool pool) {
  if (!loc || type != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
  if (loc->type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_NOT_SUPPORTED;
  return cuDeviceSetMemPool(loc->id, pool);
}

// ---------------------------------------------------------------------------------------------
// Pools shared between processes. A pool made with POSIX descriptor handles may be exported as
// a sealed memfd naming it by serial and a nonce drawn at its first export; an import is a pool
// of its own that names the exported one (Pool::source_serial). An allocation of such a pool
// may be exported as 64 bytes naming it by base and nonce, and imported through an import of
// its pool: the importing context is recorded on the allocation (Allocation::ipc_contexts, as
// cuIpcOpenMemHandle records it), so its launches reach the memory, until it frees the
// pointer. Which sessions may import what is the server's to decide (server/calls/shareable.cc,
// server/calls/ipc.cc); a freed allocation's or a destroyed pool's export imports nothing.

namespace {
struct SimPoolShareable {
  uint64_t serial;
  uint64_t nonce;
};
constexpr char kSimPoolMagic[16] = "cuwire-sim-pool";

struct SimPoolPointer {
  uint64_t base;
  uint64_t nonce;
  uint64_t pool_serial;
};
constexpr char kSimPoolPointerMagic[8] = {'c', 'u', 'w', 'p', 'p', 't', 'r', '1'};
}  // namespace

CUresult SimGpu::cuMemPoolExportToShareableHandle(void* out, CUmemoryPool h,
                                                  CUmemAllocationHandleType type,
                                                  unsigned long long flags) {
  if (!out || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
  SimPoolShareable c{};
  {
    std::shared_lock lock(mu_);                         // keeps the pool from going meanwhile
    auto it = pools_.find(reinterpret_cast<Pool*>(h));  // a device's default pool is none
    if (it == pools_.end() || it->second->source_serial ||
        !(it->second->props.handleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    Pool& p = *it->second;
    c.serial = p.serial;
    std::unique_lock mem(mem_mu_);
    if (p.ipc_nonce == 0) p.ipc_nonce = draw_nonce();
    c.nonce = p.ipc_nonce;
  }
  return export_shareable(out, "cuwire-sim-pool", kSimPoolMagic, c);
}

CUresult SimGpu::cuMemPoolImportFromShareableHandle(CUmemoryPool* out, void* handle,
                                                    CUmemAllocationHandleType type,
                                                    unsigned long long flags) {
  if (!out || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
  SimPoolShareable c{};
  if (!import_shareable(handle, kSimPoolMagic, &c)) return CUDA_ERROR_INVALID_VALUE;
  std::unique_lock lock(mu_);
  const Pool* source = nullptr;
  {
    std::shared_lock mem(mem_mu_);
    for (const auto& [raw, pool] : pools_) {
      if (pool->serial == c.serial && !pool->source_serial && pool->ipc_nonce != 0 &&
          pool->ipc_nonce == c.nonce) {
        source = pool.get();
      }
    }
  }
  if (!source) return CUDA_ERROR_INVALID_VALUE;  // destroyed since, or never exported
  auto p = std::make_unique<Pool>();
  p->device = source->device;
  p->props = source->props;
  p->source_serial = source->serial;
  *out = reinterpret_cast<CUmemoryPool>(p.get());
  pools_[p.get()] = std::move(p);
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuMemPoolExportPointer(CUmemPoolPtrExportData* out, CUdeviceptr ptr) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  SimPoolPointer d{};
  {
    std::unique_lock lock(mem_mu_);
    auto it = allocations_.find(ptr);
    if (it == allocations_.end()) return CUDA_ERROR_INVALID_VALUE;
    Allocation& a = *it->second;
    if (a.kind != MemKind::kPool || !a.pool ||
        !(a.pool->props.handleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (a.ipc_nonce == 0) a.ipc_nonce = draw_nonce();
    d.base = a.base;
    d.nonce = a.ipc_nonce;
    d.pool_serial = a.pool->serial;
  }
  pack_ipc_handle(out, kSimPoolPointerMagic, d);
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuMemPoolImportPointer(CUdeviceptr* out, CUmemoryPool h,
                                        CUmemPoolPtrExportData* data) {
  if (!out || !data) return CUDA_ERROR_INVALID_VALUE;
  CtxPtr ctx;
  if (CUresult e = current(&ctx)) return e;
  SimPoolPointer d;
  if (!unpack_ipc_handle(*data, kSimPoolPointerMagic, &d)) return CUDA_ERROR_INVALID_VALUE;
  std::shared_lock lock(mu_);  // keeps the import from going meanwhile
  auto import = pools_.find(reinterpret_cast<Pool*>(h));
  if (import == pools_.end() || !import->second->source_serial) return CUDA_ERROR_INVALID_VALUE;
  const uint64_t source = import->second->source_serial;
  std::unique_lock mem(mem_mu_);
  auto it = allocations_.find(d.base);
  // Freed since, or being freed (no live allocation has its base again), exported from another
  // pool than the one this import shows, or never exported.
  if (it == allocations_.end() || it->second->kind != MemKind::kPool || !it->second->pool ||
      it->second->pool->serial != source || d.pool_serial != source || it->second->ipc_nonce == 0 ||
      it->second->ipc_nonce != d.nonce || it->second->free_queued) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  Allocation& a = *it->second;
  if (a.ctx_id == ctx->id) return CUDA_ERROR_INVALID_VALUE;  // its own allocation
  ++a.ipc_contexts[ctx->id];
  *out = a.base;
  return CUDA_SUCCESS;
}

}  // namespace cuwire::server::sim
