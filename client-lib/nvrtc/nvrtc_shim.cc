// libcuwire_nvrtc.so: preloaded by `cuwire run` beside cuwire's libcuda.so.1. A program that
// compiles with NVRTC for a real architecture (--gpu-architecture=sm_XY) and loads the CUBIN
// (nvrtcGetCUBIN, then cuModuleLoadData) hands the driver machine code only; the sim backend
// runs PTX. NVRTC makes the PTX of such a compilation too, so this library keeps it: its
// nvrtcGetCUBIN calls NVRTC's, and remembers the CUBIN's bytes with the program's PTX.
// cuwire's libcuda.so.1 asks for it (cuwire_nvrtc_ptx_of_cubin, found with dlsym) when it loads
// an ELF image and the server's backend is the sim, and sends the PTX instead; the cuda
// backend gets the CUBIN as it is. Nothing else of NVRTC is changed, and a program that does
// not use NVRTC never calls in here.
//
// Thread-safety: both functions may be called from any thread (one lock around the table).

#include <dlfcn.h>
#include <nvrtc.h>

#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct Kept {
  std::string cubin;
  std::string ptx;
};

struct Table {
  std::mutex mu;
  std::vector<Kept> kept;  // guarded by mu; newest last
};

Table& table() {
  static Table* t = new Table();  // leaked: modules may be loaded from atexit handlers
  return *t;
}

// A program compiles a handful of kernels; a long-running one that compiles without end keeps
// its newest.
constexpr size_t kMaxKept = 256;

template <typename F>
F next(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_NEXT, name));
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) nvrtcResult nvrtcGetCUBIN(nvrtcProgram prog, char* cubin) {
  using GetBytes = nvrtcResult (*)(nvrtcProgram, char*);
  using GetSize = nvrtcResult (*)(nvrtcProgram, size_t*);
  static const auto real = next<GetBytes>("nvrtcGetCUBIN");
  static const auto cubin_size = next<GetSize>("nvrtcGetCUBINSize");
  static const auto ptx_size = next<GetSize>("nvrtcGetPTXSize");
  static const auto get_ptx = next<GetBytes>("nvrtcGetPTX");
  if (!real) return NVRTC_ERROR_INTERNAL_ERROR;
  const nvrtcResult rc = real(prog, cubin);
  if (rc != NVRTC_SUCCESS || !cubin || !cubin_size || !ptx_size || !get_ptx) return rc;
  size_t n = 0, p = 0;
  if (cubin_size(prog, &n) != NVRTC_SUCCESS || n == 0) return rc;
  if (ptx_size(prog, &p) != NVRTC_SUCCESS || p <= 1) return rc;
  Kept k{std::string(cubin, n), std::string(p, '\0')};
  if (get_ptx(prog, k.ptx.data()) != NVRTC_SUCCESS) return rc;
  k.ptx.resize(std::strlen(k.ptx.c_str()));
  Table& t = table();
  std::lock_guard lock(t.mu);
  if (t.kept.size() >= kMaxKept) t.kept.erase(t.kept.begin());
  t.kept.push_back(std::move(k));
  return rc;
}

// The PTX of the NVRTC compilation whose CUBIN is the `size` bytes at `image`; null if none.
// The text stays valid while the process lives unless kMaxKept newer CUBINs are made.
__attribute__((visibility("default"))) const char* cuwire_nvrtc_ptx_of_cubin(const void* image,
                                                                             size_t size) {
  if (!image || size == 0) return nullptr;
  Table& t = table();
  std::lock_guard lock(t.mu);
  for (auto it = t.kept.rbegin(); it != t.kept.rend(); ++it) {
    if (it->cubin.size() == size && std::memcmp(it->cubin.data(), image, size) == 0) {
      return it->ptx.c_str();
    }
  }
  return nullptr;
}

}  // extern "C"
