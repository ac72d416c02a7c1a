// Hand-written (override) driver functions: copies whose pointers the client must sort into
// host and device, 2D/3D copies with host rows, module loading from files and with options,
// kernel launches, host callbacks, occupancy helpers. Their wire formats: custom_calls.h.

#include <cuda.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "client_call.h"
#include "client_state.h"
#include "custom_calls.h"
#include "host_memory.h"
#include "inline_vector.h"

using namespace cuwire;
using namespace cuwire::client;

namespace {

uint64_t handle_id(const void* h) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(h)); }

// ---- 2D / 3D copies

CUresult resolve_type(CUmemorytype* t, const void* host, CUdeviceptr dev) {
  switch (*t) {
    case CU_MEMORYTYPE_HOST:
    case CU_MEMORYTYPE_DEVICE:
      return CUDA_SUCCESS;
    case CU_MEMORYTYPE_UNIFIED:
      *t = is_device_pointer(dev) ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
      return CUDA_SUCCESS;
    case CU_MEMORYTYPE_ARRAY:  // the array's id travels; the server checks it and the region
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

const uint8_t* host_row(const CUDA_MEMCPY3D& c, bool src, size_t y, size_t z) {
  if (src) {
    return static_cast<const uint8_t*>(c.srcHost) + c.srcXInBytes +
           (c.srcY + y + (c.srcZ + z) * c.srcHeight) * c.srcPitch;
  }
  return static_cast<const uint8_t*>(c.dstHost) + c.dstXInBytes +
         (c.dstY + y + (c.dstZ + z) * c.dstHeight) * c.dstPitch;
}

// The app's host rows are copied here, in user space, to and from packed buffers: a bad pointer
// must fail the call (INVALID_VALUE, as the driver reports it), not crash the program.
bool host_rows_ok(const CUDA_MEMCPY3D& c, bool src, size_t h, size_t d) {
  if (!(src ? c.srcHost : c.dstHost)) return false;
  HostPageProbe probe(src ? HostAccess::kRead : HostAccess::kReadWrite);
  for (size_t z = 0; z < d; ++z) {
    for (size_t y = 0; y < h; ++y) probe.add(host_row(c, src, y, z), c.WidthInBytes);
  }
  return probe.ok();
}

CUresult copy3d(CUDA_MEMCPY3D c, custom::CopyKind kind, bool async, CUstream stream) {
  if (c.Depth == 0) c.Depth = 1;
  if (CUresult e = resolve_type(&c.srcMemoryType, c.srcHost, c.srcDevice)) return e;
  if (CUresult e = resolve_type(&c.dstMemoryType, c.dstHost, c.dstDevice)) return e;
  if (c.srcMemoryType == CU_MEMORYTYPE_UNIFIED || c.srcMemoryType == CU_MEMORYTYPE_HOST) {
    c.srcMemoryType = CU_MEMORYTYPE_HOST;
    if (!c.srcHost) c.srcHost = reinterpret_cast<const void*>(c.srcDevice);
  }
  if (c.dstMemoryType == CU_MEMORYTYPE_HOST && !c.dstHost) {
    c.dstHost = reinterpret_cast<void*>(c.dstDevice);
  }
  const size_t w = c.WidthInBytes, h = c.Height, d = c.Depth;
  const size_t rows = h * d;
  if (w == 0 || rows == 0) return CUDA_SUCCESS;
  bool src_host = c.srcMemoryType == CU_MEMORYTYPE_HOST;
  bool dst_host = c.dstMemoryType == CU_MEMORYTYPE_HOST;
  if (async && src_host) wait_host_calls(stream);  // one of them may write the source
  if ((src_host && c.srcPitch < w && rows > 1) || (dst_host && c.dstPitch < w && rows > 1)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if ((src_host && !host_rows_ok(c, true, h, d)) || (dst_host && !host_rows_ok(c, false, h, d))) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (async && src_host != dst_host) {
    bool staged = false;
    const CUresult e = capture_host_copy3d(&c, stream, &staged);
    if (staged || e != CUDA_SUCCESS) return e;  // staged: captured device to device
  }
  if (src_host && dst_host) {  // host to host: no device involved
    if (async) {
      if (CUresult e = cuStreamSynchronize(stream)) return e;
    }
    for (size_t z = 0; z < d; ++z) {
      for (size_t y = 0; y < h; ++y) {
        std::memmove(const_cast<uint8_t*>(host_row(c, false, y, z)), host_row(c, true, y, z), w);
      }
    }
    return CUDA_SUCCESS;
  }
  custom::CopyArgs a{};
  a.kind = static_cast<uint32_t>(kind);
  a.async = async;
  a.stream = handle_id(stream);
  a.desc = c;
  std::vector<uint8_t> packed_src;
  if (src_host) {
    packed_src.resize(w * rows);
    for (size_t z = 0; z < d; ++z) {
      for (size_t y = 0; y < h; ++y) std::memcpy(&packed_src[(z * h + y) * w], host_row(c, true, y, z), w);
    }
    a.desc.srcHost = nullptr;
    a.desc.srcXInBytes = a.desc.srcY = a.desc.srcZ = 0;
    a.desc.srcPitch = w;
    a.desc.srcHeight = h;
  }
  if (dst_host) {
    a.desc.dstHost = nullptr;
    a.desc.dstXInBytes = a.desc.dstY = a.desc.dstZ = 0;
    a.desc.dstPitch = w;
    a.desc.dstHeight = h;
  }
  CallId id = kind == custom::CopyKind::k3D
                  ? (async ? CallId::k_cuMemcpy3DAsync_v2 : CallId::k_cuMemcpy3D_v2)
              : kind == custom::CopyKind::k2DUnaligned ? CallId::k_cuMemcpy2DUnaligned_v2
              : (async ? CallId::k_cuMemcpy2DAsync_v2 : CallId::k_cuMemcpy2D_v2);
  ArgWriter wr(id);
  wr.put(a);
  if (src_host) wr.own_bulk(packed_src.data(), packed_src.size());
  if (async && !dst_host) {
    const CUresult checked = check_host_copy(stream);  // a capture cannot hold host rows
    if (CUresult e = wr.send_async()) return e;
    return src_host ? checked : CUDA_SUCCESS;
  }
  std::vector<uint8_t> packed_dst;
  if (dst_host) {
    packed_dst.resize(w * rows);
    wr.reply_bulk(packed_dst.data(), packed_dst.size());
  }
  OutReader r;
  if (CUresult e = wr.call(&r)) return e;
  if (dst_host) {
    for (size_t z = 0; z < d; ++z) {
      for (size_t y = 0; y < h; ++y) {
        std::memcpy(const_cast<uint8_t*>(host_row(c, false, y, z)), &packed_dst[(z * h + y) * w], w);
      }
    }
  }
  return CUDA_SUCCESS;
}

CUDA_MEMCPY3D from_2d(const CUDA_MEMCPY2D& p) {
  CUDA_MEMCPY3D c{};
  c.srcXInBytes = p.srcXInBytes;
  c.srcY = p.srcY;
  c.srcMemoryType = p.srcMemoryType;
  c.srcHost = p.srcHost;
  c.srcDevice = p.srcDevice;
  c.srcArray = p.srcArray;
  c.srcPitch = p.srcPitch;
  c.srcHeight = p.Height;
  c.dstXInBytes = p.dstXInBytes;
  c.dstY = p.dstY;
  c.dstMemoryType = p.dstMemoryType;
  c.dstHost = p.dstHost;
  c.dstDevice = p.dstDevice;
  c.dstArray = p.dstArray;
  c.dstPitch = p.dstPitch;
  c.dstHeight = p.Height;
  c.WidthInBytes = p.WidthInBytes;
  c.Height = p.Height;
  c.Depth = 1;
  return c;
}

// ---- launches

// A launch whose grid or block is outside the device's limits (a dimension of 0 or past its
// maximum, too many threads in a block) fails with the driver's code 9, which cuda.h does not
// name and cudart reports as cudaErrorInvalidConfiguration ("invalid configuration argument"),
// the error such a launch gives on a GPU; CUDA_ERROR_INVALID_VALUE would read as
// cudaErrorInvalidValue.
constexpr CUresult kInvalidConfiguration = static_cast<CUresult>(9);

// *answer_now: whether the launch's answer depends on what only the server knows (a dynamic
// shared memory size past the device's default, which the function may or may not have been
// allowed, with its static shared memory; a cooperative grid, which must fit on the device at
// once): such a launch waits for the server's answer, so that its error is the launch's, as
// on a GPU, not a later call's.
CUresult check_launch(unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                      unsigned bz, unsigned shared, bool* answer_now) {
  CUdevice dev = 0;
  if (CUresult e = current_device(&dev)) return e;
  LaunchLimits l;
  if (CUresult e = launch_limits(dev, &l)) return e;
  *answer_now = shared > static_cast<unsigned>(std::max(l.max_shared_default, 0));
  const unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
  for (int i = 0; i < 3; ++i) {
    if (grid[i] == 0 || block[i] == 0) return kInvalidConfiguration;
    if (block[i] > static_cast<unsigned>(l.max_block[i])) return kInvalidConfiguration;
    if (grid[i] > static_cast<unsigned>(l.max_grid[i])) return kInvalidConfiguration;
  }
  if (uint64_t{bx} * by * bz > static_cast<uint64_t>(l.max_threads_per_block)) {
    return kInvalidConfiguration;
  }
  if (l.max_shared_optin > 0 && shared > static_cast<unsigned>(l.max_shared_optin)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

// A launch's packed parameters: most kernels take well under 1 KiB, which costs no allocation.
using ParamBuffer = InlineVector<uint8_t, 1024>;

// Packs the kernel's arguments into one buffer by its parameter layout.
CUresult pack_params(CUfunction f, void** kernelParams, void** extra,
                     const std::vector<custom::ParamSlot>** slots, ParamBuffer* buf) {
  if (CUresult e = param_layout(handle_id(f), slots)) return e;
  size_t size = 0;
  for (auto& s : **slots) size = std::max<size_t>(size, size_t{s.offset} + s.size);
  if (kernelParams) {
    buf->resize_zeroed(size);
    for (size_t i = 0; i < (*slots)->size(); ++i) {
      const auto& s = (**slots)[i];
      if (!kernelParams[i]) return CUDA_ERROR_INVALID_VALUE;
      std::memcpy(buf->data() + s.offset, kernelParams[i], s.size);
    }
    return CUDA_SUCCESS;
  }
  if (extra) {
    const void* p = nullptr;
    size_t n = 0;
    bool have_size = false;
    for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
      if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) {
        p = extra[i + 1];
      } else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) {
        n = *static_cast<size_t*>(extra[i + 1]);
        have_size = true;
      } else {
        return CUDA_ERROR_INVALID_VALUE;
      }
    }
    if (!p || !have_size || n < size) return CUDA_ERROR_INVALID_VALUE;
    buf->clear();
    buf->append(static_cast<const uint8_t*>(p), size);
    return CUDA_SUCCESS;
  }
  if (size != 0) return CUDA_ERROR_INVALID_VALUE;
  buf->clear();
  return CUDA_SUCCESS;
}

CUresult launch(CallId id, CUfunction f, const unsigned grid[3], const unsigned block[3],
                unsigned shared, CUstream stream, void** kernelParams, void** extra,
                const CUlaunchAttribute* attrs, unsigned num_attrs) {
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  if (kernelParams && extra) return CUDA_ERROR_INVALID_VALUE;
  bool answer_now = false;
  if (CUresult e = check_launch(grid[0], grid[1], grid[2], block[0], block[1], block[2], shared,
                                &answer_now)) {
    return e;
  }
  if (id == CallId::k_cuLaunchCooperativeKernel) answer_now = true;
  for (unsigned i = 0; i < num_attrs; ++i) {
    if (attrs[i].id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE && attrs[i].value.cooperative) {
      answer_now = true;
    }
  }
  const std::vector<custom::ParamSlot>* slots = nullptr;
  ParamBuffer buf;
  if (CUresult e = pack_params(f, kernelParams, extra, &slots, &buf)) return e;
  adopt_pinned_pointers(buf.data(), buf.size());
  custom::LaunchArgs a{};
  a.function = handle_id(f);
  a.stream = handle_id(stream);
  for (int i = 0; i < 3; ++i) {
    a.grid[i] = grid[i];
    a.block[i] = block[i];
  }
  a.shared_mem_bytes = shared;
  a.num_params = static_cast<uint32_t>(slots->size());
  a.num_attrs = num_attrs;
  ArgWriter w(id);
  w.put(a);
  w.put_array(slots->data(), slots->size());
  w.put_array(attrs, num_attrs);
  w.own_bulk(buf.data(), buf.size());
  if (answer_now) {
    OutReader r;
    if (CUresult e = w.call(&r)) return e;
    return r.finish();
  }
  return w.send_async();
}

}  // namespace

namespace cuwire::client {

CUresult pack_kernel_params(CUfunction f, void** kernelParams, void** extra,
                            std::vector<uint8_t>* out) {
  if (kernelParams && extra) return CUDA_ERROR_INVALID_VALUE;
  const std::vector<custom::ParamSlot>* slots = nullptr;
  ParamBuffer buf;
  if (CUresult e = pack_params(f, kernelParams, extra, &slots, &buf)) return e;
  out->assign(buf.data(), buf.data() + buf.size());
  return CUDA_SUCCESS;
}

}  // namespace cuwire::client

namespace {

// A unified copy between two host buffers runs here, in user space (see host_rows_ok).
bool host_to_host_ok(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return n == 0 || (host_range_ok(reinterpret_cast<const void*>(src), n, HostAccess::kRead) &&
                    host_range_ok(reinterpret_cast<const void*>(dst), n, HostAccess::kReadWrite));
}

CUresult read_file(const char* path, std::string* out) {
  if (!path) return CUDA_ERROR_INVALID_VALUE;
  std::ifstream f(path, std::ios::binary);
  if (!f) return CUDA_ERROR_FILE_NOT_FOUND;
  out->assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  out->push_back('\0');  // PTX text needs its terminator; binary images ignore it
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

// ---- unified copies: the client's allocation table says which side each pointer is on.

CUresult CUDAAPI cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount) {
  bool dd = is_device_pointer(dst), sd = is_device_pointer(src);
  if (dd && sd) return cuMemcpyDtoD_v2(dst, src, ByteCount);
  if (dd) return cuMemcpyHtoD_v2(dst, reinterpret_cast<const void*>(src), ByteCount);
  if (sd) return cuMemcpyDtoH_v2(reinterpret_cast<void*>(dst), src, ByteCount);
  if (!host_to_host_ok(dst, src, ByteCount)) return CUDA_ERROR_INVALID_VALUE;
  if (ByteCount) std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), ByteCount);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream) {
  bool dd = is_device_pointer(dst), sd = is_device_pointer(src);
  if (dd && sd) return cuMemcpyDtoDAsync_v2(dst, src, ByteCount, hStream);
  if (dd) return cuMemcpyHtoDAsync_v2(dst, reinterpret_cast<const void*>(src), ByteCount, hStream);
  if (sd) return cuMemcpyDtoHAsync_v2(reinterpret_cast<void*>(dst), src, ByteCount, hStream);
  if (!host_to_host_ok(dst, src, ByteCount)) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult e = cuStreamSynchronize(hStream)) return e;
  if (ByteCount) std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), ByteCount);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpy2D_v2(const CUDA_MEMCPY2D* pCopy) {
  if (!pCopy) return CUDA_ERROR_INVALID_VALUE;
  return copy3d(from_2d(*pCopy), custom::CopyKind::k2D, false, nullptr);
}

CUresult CUDAAPI cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D* pCopy) {
  if (!pCopy) return CUDA_ERROR_INVALID_VALUE;
  return copy3d(from_2d(*pCopy), custom::CopyKind::k2DUnaligned, false, nullptr);
}

CUresult CUDAAPI cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D* pCopy, CUstream hStream) {
  if (!pCopy) return CUDA_ERROR_INVALID_VALUE;
  return copy3d(from_2d(*pCopy), custom::CopyKind::k2D, true, hStream);
}

CUresult CUDAAPI cuMemcpy3D_v2(const CUDA_MEMCPY3D* pCopy) {
  if (!pCopy) return CUDA_ERROR_INVALID_VALUE;
  return copy3d(*pCopy, custom::CopyKind::k3D, false, nullptr);
}

CUresult CUDAAPI cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D* pCopy, CUstream hStream) {
  if (!pCopy) return CUDA_ERROR_INVALID_VALUE;
  return copy3d(*pCopy, custom::CopyKind::k3D, true, hStream);
}

// ---- modules

CUresult CUDAAPI cuModuleLoad(CUmodule* module, const char* fname) {
  std::string bytes;
  if (CUresult e = read_file(fname, &bytes)) return e;
  return cuModuleLoadData(module, bytes.data());
}

// JIT options (log buffers, optimisation levels) are not sent: the server compiles with its
// defaults. The options CUDA writes back are answered: the logs hold a line (empty on success,
// the error's name on failure), their sizes the bytes written, the wall time 0 ms.
CUresult CUDAAPI cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int numOptions,
                                    CUjit_option* options, void** optionValues) {
  if (numOptions && (!options || !optionValues)) return CUDA_ERROR_INVALID_VALUE;
  const CUresult rc = cuModuleLoadData(module, image);
  char* logs[2] = {nullptr, nullptr};  // info, error
  size_t sizes[2] = {0, 0};
  for (unsigned i = 0; i < numOptions; ++i) {
    if (options[i] == CU_JIT_INFO_LOG_BUFFER) logs[0] = static_cast<char*>(optionValues[i]);
    if (options[i] == CU_JIT_ERROR_LOG_BUFFER) logs[1] = static_cast<char*>(optionValues[i]);
    if (options[i] == CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES) {
      sizes[0] = static_cast<unsigned>(reinterpret_cast<uintptr_t>(optionValues[i]));
    }
    if (options[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES) {
      sizes[1] = static_cast<unsigned>(reinterpret_cast<uintptr_t>(optionValues[i]));
    }
  }
  std::string text[2];
  if (rc != CUDA_SUCCESS) {
    const char* name = nullptr;
    cuGetErrorName(rc, &name);
    text[1] = std::string("cuwire: the module did not load: ") + (name ? name : "?");
  }
  size_t written[2] = {0, 0};
  for (int k = 0; k < 2; ++k) {
    if (!logs[k] || sizes[k] == 0) continue;
    written[k] = std::min(sizes[k] - 1, text[k].size());
    std::memcpy(logs[k], text[k].data(), written[k]);
    logs[k][written[k]] = '\0';
  }
  for (unsigned i = 0; i < numOptions; ++i) {
    if (options[i] == CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES) {
      optionValues[i] = reinterpret_cast<void*>(static_cast<uintptr_t>(written[0]));
    } else if (options[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES) {
      optionValues[i] = reinterpret_cast<void*>(static_cast<uintptr_t>(written[1]));
    } else if (options[i] == CU_JIT_WALL_TIME) {
      const float ms = 0;
      optionValues[i] = nullptr;
      std::memcpy(&optionValues[i], &ms, sizeof ms);
    }
  }
  return rc;
}

CUresult CUDAAPI cuLibraryLoadData(CUlibrary* library, const void* code, CUjit_option* jitOptions,
                                   void** jitOptionsValues, unsigned int numJitOptions,
                                   CUlibraryOption* libraryOptions, void** libraryOptionValues,
                                   unsigned int numLibraryOptions) {
  if (!library) return CUDA_ERROR_INVALID_VALUE;
  ArgWriter w(CallId::k_cuLibraryLoadData);
  if (CUresult e = w.image(code)) return e;
  OutReader r;
  if (CUresult e = w.call(&r)) return e;
  r.get_handles(library, 1);
  return r.finish();
}

CUresult CUDAAPI cuLibraryLoadFromFile(CUlibrary* library, const char* fileName,
                                       CUjit_option* jitOptions, void** jitOptionsValues,
                                       unsigned int numJitOptions, CUlibraryOption* libraryOptions,
                                       void** libraryOptionValues, unsigned int numLibraryOptions) {
  std::string bytes;
  if (CUresult e = read_file(fileName, &bytes)) return e;
  return cuLibraryLoadData(library, bytes.data(), nullptr, nullptr, 0, nullptr, nullptr, 0);
}

CUresult CUDAAPI cuModuleGetLoadingMode(CUmoduleLoadingMode* mode) {
  if (!mode) return CUDA_ERROR_INVALID_VALUE;
  const char* env = std::getenv("CUDA_MODULE_LOADING");
  *mode = env && std::strcmp(env, "EAGER") == 0 ? CU_MODULE_EAGER_LOADING : CU_MODULE_LAZY_LOADING;
  return CUDA_SUCCESS;
}

// ---- kernel parameter layouts (cached per handle)

CUresult CUDAAPI cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t* paramOffset,
                                    size_t* paramSize) {
  if (!func) return CUDA_ERROR_INVALID_HANDLE;
  const std::vector<custom::ParamSlot>* slots = nullptr;
  if (CUresult e = param_layout(handle_id(func), &slots)) return e;
  if (paramIndex >= slots->size()) return CUDA_ERROR_INVALID_VALUE;
  if (paramOffset) *paramOffset = (*slots)[paramIndex].offset;
  if (paramSize) *paramSize = (*slots)[paramIndex].size;
  return CUDA_SUCCESS;
}

namespace {
// A kernel's or function's name, from the server once per handle; the string lives as long as
// the process, as the driver's lives as long as the module (the app never frees it).
CUresult kernel_name(CallId call, uint64_t id, const char** name) {
  if (!name) return CUDA_ERROR_INVALID_VALUE;
  if (!id) return CUDA_ERROR_INVALID_HANDLE;
  static std::mutex mu;
  static auto* names = new std::map<uint64_t, std::unique_ptr<const std::string>>();  // leaked
  {
    std::lock_guard lock(mu);
    auto it = names->find(id);
    if (it != names->end()) {
      *name = it->second->c_str();
      return CUDA_SUCCESS;
    }
  }
  ArgWriter w(call);
  w.put(id);
  OutReader r;
  if (CUresult e = w.call(&r)) return e;
  uint32_t n = 0;
  r.get_array(&n, 1);
  if (r.finish() != CUDA_SUCCESS || n > r.buffer().size()) return CUDA_ERROR_UNKNOWN;
  std::string text(n, '\0');
  r.get_array(text.data(), n);
  if (CUresult e = r.finish()) return e;
  std::lock_guard lock(mu);
  auto& slot = (*names)[id];
  if (!slot) slot = std::make_unique<const std::string>(std::move(text));
  *name = slot->c_str();
  return CUDA_SUCCESS;
}
}  // namespace

CUresult CUDAAPI cuFuncGetName(const char** name, CUfunction hfunc) {
  return kernel_name(CallId::k_cuFuncGetName, reinterpret_cast<uintptr_t>(hfunc), name);
}

CUresult CUDAAPI cuKernelGetName(const char** name, CUkernel hfunc) {
  return kernel_name(CallId::k_cuKernelGetName, reinterpret_cast<uintptr_t>(hfunc), name);
}

CUresult CUDAAPI cuKernelGetParamInfo(CUkernel kernel, size_t paramIndex, size_t* paramOffset,
                                      size_t* paramSize) {
  return cuFuncGetParamInfo(reinterpret_cast<CUfunction>(kernel), paramIndex, paramOffset, paramSize);
}

// ---- launches: fire-and-forget; configuration errors are found here, at once.

CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                unsigned int gridDimZ, unsigned int blockDimX,
                                unsigned int blockDimY, unsigned int blockDimZ,
                                unsigned int sharedMemBytes, CUstream hStream,
                                void** kernelParams, void** extra) {
  const unsigned grid[3] = {gridDimX, gridDimY, gridDimZ}, block[3] = {blockDimX, blockDimY, blockDimZ};
  return launch(CallId::k_cuLaunchKernel, f, grid, block, sharedMemBytes, hStream, kernelParams,
                extra, nullptr, 0);
}

CUresult CUDAAPI cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX,
                                           unsigned int gridDimY, unsigned int gridDimZ,
                                           unsigned int blockDimX, unsigned int blockDimY,
                                           unsigned int blockDimZ, unsigned int sharedMemBytes,
                                           CUstream hStream, void** kernelParams) {
  const unsigned grid[3] = {gridDimX, gridDimY, gridDimZ}, block[3] = {blockDimX, blockDimY, blockDimZ};
  return launch(CallId::k_cuLaunchCooperativeKernel, f, grid, block, sharedMemBytes, hStream,
                kernelParams, nullptr, nullptr, 0);
}

CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** kernelParams,
                                  void** extra) {
  if (!config) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < config->numAttrs; ++i) {
    switch (config->attrs[i].id) {
      case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT:
      case CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT:
      case CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE:
        return unsupported("cuLaunchKernelEx with event or graph-node attributes");
      default:
        break;
    }
  }
  const unsigned grid[3] = {config->gridDimX, config->gridDimY, config->gridDimZ};
  const unsigned block[3] = {config->blockDimX, config->blockDimY, config->blockDimZ};
  return launch(CallId::k_cuLaunchKernelEx, f, grid, block, config->sharedMemBytes,
                config->hStream, kernelParams, extra, config->attrs, config->numAttrs);
}

// ---- host functions run on the client's host-call thread when the server's stream reaches
// them (host_calls.cc); the call returns at once. A server that takes no host calls gets the
// fallback below: the calling thread waits for the stream to drain, then runs the function.

CUresult CUDAAPI cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void* userData) {
  if (!fn) return CUDA_ERROR_INVALID_VALUE;
  if (on_host_call_thread()) return CUDA_ERROR_NOT_PERMITTED;
  CUresult captured = CUDA_SUCCESS;
  if (capture_host_function(hStream, fn, userData, &captured)) return captured;
  bool queued = false;
  if (CUresult e = enqueue_host_call(hStream, fn, nullptr, userData, &queued)) return e;
  if (queued) return CUDA_SUCCESS;
  if (CUresult e = cuStreamSynchronize(hStream)) return e;
  fn(userData);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamAddCallback(CUstream hStream, CUstreamCallback callback, void* userData,
                                     unsigned int flags) {
  if (!callback || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (on_host_call_thread()) return CUDA_ERROR_NOT_PERMITTED;
  bool queued = false;
  if (CUresult e = enqueue_host_call(hStream, nullptr, callback, userData, &queued)) return e;
  if (queued) return CUDA_SUCCESS;
  CUresult status = cuStreamSynchronize(hStream);
  if (status == CUDA_ERROR_DEVICE_UNAVAILABLE || status == CUDA_ERROR_INVALID_HANDLE) return status;
  callback(hStream, status, userData);
  return CUDA_SUCCESS;
}

// ---- occupancy: the best block size, searched on the client with the server's per-size answer.

CUresult CUDAAPI cuOccupancyMaxPotentialBlockSizeWithFlags(int* minGridSize, int* blockSize,
                                                           CUfunction func,
                                                           CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                                           size_t dynamicSMemSize,
                                                           int blockSizeLimit, unsigned int flags) {
  if (!minGridSize || !blockSize || !func) return CUDA_ERROR_INVALID_VALUE;
  CUdevice dev = 0;
  if (CUresult e = current_device(&dev)) return e;
  LaunchLimits l;
  if (CUresult e = launch_limits(dev, &l)) return e;
  int sms = 0, warp = 32, func_max = 0;
  if (CUresult e = cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev)) return e;
  cuDeviceGetAttribute(&warp, CU_DEVICE_ATTRIBUTE_WARP_SIZE, dev);
  if (cuFuncGetAttribute(&func_max, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, func) != CUDA_SUCCESS) {
    func_max = l.max_threads_per_block;
  }
  int limit = std::min(l.max_threads_per_block, func_max > 0 ? func_max : l.max_threads_per_block);
  if (blockSizeLimit > 0) limit = std::min(limit, blockSizeLimit);
  int best_threads = 0, best_block = 0, best_blocks = 0;
  for (int bs = (limit / warp) * warp; bs > 0; bs -= warp) {
    size_t smem = blockSizeToDynamicSMemSize ? blockSizeToDynamicSMemSize(bs) : dynamicSMemSize;
    int blocks = 0;
    if (CUresult e = cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&blocks, func, bs, smem, flags)) {
      return e;
    }
    if (blocks * bs > best_threads) {
      best_threads = blocks * bs;
      best_block = bs;
      best_blocks = blocks;
    }
  }
  if (best_block == 0) {
    *blockSize = 0;
    *minGridSize = 0;
    return CUDA_SUCCESS;
  }
  *blockSize = best_block;
  *minGridSize = best_blocks * sms;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuOccupancyMaxPotentialBlockSize(int* minGridSize, int* blockSize, CUfunction func,
                                                  CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                                  size_t dynamicSMemSize, int blockSizeLimit) {
  return cuOccupancyMaxPotentialBlockSizeWithFlags(minGridSize, blockSize, func,
                                                   blockSizeToDynamicSMemSize, dynamicSMemSize,
                                                   blockSizeLimit, 0);
}

// ---- profiler markers mean nothing remotely.
CUresult CUDAAPI cuProfilerStart(void) { return CUDA_SUCCESS; }
CUresult CUDAAPI cuProfilerStop(void) { return CUDA_SUCCESS; }

}  // extern "C"
