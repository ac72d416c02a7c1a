// Modules and libraries: image parsing (PTX, cubin, fatbin), per-context instances with their
// global variables in device memory, functions, kernels and their attributes.

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>

#include "protocol/image.h"
#include "server/backend/sim/sim_gpu.h"
#include "server/session/bulk_extent.h"

namespace cuwire::server::sim {
namespace {

constexpr uint32_t kPtxRegsEstimate = 32;
constexpr int kSharedPerBlock = 48 << 10;
constexpr size_t kMaxImageFile = size_t{1} << 30;
// __managed__ variables start on a 64 KiB boundary (the largest host page a client may have)
// and fill whole 4 KiB pages: no other allocation shares a host page of its mirror.
constexpr uint64_t kManagedAlign = uint64_t{64} << 10;
constexpr uint64_t kManagedPage = uint64_t{4} << 10;

// The architecture of a PTX text's `.target sm_NN[a|f]` (80 for sm_80, 90 for sm_90a); 0 when it
// names none.
uint32_t ptx_target_arch(std::string_view text) {
  for (size_t at = text.find(".target"); at != std::string_view::npos;
       at = text.find(".target", at + 7)) {
    // A directive: at the start of a line, after blanks.
    size_t b = at;
    while (b > 0 && (text[b - 1] == ' ' || text[b - 1] == '\t')) --b;
    if (b > 0 && text[b - 1] != '\n') continue;
    size_t i = at + 7;
    while (i < text.size() && (text[i] == ' ' || text[i] == '\t')) ++i;
    if (text.compare(i, 3, "sm_") != 0) return 0;
    uint32_t arch = 0;
    for (i += 3; i < text.size() && text[i] >= '0' && text[i] <= '9' && arch < 10000; ++i)
      arch = arch * 10 + static_cast<uint32_t>(text[i] - '0');
    return arch;
  }
  return 0;
}

// *why: what was wrong with an image refused (a JIT error log's text).
CUresult image_from_ptx(std::string_view text, std::shared_ptr<const Image>* out,
                        std::string* why) {
  std::string error;
  std::shared_ptr<const ptx::Module> m = ptx::Module::parse(text, &error);
  if (!m) {
    spdlog::warn("sim: PTX rejected: {}", error);
    *why = "sim: PTX rejected: " + error;
    return CUDA_ERROR_INVALID_PTX;
  }
  auto img = std::make_shared<Image>();
  img->ptx = m;
  const uint32_t target = ptx_target_arch(text);
  for (const ptx::KernelInfo& k : m->kernels()) {
    KernelDesc d;
    d.name = k.name;
    d.params = k.params;
    d.param_bytes = k.param_bytes;
    d.static_shared = k.static_shared_bytes;
    d.local_bytes = k.local_bytes;
    d.thread_bytes = k.thread_bytes;
    d.warp_bytes = k.warp_bytes;
    d.max_threads = k.max_threads;
    d.cluster = k.cluster;
    d.explicit_cluster = k.explicit_cluster;
    // PTX declares virtual registers by the hundred; the machine registers ptxas would give the
    // kernel are unknown here. Count a typical 32, which never refuses a launch of up to 1024
    // threads (65536 per SM) and keeps the occupancy answers sensible.
    d.num_regs = std::min<uint32_t>(k.num_regs, kPtxRegsEstimate);
    d.target_arch = target;
    img->kernels.push_back(std::move(d));
  }
  for (const ptx::VariableInfo& v : m->variables())
    img->vars.push_back(VarDesc{v.name, v.size, v.is_const, v.initializer, v.is_managed});
  *out = std::move(img);
  return CUDA_SUCCESS;
}

// A cubin without PTX: its kernels can be named and inspected, not run.
CUresult image_from_elf(std::span<const uint8_t> elf, std::shared_ptr<const Image>* out,
                        std::string* why) {
  std::vector<image::ElfKernel> kernels;
  std::vector<image::ElfGlobal> globals;
  std::string error;
  if (!image::elf_kernels(elf, &kernels, &error) || !image::elf_globals(elf, &globals, &error)) {
    spdlog::warn("sim: cubin rejected: {}", error);
    *why = "sim: cubin rejected: " + error;
    return CUDA_ERROR_INVALID_IMAGE;
  }
  auto img = std::make_shared<Image>();
  for (const image::ElfKernel& k : kernels) {
    KernelDesc d;
    d.name = k.name;
    d.param_bytes = k.param_bytes;
    d.num_regs = k.num_regs;
    for (const image::KernelParam& p : k.params) {
      ptx::ParamInfo pi;
      pi.offset = p.offset;
      pi.size = p.size;
      pi.align = p.size >= 8 ? 8 : (p.size >= 4 ? 4 : 1);
      d.params.push_back(pi);
    }
    img->kernels.push_back(std::move(d));
  }
  for (const image::ElfGlobal& g : globals)
    img->vars.push_back(VarDesc{g.name, g.size, g.constant, {}});
  *out = std::move(img);
  return CUDA_SUCCESS;
}

CUresult parse_image(std::span<const uint8_t> bytes, uint32_t arch,
                     std::shared_ptr<const Image>* out, std::string* why) {
  switch (image::classify(bytes)) {
    case image::Kind::kPtx: {
      auto nul = std::find(bytes.begin(), bytes.end(), uint8_t{0});
      std::string_view text(reinterpret_cast<const char*>(bytes.data()),
                            static_cast<size_t>(nul - bytes.begin()));
      return image_from_ptx(text, out, why);
    }
    case image::Kind::kElf:
      return image_from_elf(bytes, out, why);
    case image::Kind::kFatbin: {
      std::string ptx, error;
      // The newest PTX the device's compute capability may run, as the driver picks; newer PTX
      // is still worth a try (the interpreter does not check the target).
      if (image::extract_ptx(bytes, &ptx, &error, arch) ||
          image::extract_ptx(bytes, &ptx, &error)) {
        return image_from_ptx(ptx, out, why);
      }
      std::vector<image::FatbinEntry> entries;
      if (!image::parse_fatbin(bytes, &entries, &error)) {
        spdlog::warn("sim: fatbin rejected: {}", error);
        *why = "sim: fatbin rejected: " + error;
        return CUDA_ERROR_INVALID_IMAGE;
      }
      for (const image::FatbinEntry& e : entries) {
        if (e.kind == image::EntryKind::kElf) return image_from_elf(e.payload, out, why);
      }
      *why = "sim: the fatbin holds neither PTX nor a cubin";
      return CUDA_ERROR_NO_BINARY_FOR_GPU;
    }
    default:
      return CUDA_ERROR_INVALID_IMAGE;
  }
}

}  // namespace

CUresult SimGpu::load_image(const void* image, std::shared_ptr<const Image>* out,
                            std::string* why) {
  std::string unused;
  if (!why) why = &unused;
  if (!image) return CUDA_ERROR_INVALID_VALUE;
  const auto* p = static_cast<const uint8_t*>(image);
  size_t len = 0;
  // Bytes a client sent are bounded by the call's bulk; only in-process callers are trusted
  // to hand over a well-formed image that sizes itself.
  if (!server::bulk_extent(image, &len)) {
    if (image::classify(image) == image::Kind::kFatbinWrapper)
      p = static_cast<const uint8_t*>(image::resolve_wrapper(image));
    len = p ? image::image_size(p) : 0;
  }
  if (len == 0) return CUDA_ERROR_INVALID_IMAGE;
  return parse_image({p, len}, profile_.arch(), out, why);
}

CUresult SimGpu::load_file(const char* path, std::shared_ptr<const Image>* out) {
  if (!path) return CUDA_ERROR_INVALID_VALUE;
  std::ifstream f(path, std::ios::binary);
  if (!f) return CUDA_ERROR_FILE_NOT_FOUND;
  std::vector<uint8_t> bytes;
  char buf[65536];
  while (f.read(buf, sizeof buf) || f.gcount() > 0) {
    bytes.insert(bytes.end(), buf, buf + f.gcount());
    if (bytes.size() > kMaxImageFile) return CUDA_ERROR_INVALID_IMAGE;
  }
  // A .ptx file has no terminating NUL; the parser stops at the end of the span anyway.
  if (bytes.empty()) return CUDA_ERROR_INVALID_IMAGE;
  std::string why;
  return parse_image(bytes, profile_.arch(), out, &why);
}

CUresult SimGpu::instantiate(Context& ctx, std::shared_ptr<const Image> image, Library* lib,
                             Module** out) {
  auto m = std::make_unique<Module>();
  m->ctx = &ctx;
  m->library = lib;
  auto vars = std::make_shared<std::unordered_map<std::string, uint64_t>>();
  for (const VarDesc& v : image->vars) {
    CUdeviceptr p = 0;
    // A __managed__ variable is managed memory on whole pages of its own, so that a client can
    // keep a host mirror of it page by page, as of cuMemAllocManaged's allocations.
    const uint64_t managed_bytes =
        (std::max<uint64_t>(v.size, 1) + kManagedPage - 1) / kManagedPage * kManagedPage;
    CUresult e = v.is_managed
                     ? allocate(ctx, managed_bytes, MemKind::kManaged, nullptr, &p, kManagedAlign)
                     : allocate(ctx, std::max<uint64_t>(v.size, 1), MemKind::kDevice, nullptr, &p);
    if (e != CUDA_SUCCESS) {
      for (CUdeviceptr q : m->var_allocations) free_allocation(q, false);
      return e;
    }
    m->var_allocations.push_back(p);
    if (!v.initializer.empty()) {
      auto a = find(p, 0);
      std::memcpy(a->bytes, v.initializer.data(), std::min<size_t>(v.initializer.size(), a->size));
    }
    (*vars)[v.name] = p;
  }
  m->var_addresses = std::move(vars);
  for (const KernelDesc& k : image->kernels) {
    auto f = std::make_unique<Function>();
    f->module = m.get();
    f->desc = &k;
    m->functions.push_back(std::move(f));
  }
  m->image = std::move(image);
  Module* raw = m.get();
  std::unique_lock lock(mu_);
  for (auto& f : raw->functions) functions_[f.get()] = raw;
  ctx.modules.insert(raw);
  if (lib) lib->instances[&ctx] = raw;
  modules_[raw] = std::move(m);
  *out = raw;
  return CUDA_SUCCESS;
}

void SimGpu::unload_module(Module* m) {
  for (auto& f : m->functions) functions_.erase(f.get());
  for (CUdeviceptr p : m->var_allocations) free_allocation(p, false);
  m->ctx->modules.erase(m);
  if (m->library) m->library->instances.erase(m->ctx);
  modules_.erase(m);
}

CUresult SimGpu::library_module(Context& ctx, Library* lib, Module** out) {
  std::shared_ptr<const Image> image;
  {
    std::shared_lock lock(mu_);
    auto it = lib->instances.find(&ctx);
    if (it != lib->instances.end()) {
      *out = it->second;
      return CUDA_SUCCESS;
    }
    image = lib->image;
  }
  // Libraries are context-independent: each context gets its instance on first use.
  return instantiate(ctx, std::move(image), lib, out);
}

CUresult SimGpu::function_of(CUfunction h, CtxPtr* ctx, Function** out) {
  if (!h) return CUDA_ERROR_INVALID_HANDLE;
  Library* lib = nullptr;
  size_t index = 0;
  {
    std::shared_lock lock(mu_);
    auto it = functions_.find(reinterpret_cast<Function*>(h));
    if (it != functions_.end()) {
      *out = it->first;
      return CUDA_SUCCESS;
    }
    // cudart passes CUkernel handles wherever a CUfunction goes.
    auto k = kernels_.find(reinterpret_cast<Kernel*>(h));
    if (k == kernels_.end()) return CUDA_ERROR_INVALID_HANDLE;
    lib = k->second;
    index = static_cast<size_t>(k->first->desc - lib->image->kernels.data());
  }
  if (!*ctx) {
    if (CUresult e = current(ctx)) return e;
  }
  Module* m = nullptr;
  if (CUresult e = library_module(**ctx, lib, &m)) return e;
  *out = m->functions[index].get();
  return CUDA_SUCCESS;
}

FuncSettings SimGpu::settings_of(CUfunction, const Function& f) {
  // cudart launches through CUkernel handles and sets their attributes per device
  // (cuKernelSetAttribute): those settings apply in every context on that device, to the
  // kernel's function there (cuKernelGetFunction) too, except where the function was given its
  // own (cuFuncSetAttribute, which the driver lets win).
  FuncSettings s;
  if (f.module && f.module->library) {
    const Library& lib = *f.module->library;
    const auto i = static_cast<size_t>(f.desc - lib.image->kernels.data());
    if (i < lib.kernels.size()) {
      const auto& per_device = lib.kernels[i]->per_device;
      auto k = per_device.find(f.module->ctx->device);
      if (k != per_device.end()) s = k->second;
    }
  }
  if (f.set_here & Function::kOwnDynamicShared)
    s.max_dynamic_shared = f.settings.max_dynamic_shared;
  if (f.set_here & Function::kOwnCarveout) s.carveout = f.settings.carveout;
  if (f.set_here & Function::kOwnCache) s.cache = f.settings.cache;
  return s;
}

// ---------------------------------------------------------------------------------------------
// Modules

CUresult SimGpu::cuModuleLoadData(CUmodule* mod, const void* image) {
  return cuModuleLoadDataEx(mod, image, 0, nullptr, nullptr);
}

// JIT options have nothing to tune here; the error log, when one is asked for, says why an
// image did not load (an extern function nobody defines, a line the parser refused).
CUresult SimGpu::cuModuleLoadDataEx(CUmodule* mod, const void* image, unsigned n,
                                    CUjit_option* options, void** values) {
  if (!mod || (n && (!options || !values))) return CUDA_ERROR_INVALID_VALUE;
  char* log = nullptr;
  size_t log_size = 0;
  for (unsigned i = 0; i < n; ++i) {
    if (options[i] == CU_JIT_ERROR_LOG_BUFFER) log = static_cast<char*>(values[i]);
    if (options[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
      log_size = static_cast<unsigned>(reinterpret_cast<uintptr_t>(values[i]));
  }
  std::string why;
  CUresult rc = CUDA_SUCCESS;
  CtxPtr ctx;
  std::shared_ptr<const Image> img;
  Module* m = nullptr;
  if ((rc = current(&ctx)) == CUDA_SUCCESS &&
      (rc = load_image(image, &img, &why)) == CUDA_SUCCESS &&
      (rc = instantiate(*ctx, std::move(img), nullptr, &m)) == CUDA_SUCCESS) {
    *mod = reinterpret_cast<CUmodule>(m);
  }
  size_t written = 0;
  if (log && log_size) {
    written = std::min(log_size - 1, why.size());
    std::memcpy(log, why.data(), written);
    log[written] = '\0';
  }
  for (unsigned i = 0; i < n; ++i) {
    if (options[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
      values[i] = reinterpret_cast<void*>(static_cast<uintptr_t>(written));
  }
  return rc;
}

CUresult SimGpu::cuModuleLoadFatBinary(CUmodule* mod, const void* fatbin) {
  return cuModuleLoadData(mod, fatbin);
}

CUresult SimGpu::cuModuleLoad(CUmodule* mod, const char* fname) {
  if (!mod) return CUDA_ERROR_INVALID_VALUE;
  CtxPtr ctx;
  if (CUresult e = current(&ctx)) return e;
  std::shared_ptr<const Image> img;
  if (CUresult e = load_file(fname, &img)) return e;
  Module* m = nullptr;
  if (CUresult e = instantiate(*ctx, std::move(img), nullptr, &m)) return e;
  *mod = reinterpret_cast<CUmodule>(m);
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuModuleUnload(CUmodule h) {
  std::unique_lock lock(mu_);
  auto it = modules_.find(reinterpret_cast<Module*>(h));
  if (it == modules_.end() || it->second->library) return CUDA_ERROR_INVALID_HANDLE;
  unload_module(it->first);
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuModuleGetLoadingMode(CUmoduleLoadingMode* mode) {
  if (!mode) return CUDA_ERROR_INVALID_VALUE;
  if (!initialized_) return CUDA_ERROR_NOT_INITIALIZED;
  *mode = CU_MODULE_EAGER_LOADING;
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuModuleGetFunction(CUfunction* f, CUmodule h, const char* name) {
  if (!f || !name) return CUDA_ERROR_INVALID_VALUE;
  std::shared_lock lock(mu_);
  auto it = modules_.find(reinterpret_cast<Module*>(h));
  if (it == modules_.end()) return CUDA_ERROR_INVALID_HANDLE;
  for (auto& fn : it->second->functions) {
    if (fn->desc->name == name) {
      *f = reinterpret_cast<CUfunction>(fn.get());
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_NOT_FOUND;
}

CUresult SimGpu::cuModuleGetFunctionCount(unsigned* count, CUmodule h) {
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  std::shared_lock lock(mu_);
  auto it = modules_.find(reinterpret_cast<Module*>(h));
  if (it == modules_.end()) return CUDA_ERROR_INVALID_HANDLE;
  *count = static_cast<unsigned>(it->second->functions.size());
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuModuleEnumerateFunctions(CUfunction* fns, unsigned n, CUmodule h) {
  if (!fns && n) return CUDA_ERROR_INVALID_VALUE;
  std::shared_lock lock(mu_);
  auto it = modules_.find(reinterpret_cast<Module*>(h));
  if (it == modules_.end()) return CUDA_ERROR_INVALID_HANDLE;
  auto& all = it->second->functions;
  if (n < all.size()) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < all.size(); ++i) fns[i] = reinterpret_cast<CUfunction>(all[i].get());
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuModuleGetGlobal_v2(CUdeviceptr* dptr, size_t* bytes, CUmodule h,
                                      const char* name) {
  if (!name) return CUDA_ERROR_INVALID_VALUE;
  std::shared_lock lock(mu_);
  auto it = modules_.find(reinterpret_cast<Module*>(h));
  if (it == modules_.end()) return CUDA_ERROR_INVALID_HANDLE;
  const Module& m = *it->second;
  for (const VarDesc& v : m.image->vars) {
    if (v.name != name) continue;
    if (dptr) *dptr = m.var_addresses->at(v.name);
    if (bytes) *bytes = v.size;
    return CUDA_SUCCESS;
  }
  return CUDA_ERROR_NOT_FOUND;
}

// ---------------------------------------------------------------------------------------------
// Libraries

namespace {
std::unique_ptr<Library> make_library(std::shared_ptr<const Image> img) {
  auto lib = std::make_unique<Library>();
  lib->image = std::move(img);
  for (const KernelDesc& d : lib->image->kernels) {
    auto k = std::make_unique<Kernel>();
    k->library = lib.get();
    k->desc = &d;
    lib->kernels.push_back(std::move(k));
  }
  return lib;
}
}  // namespace

CUresult SimGpu::cuLibraryLoadData(CUlibrary* out, const void* code, CUjit_option*, void**,
                                   unsigned, CUlibraryOption*, void**, unsigned) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  if (!initialized_) return CUDA_ERROR_NOT_INITIALIZED;
  std::shared_ptr<const Image> img;
  if (CUresult e = load_image(code, &img)) return e;
  auto lib = make_library(std::move(img));
  std::unique_lock lock(mu_);
  for (auto& k : lib->kernels) kernels_[k.get()] = lib.get();
  *out = reinterpret_cast<CUlibrary>(lib.get());
  libraries_[lib.get()] = std::move(lib);
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuLibraryLoadFromFile(CUlibrary* out, const char* path, CUjit_option*, void**,
                                       unsigned, CUlibraryOption*, void**, unsigned) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  if (!initialized_) return CUDA_ERROR_NOT_INITIALIZED;
  std::shared_ptr<const Image> img;
  if (CUresult e = load_file(path, &img)) return e;
  auto lib = make_library(std::move(img));
  std::unique_lock lock(mu_);
  for (auto& k : lib->kernels) kernels_[k.get()] = lib.get();
  *out = reinterpret_cast<CUlibrary>(lib.get());
  libraries_[lib.get()] = std::move(lib);
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuLibraryUnload(CUlibrary h) {
  std::unique_lock lock(mu_);
  auto it = libraries_.find(reinterpret_cast<Library*>(h));
  if (it == libraries_.end()) return CUDA_ERROR_INVALID_HANDLE;
  Library* lib = it->first;
  while (!lib->instances.empty()) unload_module(lib->instances.begin()->second);
  for (auto& k : lib->kernels) kernels_.erase(k.get());
  libraries_.erase(it);
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuLibraryGetKernel(CUkernel* out, CUlibrary h, const char* name) {
  if (!out || !name) return CUDA_ERROR_INVALID_VALUE;
  std::shared_lock lock(mu_);
  auto it = libraries_.find(reinterpret_cast<Library*>(h));
  if (it == libraries_.end()) return CUDA_ERROR_INVALID_HANDLE;
  for (auto& k : it->second->kernels) {
    if (k->desc->name == name) {
      *out = reinterpret_cast<CUkernel>(k.get());
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_NOT_FOUND;
}

CUresult SimGpu::cuLibraryGetKernelCount(unsigned* count, CUlibrary h) {
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  std::shared_lock lock(mu_);
  auto it = libraries_.find(reinterpret_cast<Library*>(h));
  if (it == libraries_.end()) return CUDA_ERROR_INVALID_HANDLE;
  *count = static_cast<unsigned>(it->second->kernels.size());
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuLibraryEnumerateKernels(CUkernel* out, unsigned n, CUlibrary h) {
  if (!out && n) return CUDA_ERROR_INVALID_VALUE;
  std::shared_lock lock(mu_);
  auto it = libraries_.find(reinterpret_cast<Library*>(h));
  if (it == libraries_.end()) return CUDA_ERROR_INVALID_HANDLE;
  auto& all = it->second->kernels;
  if (n < all.size()) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < all.size(); ++i) out[i] = reinterpret_cast<CUkernel>(all[i].get());
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuLibraryGetModule(CUmodule* out, CUlibrary h) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  CtxPtr ctx;
  if (CUresult e = current(&ctx)) return e;
  Library* lib;
  {
    std::shared_lock lock(mu_);
    auto it = libraries_.find(reinterpret_cast<Library*>(h));
    if (it == libraries_.end()) return CUDA_ERROR_INVALID_HANDLE;
    lib = it->first;
  }
  Module* m = nullptr;
  if (CUresult e = library_module(*ctx, lib, &m)) return e;
  *out = reinterpret_cast<CUmodule>(m);
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuKernelGetFunction(CUfunction* out, CUkernel k) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  {
    std::shared_lock lock(mu_);
    if (!kernels_.count(reinterpret_cast<Kernel*>(k))) return CUDA_ERROR_INVALID_HANDLE;
  }
  CtxPtr ctx;
  Function* f = nullptr;
  if (CUresult e = function_of(reinterpret_cast<CUfunction>(k), &ctx, &f)) return e;
  *out = reinterpret_cast<CUfunction>(f);
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuLibraryGetGlobal(CUdeviceptr* dptr, size_t* bytes, CUlibrary h,
                                    const char* name) {
  CUmodule m;
  if (CUresult e = cuLibraryGetModule(&m, h)) return e;
  return cuModuleGetGlobal_v2(dptr, bytes, m, name);
}

// A __managed__ variable of the library, in the current context's instance of it; other
// variables are not found here (cuLibraryGetGlobal answers for them).
CUresult SimGpu::cuLibraryGetManaged(CUdeviceptr* dptr, size_t* bytes, CUlibrary h,
                                     const char* name) {
  if (!name) return CUDA_ERROR_INVALID_VALUE;
  CUmodule m;
  if (CUresult e = cuLibraryGetModule(&m, h)) return e;
  std::shared_lock lock(mu_);
  auto it = modules_.find(reinterpret_cast<Module*>(m));
  if (it == modules_.end()) return CUDA_ERROR_INVALID_HANDLE;
  const Module& mod = *it->second;
  for (const VarDesc& v : mod.image->vars) {
    if (v.name != name) continue;
    if (!v.is_managed) return CUDA_ERROR_NOT_FOUND;
    if (dptr) *dptr = mod.var_addresses->at(v.name);
    if (bytes) *bytes = v.size;
    return CUDA_SUCCESS;
  }
  return CUDA_ERROR_NOT_FOUND;
}

CUresult SimGpu::kernel_settings(CUkernel k, CUdevice dev, FuncSettings** out,
                                 const KernelDesc** d) {
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  auto it = kernels_.find(reinterpret_cast<Kernel*>(k));
  if (it == kernels_.end()) return CUDA_ERROR_INVALID_HANDLE;
  *out = &it->first->per_device[dev];
  *d = it->first->desc;
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuKernelGetAttribute(int* pi, CUfunction_attribute a, CUkernel k, CUdevice dev) {
  if (!pi) return CUDA_ERROR_INVALID_VALUE;
  std::unique_lock lock(mu_);
  FuncSettings* s;
  const KernelDesc* d;
  if (CUresult e = kernel_settings(k, dev, &s, &d)) return e;
  return get_func_attribute(pi, a, *d, *s);
}

CUresult SimGpu::cuKernelSetAttribute(CUfunction_attribute a, int v, CUkernel k, CUdevice dev) {
  std::unique_lock lock(mu_);
  FuncSettings* s;
  const KernelDesc* d;
  if (CUresult e = kernel_settings(k, dev, &s, &d)) return e;
  return set_func_attribute(a, v, *d, s);
}

CUresult SimGpu::cuKernelSetCacheConfig(CUkernel k, CUfunc_cache config, CUdevice dev) {
  if (config < CU_FUNC_CACHE_PREFER_NONE || config > CU_FUNC_CACHE_PREFER_EQUAL)
    return CUDA_ERROR_INVALID_VALUE;
  std::unique_lock lock(mu_);
  FuncSettings* s;
  const KernelDesc* d;
  if (CUresult e = kernel_settings(k, dev, &s, &d)) return e;
  s->cache = config;
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuKernelGetName(const char** name, CUkernel k) {
  if (!name) return CUDA_ERROR_INVALID_VALUE;
  std::shared_lock lock(mu_);
  auto it = kernels_.find(reinterpret_cast<Kernel*>(k));
  if (it == kernels_.end()) return CUDA_ERROR_INVALID_HANDLE;
  *name = it->first->desc->name.c_str();
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuKernelGetParamInfo(CUkernel k, size_t index, size_t* offset, size_t* size) {
  std::shared_lock lock(mu_);
  auto it = kernels_.find(reinterpret_cast<Kernel*>(k));
  if (it == kernels_.end()) return CUDA_ERROR_INVALID_HANDLE;
  const KernelDesc& d = *it->first->desc;
  if (index >= d.params.size()) return CUDA_ERROR_INVALID_VALUE;
  if (offset) *offset = d.params[index].offset;
  if (size) *size = d.params[index].size;
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// Functions

CUresult SimGpu::get_func_attribute(int* pi, CUfunction_attribute a, const KernelDesc& d,
                                    const FuncSettings& s) {
  switch (a) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: {
      int n = d.max_threads ? static_cast<int>(std::min<uint32_t>(d.max_threads, 1024)) : 1024;
      // Registers bound the block too: 64 Ki per SM, allocated per warp in 256-register units.
      if (d.num_regs > 0) {
        int per_warp = static_cast<int>((d.num_regs * 32 + 255) / 256 * 256);
        n = std::min(n, 65536 / per_warp * 32);
      }
      *pi = n;
      break;
    }
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES:
      *pi = static_cast<int>(d.static_shared);
      break;
    case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES:
      *pi = 0;
      break;
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES:
      *pi = static_cast<int>(d.local_bytes);
      break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS:
      *pi = static_cast<int>(d.num_regs);
      break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION:
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION:
      // What the image was built for, as the driver reports a function's (libraries compare
      // it with the architectures they were compiled for: CUB's dispatch does).
      *pi = static_cast<int>(d.target_arch ? d.target_arch : profile_.arch());
      break;
    case CU_FUNC_ATTRIBUTE_CACHE_MODE_CA:
      *pi = 0;
      break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
      *pi = s.max_dynamic_shared >= 0
                ? s.max_dynamic_shared
                : std::max(0, kSharedPerBlock - static_cast<int>(d.static_shared));
      break;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
      *pi = s.carveout;
      break;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET:
      *pi = d.explicit_cluster ? 1 : 0;
      break;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
      *pi = static_cast<int>(d.cluster.x);
      break;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
      *pi = static_cast<int>(d.cluster.y);
      break;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
      *pi = static_cast<int>(d.cluster.z);
      break;
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
      *pi = 0;
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult SimGpu::set_func_attribute(CUfunction_attribute a, int v, const KernelDesc& d,
                                    FuncSettings* s, uint8_t* own) {
  uint8_t unused = 0;
  if (!own) own = &unused;
  switch (a) {
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
      if (v < 0 || static_cast<int64_t>(v) + d.static_shared > profile_.shared_per_block_optin)
        return CUDA_ERROR_INVALID_VALUE;
      s->max_dynamic_shared = v;
      *own |= Function::kOwnDynamicShared;
      return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
      if (v < -1 || v > 100) return CUDA_ERROR_INVALID_VALUE;
      s->carveout = v;
      *own |= Function::kOwnCarveout;
      return CUDA_SUCCESS;
    default:
      // Read-only attributes, and cluster attributes (clusters are not simulated).
      return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult SimGpu::cuFuncGetAttribute(int* pi, CUfunction_attribute a, CUfunction h) {
  if (!pi) return CUDA_ERROR_INVALID_VALUE;
  CtxPtr ctx;
  Function* f = nullptr;
  if (CUresult e = function_of(h, &ctx, &f)) return e;
  std::shared_lock lock(mu_);
  return get_func_attribute(pi, a, *f->desc, settings_of(h, *f));
}

CUresult SimGpu::cuFuncSetAttribute(CUfunction h, CUfunction_attribute a, int v) {
  CtxPtr ctx;
  Function* f = nullptr;
  if (CUresult e = function_of(h, &ctx, &f)) return e;
  std::unique_lock lock(mu_);
  return set_func_attribute(a, v, *f->desc, &f->settings, &f->set_here);
}

CUresult SimGpu::cuFuncSetCacheConfig(CUfunction h, CUfunc_cache config) {
  if (config < CU_FUNC_CACHE_PREFER_NONE || config > CU_FUNC_CACHE_PREFER_EQUAL)
    return CUDA_ERROR_INVALID_VALUE;
  CtxPtr ctx;
  Function* f = nullptr;
  if (CUresult e = function_of(h, &ctx, &f)) return e;
  std::unique_lock lock(mu_);
  f->settings.cache = config;
  f->set_here |= Function::kOwnCache;
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuFuncSetSharedMemConfig(CUfunction h, CUsharedconfig config) {
  if (config < CU_SHARED_MEM_CONFIG_DEFAULT_BANK_SIZE ||
      config > CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE)
    return CUDA_ERROR_INVALID_VALUE;
  CtxPtr ctx;
  Function* f = nullptr;
  return function_of(h, &ctx, &f);
}

CUresult SimGpu::cuFuncGetModule(CUmodule* mod, CUfunction h) {
  if (!mod) return CUDA_ERROR_INVALID_VALUE;
  CtxPtr ctx;
  Function* f = nullptr;
  if (CUresult e = function_of(h, &ctx, &f)) return e;
  *mod = reinterpret_cast<CUmodule>(f->module);
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuFuncGetName(const char** name, CUfunction h) {
  if (!name) return CUDA_ERROR_INVALID_VALUE;
  CtxPtr ctx;
  Function* f = nullptr;
  if (CUresult e = function_of(h, &ctx, &f)) return e;
  *name = f->desc->name.c_str();
  return CUDA_SUCCESS;
}

// The sim loads a module's functions with it: every function is loaded.
CUresult SimGpu::cuFuncIsLoaded(CUfunctionLoadingState* state, CUfunction h) {
  if (!state) return CUDA_ERROR_INVALID_VALUE;
  CtxPtr ctx;
  Function* f = nullptr;
  if (CUresult e = function_of(h, &ctx, &f)) return e;
  *state = CU_FUNCTION_LOADING_STATE_LOADED;
  return CUDA_SUCCESS;
}

CUresult SimGpu::cuFuncLoad(CUfunction h) {
  CtxPtr ctx;
  Function* f = nullptr;
  return function_of(h, &ctx, &f);
}

CUresult SimGpu::cuFuncGetParamInfo(CUfunction h, size_t index, size_t* offset, size_t* size) {
  CtxPtr ctx;
  Function* f = nullptr;
  if (CUresult e = function_of(h, &ctx, &f)) return e;
  if (index >= f->desc->params.size()) return CUDA_ERROR_INVALID_VALUE;
  if (offset) *offset = f->desc->params[index].offset;
  if (size) *size = f->desc->params[index].size;
  return CUDA_SUCCESS;
}

}  // namespace cuwire::server::sim
