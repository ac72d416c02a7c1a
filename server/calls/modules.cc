// Module images, libraries, kernel parameter layouts and names, and module globals: the code a
// client loads and what the server tells it about that code.

#include <cuda.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "protocol/image.h"
#include "protocol/wire_formats.h"
#include "server/backend/backend.h"
#include "server/calls/call_helpers.h"
#include "server/session/dispatch.h"

namespace cuwire::server {

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

CUresult check_image(SessionContext& cx, std::span<const uint8_t> bytes) {
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
      globals =
          image::ptx_global_bytes({reinterpret_cast<const char*>(bytes.data()), bytes.size() - 1});
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

// cuModuleLoadDataEx (in: the image as bulk, u32 bytes of error log wanted; out: u32 the load's
// result, u64 module id (0: none), u32 n, n bytes of the JIT's error log). The backend compiles
// with its defaults; of the JIT options only the error log is asked for, at most kMaxJitLog
// bytes, which says why a module did not load (a real driver's ptxas names an unresolved extern
// function there). The load's result rides in the reply rather than as the call's: a failed
// call's reply carries no outs, and the log matters most when the load failed.
CUresult custom_cuModuleLoadDataEx(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  constexpr uint32_t kMaxJitLog = 16 << 10;
  std::span<const uint8_t> image;
  uint32_t log_bytes = 0;
  if (!in.get_bulk(&image) || !in.get(&log_bytes) || !in.at_end()) return in.malformed();
  if (CUresult e = check_image(cx, image)) return e;
  if (CUresult e = cx.check_room(HandleKind::kModule)) return e;
  SessionContext::Charge held;
  if (CUresult e = cx.precharge(cx.image_globals_bytes(), &held)) return e;
  std::string log(std::min(log_bytes, kMaxJitLog), '\0');
  CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* values[] = {log.data(), reinterpret_cast<void*>(static_cast<uintptr_t>(log.size()))};
  CUmodule mod = nullptr;
  const CUresult rc =
      cx.backend().cuModuleLoadDataEx(&mod, image.data(), log.empty() ? 0 : 2, options, values);
  uint64_t id = 0;
  if (rc == CUDA_SUCCESS) {
    id = cx.export_handle(HandleKind::kModule, mod);
    cx.hold(HandleKind::kModule, mod, &held);
  } else {
    cx.refund(&held);
  }
  const auto n = static_cast<uint32_t>(strnlen(log.data(), log.size()));
  out.put(static_cast<uint32_t>(rc));
  out.put(id);
  out.put(n);
  out.put_bytes(log.data(), n);
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// Libraries

CUresult custom_cuLibraryLoadData(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  std::span<const uint8_t> code;
  if (!in.get_bulk(&code) || !in.at_end()) return in.malformed();
  if (CUresult e = check_image(cx, code)) return e;
  if (CUresult e = cx.check_room(HandleKind::kLibrary)) return e;
  SessionContext::Charge held;
  if (CUresult e = cx.precharge(cx.image_globals_bytes(), &held)) return e;
  CUlibrary lib = nullptr;
  if (CUresult e = cx.backend().cuLibraryLoadData(&lib, code.data(), nullptr, nullptr, 0, nullptr,
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
CUresult kernel_or_function(SessionContext& cx, uint64_t id, CUkernel* kernel, CUfunction* func) {
  if (cx.lookup(HandleKind::kKernel, id, kernel) == CUDA_SUCCESS) return CUDA_SUCCESS;
  *kernel = nullptr;
  return cx.lookup(HandleKind::kFunction, id, func);
}
}  // namespace

// A kernel's parameter sizes, from the backend once per function handle.
CUresult kernel_layout(SessionContext& cx, uint64_t id,
                       const std::vector<formats::ParamSlot>** out) {
  if (const auto* known = cx.params_of(id)) {
    *out = known;
    return CUDA_SUCCESS;
  }
  CUkernel kernel = nullptr;
  CUfunction func = nullptr;
  if (CUresult e = kernel_or_function(cx, id, &kernel, &func)) return e;
  const bool is_kernel = kernel != nullptr;
  std::vector<formats::ParamSlot> slots;
  for (size_t i = 0; i < formats::kMaxParams; ++i) {
    size_t off = 0, size = 0;
    CUresult rc = is_kernel ? cx.backend().cuKernelGetParamInfo(kernel, i, &off, &size)
                            : cx.backend().cuFuncGetParamInfo(func, i, &off, &size);
    if (rc == CUDA_ERROR_INVALID_VALUE) break;  // past the last parameter
    if (rc != CUDA_SUCCESS) return rc;
    if (off > UINT32_MAX || size > UINT32_MAX) return CUDA_ERROR_INVALID_VALUE;
    slots.push_back({static_cast<uint32_t>(off), static_cast<uint32_t>(size)});
  }
  *out = cx.remember_params(id, std::move(slots));
  return CUDA_SUCCESS;
}

namespace {

CUresult param_layout(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  uint64_t id = 0;
  if (CUresult e = read_kernel_id(in, &id)) return e;
  const std::vector<formats::ParamSlot>* slots = nullptr;
  if (CUresult e = kernel_layout(cx, id, &slots)) return e;
  out.put(static_cast<uint32_t>(slots->size()));
  out.put_bytes(slots->data(), slots->size() * sizeof(formats::ParamSlot));
  return CUDA_SUCCESS;
}

// Kernel names. in: u64 id of a kernel or function of the session. out: u32 n, n name bytes.

constexpr size_t kMaxNameBytes = 64 << 10;

CUresult kernel_name(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  uint64_t id = 0;
  if (CUresult e = read_kernel_id(in, &id)) return e;
  CUkernel kernel = nullptr;
  CUfunction func = nullptr;
  if (CUresult e = kernel_or_function(cx, id, &kernel, &func)) return e;
  const char* name = nullptr;
  if (CUresult e = kernel ? cx.backend().cuKernelGetName(&name, kernel)
                          : cx.backend().cuFuncGetName(&name, func)) {
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

CUresult custom_cuFuncGetParamInfo(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  return param_layout(cx, in, out);
}

CUresult custom_cuKernelGetParamInfo(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  return param_layout(cx, in, out);
}

CUresult custom_cuFuncGetName(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  return kernel_name(cx, in, out);
}

CUresult custom_cuKernelGetName(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  return kernel_name(cx, in, out);
}

// ---------------------------------------------------------------------------------------------
// Module globals: the generated wire format (u8 dptr present, u8 bytes present, u64 handle id,
// string name; reply: the present outputs). A global's range becomes memory the session may copy
// to and from (cudaMemcpyToSymbol passes the range checks), never memory it may free.

namespace {
template <typename H, typename Fn>
CUresult get_global(SessionContext& cx, ArgReader& in, ReplyWriter& out, HandleKind kind,
                    Fn&& query) {
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

CUresult custom_cuModuleGetGlobal_v2(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  return get_global<CUmodule>(cx, in, out, HandleKind::kModule,
                              [&](CUdeviceptr* p, size_t* n, CUmodule m, const char* name) {
                                return cx.backend().cuModuleGetGlobal_v2(p, n, m, name);
                              });
}

// Same wire format: the range of a __managed__ variable is memory the session copies to and from
// (the client keeps a host mirror of it), as a global's is.
CUresult custom_cuLibraryGetManaged(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  return get_global<CUlibrary>(cx, in, out, HandleKind::kLibrary,
                               [&](CUdeviceptr* p, size_t* n, CUlibrary l, const char* name) {
                                 return cx.backend().cuLibraryGetManaged(p, n, l, name);
                               });
}

CUresult custom_cuLibraryGetGlobal(SessionContext& cx, ArgReader& in, ReplyWriter& out) {
  return get_global<CUlibrary>(cx, in, out, HandleKind::kLibrary,
                               [&](CUdeviceptr* p, size_t* n, CUlibrary l, const char* name) {
                                 return cx.backend().cuLibraryGetGlobal(p, n, l, name);
                               });
}

}  // namespace cuwire::server
