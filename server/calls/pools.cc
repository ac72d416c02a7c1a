// Memory pools: the pool properties and access a session may set, and a device's current
// memory pool, per session, with the session's own default pools.

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "server/backend/backend.h"
#include "server/session/dispatch.h"

namespace cuwire::server {

// ---------------------------------------------------------------------------------------------
// Pool properties: only values a session may set reach the backend.

// A pool's grant of another device (cuMemPoolSetAccess) is for every context of the process on
// that device, and on the driver every session's contexts are the server's: another session's
// kernels there could reach the pool's memory. The sim honours a grant for the pool's own
// session only (SessionObjects), and a relay session with an upstream session of its own is
// kept apart by its upstream; on the driver, and on a relay whose sessions share one upstream
// session (a client library without session connections), a grant of a device the pool does
// not reach yet is refused (a revocation, or a grant it has, passes). Unverified without a GPU.
CUresult verify_pool_access(SessionContext& cx, CUmemoryPool pool, const CUmemAccessDesc* map,
                            size_t count) {
  if (cx.backend_keeps_sessions_apart()) return CUDA_SUCCESS;
  for (size_t i = 0; i < count; ++i) {
    if (map[i].flags == CU_MEM_ACCESS_FLAGS_PROT_NONE) continue;
    CUmemLocation where = map[i].location;
    CUmemAccess_flags has = CU_MEM_ACCESS_FLAGS_PROT_NONE;
    if (CUresult e = cx.backend().cuMemPoolGetAccess(&has, pool, &where)) return e;
    if (has == CU_MEM_ACCESS_FLAGS_PROT_NONE) return CUDA_ERROR_NOT_SUPPORTED;
  }
  return CUDA_SUCCESS;
}

CUresult verify_pool_props(SessionContext&, CUmemoryPool*, const CUmemPoolProps* props) {
  if (!props) return CUDA_ERROR_INVALID_VALUE;
  // A pool may be exported as a POSIX descriptor, which stays in the server: another session
  // of the tenant gets it through server/calls/shareable.cc, never the descriptor itself. Other
  // handle types would hand the memory (and the server's process identity) out of the server.
  if (props->win32SecurityAttributes != nullptr ||
      (props->handleTypes != CU_MEM_HANDLE_TYPE_NONE &&
       props->handleTypes != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// A device's current memory pool, per session (generated wire formats: cuDeviceSetMemPool u32
// dev, u64 pool id; cuDeviceGetMemPool u32 dev -> u64 pool id; cuMemSetMemPool/cuMemGetMemPool
// CUmemLocation[1], u32 type[, u64 pool id]; cuMemAllocAsync u64 bytes, u64 stream id ->
// u64 address). The backend's current pool is process-wide: a session that set its own pool
// there would make every other session's cuMemAllocAsync allocate from a pool it can trim,
// reconfigure and destroy. So the session's choice lives in the session, and cuMemAllocAsync
// allocates from it.

namespace {
CUresult set_pool(SessionContext& cx, CUdevice dev, uint64_t pool_id) {
  CUmemoryPool pool = nullptr;
  if (CUresult e = cx.lookup(HandleKind::kMemoryPool, pool_id, &pool)) return e;
  if (!pool) return CUDA_ERROR_INVALID_VALUE;
  // The device must exist and the pool must serve it.
  CUmemoryPool backend_current = nullptr;
  if (CUresult e = cx.backend().cuDeviceGetMemPool(&backend_current, dev)) return e;
  CUmemLocation where{CU_MEM_LOCATION_TYPE_DEVICE, dev};
  CUmemAccess_flags access{};
  if (CUresult e = cx.backend().cuMemPoolGetAccess(&access, pool, &where)) return e;
  if (access != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) return CUDA_ERROR_INVALID_VALUE;
  cx.set_current_pool(dev, pool_id);
  return CUDA_SUCCESS;
}

// The session's default pool of backend device `dev` (SessionContext::default_pool), made now if
// it is not yet: a pool of the device's memory that the session owns.
CUresult session_default_pool(SessionContext& cx, CUdevice dev, uint64_t* id_out,
                              CUmemoryPool* pool_out) {
  CUmemoryPool pool = nullptr;
  if (uint64_t id = cx.default_pool(dev);
      id && cx.lookup(HandleKind::kMemoryPool, id, &pool) == CUDA_SUCCESS && pool) {
    *id_out = id;
    *pool_out = pool;
    return CUDA_SUCCESS;
  }
  // The device exists and has pools.
  if (CUresult e = cx.backend().cuDeviceGetDefaultMemPool(&pool, dev)) return e;
  if (CUresult e = cx.check_room(HandleKind::kMemoryPool)) return e;
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = dev;
  if (CUresult e = cx.backend().cuMemPoolCreate(&pool, &props)) return e;
  const uint64_t id = cx.export_handle(HandleKind::kMemoryPool, pool);
  cx.set_default_pool(dev, id);
  *id_out = id;
  *pool_out = pool;
  return CUDA_SUCCESS;
}

CUresult get_pool(SessionContext& cx, CUdevice dev, ReplyWriter& out) {
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

// in: CUmemLocation, u32 type [, u64 pool id]: the backend device of the location, which must
// be one of the session's.
CUresult read_pool_device(SessionContext& cx, ArgReader& in, CUdevice* dev,
                          uint64_t* pool_id = nullptr) {
  CUmemLocation loc{};
  CUmemAllocationType type{};
  if (CUresult e = read_location(in, &loc, &type)) return e;
  if (pool_id && !in.get(pool_id)) return in.malformed();
  if (!in.at_end()) return in.malformed();
  *dev = loc.id;
  return cx.device_in(dev);
}
}  // namespace

CUresult custom_cuDeviceSetMemPool(SessionContext& cx, ArgReader& in, ReplyWriter&) {
  CUdevice dev = 0;
  uint64_t pool_id = 0;
  if (!in.get(&dev) || !in.get(&pool_id) || !in.at_end()) return in.malformed();
  if (CUresult e = cx.device_in(&dev)) return e;
  return set_pool(cx, dev, pool_id);
}

CUresult custom_cuDeviceGetMemPool(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  CUdevice dev = 0;
  if (CUresult e = in.get_only_device(cx, &dev)) return e;
  return get_pool(cx, dev, out);
}

CUresult custom_cuMemSetMemPool(SessionContext& cx, ArgReader& in, ReplyWriter&) {
  CUdevice dev = 0;
  uint64_t pool_id = 0;
  if (CUresult e = read_pool_device(cx, in, &dev, &pool_id)) return e;
  return set_pool(cx, dev, pool_id);
}

CUresult custom_cuMemGetMemPool(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  CUdevice dev = 0;
  if (CUresult e = read_pool_device(cx, in, &dev)) return e;
  return get_pool(cx, dev, out);
}

// cuDeviceGetDefaultMemPool (u32 dev -> u64 pool id), cuMemGetDefaultMemPool (CUmemLocation[1],
// u32 type -> u64 pool id): the session's own default pool.
namespace {
// out: the id of the session's default pool of backend device `dev`.
CUresult put_default_pool(SessionContext& cx, CUdevice dev, ReplyWriter& out) {
  uint64_t id = 0;
  CUmemoryPool pool = nullptr;
  if (CUresult e = session_default_pool(cx, dev, &id, &pool)) return e;
  out.put(id);
  return CUDA_SUCCESS;
}
}  // namespace

CUresult custom_cuDeviceGetDefaultMemPool(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  CUdevice dev = 0;
  if (CUresult e = in.get_only_device(cx, &dev)) return e;
  return put_default_pool(cx, dev, out);
}

CUresult custom_cuMemGetDefaultMemPool(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  CUdevice dev = 0;
  if (CUresult e = read_pool_device(cx, in, &dev)) return e;
  return put_default_pool(cx, dev, out);
}

// cuMemPoolDestroy (u64 pool id): a default pool cannot be destroyed; a destroyed current pool
// gives its place back to the default one.
CUresult custom_cuMemPoolDestroy(SessionContext& cx, ArgReader& in, ReplyWriter&) {
  uint64_t pool_id = 0;
  CUmemoryPool pool = nullptr;
  if (CUresult e = in.get_only_handle(cx, HandleKind::kMemoryPool, true, &pool_id, &pool)) return e;
  if (cx.is_default_pool(pool_id)) return CUDA_ERROR_INVALID_VALUE;
  // Its exports end first: no import may name a pool on its way out.
  shareable_forget(&cx, ShareableKind::kPool, reinterpret_cast<uintptr_t>(pool));
  if (CUresult e = cx.backend().cuMemPoolDestroy(pool)) return e;
  cx.forget_pool(pool_id);
  cx.release(pool_id);
  return CUDA_SUCCESS;
}

CUresult custom_cuMemAllocAsync(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  size_t bytes = 0;
  uint64_t stream_id = 0;
  if (!in.get(&bytes) || !in.get(&stream_id) || !in.at_end()) return in.malformed();
  CUstream stream = nullptr;
  if (CUresult e = cx.lookup(HandleKind::kStream, stream_id, &stream)) return e;
  CUdevice dev = 0;
  if (CUresult e = cx.backend().cuCtxGetDevice(&dev)) return e;
  CUdeviceptr p = 0;
  CUmemoryPool pool = nullptr;
  const uint64_t mine = cx.current_pool(dev);
  CUresult rc;
  if (mine && cx.lookup(HandleKind::kMemoryPool, mine, &pool) == CUDA_SUCCESS && pool) {
    rc = cx.backend().cuMemAllocFromPoolAsync(&p, bytes, pool, stream);
  } else {
    // In a capture the allocation is the graph's (an allocation node), from no pool of the
    // session's; otherwise it comes from the session's default pool.
    CUstreamCaptureStatus capturing = CU_STREAM_CAPTURE_STATUS_NONE;
    if (CUresult e = cx.backend().cuStreamIsCapturing(stream, &capturing)) return e;
    uint64_t id = 0;
    if (capturing != CU_STREAM_CAPTURE_STATUS_NONE) {
      rc = cx.backend().cuMemAllocAsync(&p, bytes, stream);
    } else if ((rc = session_default_pool(cx, dev, &id, &pool)) == CUDA_SUCCESS) {
      rc = cx.backend().cuMemAllocFromPoolAsync(&p, bytes, pool, stream);
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
CUresult custom_cuMemAllocFromPoolAsync(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
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
  if (CUresult e = cx.backend().cuMemAllocFromPoolAsync(&p, bytes, pool, stream)) return e;
  if (CUresult e = cx.on_alloc(p, bytes)) return e;
  cx.note_stream_alloc(stream, p, bytes);
  out.put(p);
  return CUDA_SUCCESS;
}

}  // namespace cuwire::server
