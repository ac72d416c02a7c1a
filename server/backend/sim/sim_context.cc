// Contexts: per-thread current-context stacks, primary contexts, limits, teardown.

#include <spdlog/spdlog.h>

#include "server/backend/sim/sim_gpu.h"

namespace cuwire::server::sim {
namespace {

// CU_CTX_SCHED_MASK | MAP_HOST | LMEM_RESIZE_TO_MAX | COREDUMP | USER_COREDUMP | SYNC_MEMOPS
constexpr unsigned kCtxFlagsKnown = 0xff;

}  // namespace

std::vector<SimGpu::CtxPtr>& SimGpu::thread_stack() {
  // Keyed by backend instance so that several backends in one process (tests) stay apart.
  thread_local std::unordered_map<uint64_t, std::vector<CtxPtr>> stacks;
  return stacks[instance_];
}

CUresult SimGpu::current(CtxPtr* out, bool allow_sticky) {
  auto& st = thread_stack();
  if (st.empty()) return initialized_ ? CUDA_ERROR_INVALID_CONTEXT : CUDA_ERROR_NOT_INITIALIZED;
  const CtxPtr& c = st.back();
  if (!c->alive) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  if (!allow_sticky) {
    if (CUresult e = c->sticky.load()) return e;
  }
  *out = c;
  return CUDA_SUCCESS;
}

CUresult SimGpu::context_of(CUcontext h, CtxPtr* out) {
  if (!h) return current(out, true);
  std::shared_lock lock(mu_);
  auto it = contexts_.find(reinterpret_cast<Context*>(h));
  if (it == contexts_.end() || !it->second->alive) return CUDA_ERROR_INVALID_CONTEXT;
  *out = it->second;
  return CUDA_SUCCESS;
}

void SimGpu::set_context_session(CUcontext h, uint64_t session) {
  std::unique_lock lock(mu_);
  auto it = contexts_.find(reinterpret_cast<Context*>(h));
  if (it != contexts_.end()) it->second->session = session;
}

SimGpu::CtxPtr SimGpu::make_context(int device, unsigned flags, bool primary) {
  auto c = std::make_shared<Context>();
  c->id = next_id_++;
  c->device = device;
  c->flags = flags;
  c->primary = primary;
  c->heap = new_heap(device, c->reservations);
  return c;
}

void SimGpu::set_context_reservations(CUcontext h, Reserve reserve) {
  std::shared_ptr<ReservationHook> hook;
  {
    std::shared_lock lock(mu_);
    auto it = contexts_.find(reinterpret_cast<Context*>(h));
    if (it == contexts_.end()) return;
    hook = it->second->reservations;
  }
  std::lock_guard lock(hook->mu);
  hook->reserve = std::move(reserve);
}

std::shared_ptr<ptx::DeviceHeap> SimGpu::new_heap(int device,
                                                  std::shared_ptr<ReservationHook> hook) {
  // The heap is device memory: reserving it charges the device, as an allocation does, and
  // whoever the context's reservations are asked of (its session's tenant) first.
  auto charge = [this, device, hook](uint64_t bytes) {
    if (!hook->take(device, bytes)) return false;
    std::unique_lock lock(mem_mu_);
    Device& d = devices_[device];
    if (bytes > d.total_bytes - d.used_bytes) {
      lock.unlock();
      hook->give_back(device, bytes);
      return false;
    }
    d.used_bytes += bytes;
    return true;
  };
  auto uncharge = [this, device, hook](uint64_t bytes) {
    {
      std::unique_lock lock(mem_mu_);
      devices_[device].used_bytes -= bytes;
    }
    hook->give_back(device, bytes);
  };
  return std::make_shared<ptx::DeviceHeap>(size_t{8} << 20, charge, uncharge);
}

void SimGpu::clear_context(Context& ctx) {
  std::vector<std::shared_ptr<Stream>> streams;
  {
    std::unique_lock lock(mu_);
    ctx.heap = new_heap(ctx.device, ctx.reservations);
    if (ctx.null_stream) streams.push_back(std::move(ctx.null_stream));
    if (ctx.aside_stream) streams.push_back(std::move(ctx.aside_stream));
    for (const auto& s : ctx.streams) {
      streams_.erase(s.get());
      streams.push_back(s);
    }
    for (auto& [tid, s] : ctx.per_thread_streams) streams.push_back(std::move(s));
    ctx.streams.clear();
    ctx.per_thread_streams.clear();
  }
  // Queued work finishes first (it holds references to the memory freed below).
  for (auto& s : streams) s->shut_down();
  streams.clear();
  {
    std::unique_lock lock(mu_);
    while (!ctx.modules.empty()) unload_module(*ctx.modules.begin());
    for (Event* e : ctx.events) events_.erase(e);
    ctx.events.clear();
    ctx.peers.clear();
    for (auto& [c, other] : contexts_) other->peers.erase(&ctx);
  }
  destroy_objects(ctx);
  destroy_arrays(ctx);
  std::vector<std::shared_ptr<Allocation>> freed;
  {
    std::unique_lock lock(mem_mu_);
    for (auto it = allocations_.begin(); it != allocations_.end();) {
      // A mapping of virtual memory management belongs to the process, not the context: it
      // stays until unmapped (memMapIPCDrv destroys its context, then unmaps).
      if (it->second->ctx_id != ctx.id || it->second->vmm_handle != 0) {
        ++it;
        continue;
      }
      Allocation& a = *it->second;
      devices_[a.device].used_bytes -= a.charged;
      if (a.pool) a.pool->give(a.charged);
      if (a.kind == MemKind::kHost) host_ranges_.erase(reinterpret_cast<uintptr_t>(a.bytes));
      freed.push_back(std::move(it->second));
      it = allocations_.erase(it);
    }
  }
  ctx.sticky = CUDA_SUCCESS;
  size_t defaults[10] = {1024, 1 << 20, 8 << 20, 2, 2048, 128, 0, 48 << 10, 0, 1};
  std::copy(std::begin(defaults), std::end(defaults), std::begin(ctx.limits));
}

CUresult SimGpu::sync_context(Context& ctx) {
  std::vector<std::shared_ptr<Stream>> streams;
  {
    std::shared_lock lock(mu_);
    if (ctx.null_stream) streams.push_back(ctx.null_stream);
    if (ctx.aside_stream) streams.push_back(ctx.aside_stream);
    streams.insert(streams.end(), ctx.streams.begin(), ctx.streams.end());
    for (const auto& [tid, s] : ctx.per_thread_streams) streams.push_back(s);
  }
  for (auto& s : streams) s->synchronize();
  return ctx.sticky.load();
}

// ---------------------------------------------------------------------------------------------
// Primary contexts

CUresult SimGpu::cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  if (!initialized_) return CUDA_ERROR_NOT_INITIALIZED;
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::unique_lock lock(mu_);
  Device& d = devices_[dev];
  if (!d.primary) d.primary = make_context(dev, d.primary_flags, true);
  if (d.primary_refs++ == 0) {
    d.primary->alive = true;
    d.primary->flags = d.primary_flags;
    contexts_[d.primary.get()] = d.primary;
  }
  *pctx = reinterpret_cast<CUcontext>(d.primary.get());
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  if (CUresult e = initialized_device(dev)) return e;
  CtxPtr gone;
  {
    std::unique_lock lock(mu_);
    Device& d = devices_[dev];
    if (d.primary_refs == 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (--d.primary_refs > 0) return CUDA_SUCCESS;
    gone = d.primary;
    gone->alive = false;
    contexts_.erase(gone.get());
  }
  clear_context(*gone);
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned flags) {
  if (CUresult e = initialized_device(dev)) return e;
  if (flags & ~kCtxFlagsKnown) return CUDA_ERROR_INVALID_VALUE;
  std::unique_lock lock(mu_);
  Device& d = devices_[dev];
  d.primary_flags = flags;
  if (d.primary && d.primary_refs > 0) d.primary->flags = flags;
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuDevicePrimaryCtxGetState(CUdevice dev, unsigned* flags, int* active) {
  if (!initialized_) return CUDA_ERROR_NOT_INITIALIZED;
  if (!flags || !active) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::shared_lock lock(mu_);
  const Device& d = devices_[dev];
  *flags = d.primary_flags;
  *active = d.primary_refs > 0 ? 1 : 0;
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  if (CUresult e = initialized_device(dev)) return e;
  // Everything the context held is freed; the handle stays valid for its retainers.
  if (CtxPtr ctx = retained_primary(dev)) clear_context(*ctx);
  return CUDA_SUCCESS;
}

SimGpu::CtxPtr SimGpu::retained_primary(CUdevice dev) {
  std::shared_lock lock(mu_);
  const Device& d = devices_[dev];
  return d.primary_refs > 0 ? d.primary : nullptr;
}

// ---------------------------------------------------------------------------------------------
// Created contexts and the current-context stack

CUresult SimGpu::cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* params, unsigned flags,
                                CUdevice dev) {
  if (!initialized_) return CUDA_ERROR_NOT_INITIALIZED;
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  if (flags & ~kCtxFlagsKnown) return CUDA_ERROR_INVALID_VALUE;
  if (params && (params->numExecAffinityParams > 0 || params->cigParams))
    return CUDA_ERROR_NOT_SUPPORTED;
  CtxPtr c = make_context(dev, flags, false);
  {
    std::unique_lock lock(mu_);
    contexts_[c.get()] = c;
  }
  thread_stack().push_back(c);
  *pctx = reinterpret_cast<CUcontext>(c.get());
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuCtxDestroy_v2(CUcontext h) {
  if (!h) return CUDA_ERROR_INVALID_VALUE;
  return destroy_context(h, false);
}

CUresult SimGpu::destroy_context(void* h, bool green) {
  CtxPtr c;
  {
    std::unique_lock lock(mu_);
    auto it = contexts_.find(reinterpret_cast<Context*>(h));
    if (it == contexts_.end()) return CUDA_ERROR_INVALID_CONTEXT;
    // Primary contexts are released, never destroyed; green ones by cuGreenCtxDestroy.
    if (green ? !it->second->green : (it->second->primary || it->second->green))
      return CUDA_ERROR_INVALID_CONTEXT;
    c = it->second;
    c->alive = false;
    contexts_.erase(it);
  }
  auto& st = thread_stack();
  if (!st.empty() && st.back() == c) st.pop_back();
  clear_context(*c);
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuCtxPushCurrent_v2(CUcontext h) {
  if (!h) return CUDA_ERROR_INVALID_VALUE;
  CtxPtr c;
  if (CUresult e = context_of(h, &c)) return e;
  thread_stack().push_back(std::move(c));
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuCtxPopCurrent_v2(CUcontext* pctx) {
  auto& st = thread_stack();
  if (st.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (pctx) *pctx = reinterpret_cast<CUcontext>(st.back().get());
  st.pop_back();
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuCtxSetCurrent(CUcontext h) {
  auto& st = thread_stack();
  if (!h) {
    if (!st.empty()) st.pop_back();
    return CUDA_SUCCESS;
  }
  CtxPtr c;
  if (CUresult e = context_of(h, &c)) return e;
  if (st.empty()) {
    st.push_back(std::move(c));
  } else {
    st.back() = std::move(c);
  }
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuCtxGetCurrent(CUcontext* pctx) {
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  if (!initialized_) return CUDA_ERROR_NOT_INITIALIZED;
  auto& st = thread_stack();
  *pctx = st.empty() ? nullptr : reinterpret_cast<CUcontext>(st.back().get());
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuCtxGetDevice(CUdevice* dev) { return cuCtxGetDevice_v2(dev, nullptr); }

CUresult SimGpu::cuCtxGetDevice_v2(CUdevice* dev, CUcontext h) {
  return context_query(&SimGpu::context_of, h, dev, [](const CtxPtr& c) { return c->device; });
}

CUresult SimGpu::cuCtxGetFlags(unsigned* flags) { return current_setting(&Context::flags, flags); }

CUresult SimGpu::cuCtxSetFlags(unsigned flags) {
  if (flags & ~kCtxFlagsKnown) return CUDA_ERROR_INVALID_VALUE;
  return set_current_setting(&Context::flags, flags, true);
}

CUresult SimGpu::cuCtxGetId(CUcontext h, unsigned long long* id) {
  return context_query(&SimGpu::context_of, h, id, [](const CtxPtr& c) { return c->id; });
}

CUresult SimGpu::cuCtxSynchronize() {
  CtxPtr c;
  if (CUresult e = current(&c, true)) return e;
  const CUresult rc = sync_context(*c);
  release_pool_memory(c->session);
  return rc;
}

CUresult SimGpu::cuCtxSynchronize_v2(CUcontext h) {
  CtxPtr c;
  if (CUresult e = context_of(h, &c)) return e;
  const CUresult rc = sync_context(*c);
  release_pool_memory(c->session);
  return rc;
}

CUresult SimGpu::cuCtxSetLimit(CUlimit limit, size_t value) {
  CtxPtr c;
  if (CUresult e = current(&c)) return e;
  switch (limit) {
    case CU_LIMIT_STACK_SIZE:
    case CU_LIMIT_PRINTF_FIFO_SIZE:
    case CU_LIMIT_MALLOC_HEAP_SIZE:
    case CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH:
    case CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT:
      break;
    case CU_LIMIT_MAX_L2_FETCH_GRANULARITY:
      if (value > 128) return CUDA_ERROR_INVALID_VALUE;
      break;
    case CU_LIMIT_PERSISTING_L2_CACHE_SIZE:
      // sm_75 has no persisting L2 (CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE is 0).
      if (value != 0) return CUDA_ERROR_UNSUPPORTED_LIMIT;
      break;
    case CU_LIMIT_SHMEM_SIZE:
    case CU_LIMIT_CIG_ENABLED:
      return CUDA_ERROR_INVALID_VALUE;  // query-only
    case CU_LIMIT_CIG_SHMEM_FALLBACK_ENABLED:
      break;
    default:
      return CUDA_ERROR_UNSUPPORTED_LIMIT;
  }
  std::unique_lock lock(mu_);
  // The heap's size is fixed once device code has allocated from it, as on the GPU.
  if (limit == CU_LIMIT_MALLOC_HEAP_SIZE && !c->heap->set_capacity(value))
    return CUDA_ERROR_INVALID_VALUE;
  c->limits[limit] = value;
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuCtxGetLimit(size_t* value, CUlimit limit) {
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  CtxPtr c;
  if (CUresult e = current(&c, true)) return e;
  if (static_cast<unsigned>(limit) >= std::size(c->limits)) return CUDA_ERROR_UNSUPPORTED_LIMIT;
  std::shared_lock lock(mu_);
  *value = c->limits[limit];
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuCtxGetCacheConfig(CUfunc_cache* config) {
  return current_setting(&Context::cache_config, config);
}

CUresult SimGpu::cuCtxSetCacheConfig(CUfunc_cache config) {
  if (config < CU_FUNC_CACHE_PREFER_NONE || config > CU_FUNC_CACHE_PREFER_EQUAL)
    return CUDA_ERROR_INVALID_VALUE;
  return set_current_setting(&Context::cache_config, config);
}

CUresult SimGpu::cuCtxGetSharedMemConfig(CUsharedconfig* config) {
  return current_setting(&Context::shmem_config, config);
}

CUresult SimGpu::cuCtxSetSharedMemConfig(CUsharedconfig config) {
  if (config < CU_SHARED_MEM_CONFIG_DEFAULT_BANK_SIZE ||
      config > CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE)
    return CUDA_ERROR_INVALID_VALUE;
  return set_current_setting(&Context::shmem_config, config);
}

CUresult SimGpu::cuCtxGetApiVersion(CUcontext h, unsigned* version) {
  // What the driver reports for every context created through the v2+ API.
  return context_query(&SimGpu::context_of, h, version, [](const CtxPtr&) { return 3020u; });
}

CUresult SimGpu::cuCtxGetStreamPriorityRange(int* least, int* greatest) {
  CtxPtr c;
  if (CUresult e = current(&c, true)) return e;
  if (least) *least = 0;
  if (greatest) *greatest = -5;
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuCtxResetPersistingL2Cache() {
  CtxPtr c;
  return current(&c);
}

CUresult SimGpu::cuCtxEnablePeerAccess(CUcontext peer, unsigned flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  CtxPtr c, p;
  if (CUresult e = current(&c)) return e;
  if (!peer) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult e = context_of(peer, &p)) return e;
  if (p->device == c->device) return CUDA_ERROR_INVALID_DEVICE;
  std::unique_lock lock(mu_);
  if (!c->peers.insert(p.get()).second) return CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuCtxDisablePeerAccess(CUcontext peer) {
  CtxPtr c;
  if (CUresult e = current(&c)) return e;
  std::unique_lock lock(mu_);
  if (c->peers.erase(reinterpret_cast<Context*>(peer)) == 0)
    return CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
  return CUDA_SUCCESS;
}

}  // namespace cuwire::server::sim
