// Module and library loading from files and with JIT options (cuModuleLoad, cuModuleLoadDataEx,
// cuLibraryLoadData, cuLibraryLoadFromFile), and what functions and kernels report of
// themselves: parameter layouts and names.

#include <cuda.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "client-lib/core/client_call.h"
#include "client-lib/core/client_state.h"
#include "protocol/wire_formats.h"

using namespace cuwire;
using namespace cuwire::client;

namespace {

uint64_t handle_id(const void* h) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(h)); }

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

// ---- modules

CUresult CUDAAPI cuModuleLoad(CUmodule* module, const char* fname) {
  std::string bytes;
  if (CUresult e = read_file(fname, &bytes)) return e;
  return cuModuleLoadData(module, bytes.data());
}

// JIT options (optimisation levels and the like) are not sent: the server compiles with its
// defaults. The options CUDA writes back are answered: the error log holds what the server's
// JIT said (a PTX module's unresolved extern function, a line it could not parse), the info log
// nothing, their sizes the bytes written, the wall time 0 ms. The load's result comes inside
// the reply, with the log (server/calls/modules.cc).
CUresult CUDAAPI cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int numOptions,
                                    CUjit_option* options, void** optionValues) {
  if (!module || (numOptions && (!options || !optionValues))) return CUDA_ERROR_INVALID_VALUE;
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
  const size_t error_log = logs[1] ? sizes[1] : 0;
  ArgWriter w(CallId::k_cuModuleLoadDataEx);
  if (CUresult e = w.image(image)) return e;
  w.put(static_cast<uint32_t>(std::min<size_t>(error_log, UINT32_MAX)));
  OutReader r;
  CUresult rc = w.call(&r);
  std::string text[2];
  if (rc == CUDA_SUCCESS) {
    uint32_t result = 0, n = 0;
    uint64_t id = 0;
    r.get_array(&result, 1);
    r.get_array(&id, 1);
    r.get_array(&n, 1);
    if (!r.ok() || n > r.remaining()) return CUDA_ERROR_UNKNOWN;
    text[1].resize(n);
    r.get_array(text[1].data(), n);
    if (CUresult e = r.finish()) return e;
    rc = static_cast<CUresult>(result);
    if (rc == CUDA_SUCCESS) *module = reinterpret_cast<CUmodule>(id);
  }
  if (rc != CUDA_SUCCESS && text[1].empty()) {
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
  return w.call_for_handle(library);
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
  const std::vector<formats::ParamSlot>* slots = nullptr;
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
  return cuFuncGetParamInfo(reinterpret_cast<CUfunction>(kernel), paramIndex, paramOffset,
                            paramSize);
}

}  // extern "C"
